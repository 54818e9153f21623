#!/usr/bin/env bash
# Installs the dependencies, builds attune (warnings as errors) and runs every
# test, lint included. GPU tests skip with a reason where no GPU exists. Then
# the sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer, clang):
# the unit tests that run no kernel, and a short run of every fuzz target
# (docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
# attune-gen from the main build: a build tool, and the slowest to compile.
cmake --preset sanitize -DATTUNE_GEN_EXECUTABLE="$PWD/build/ci/generator/attune-gen"
cmake --build --preset sanitize -j "$(nproc)"
ctest --preset sanitize -j "$(nproc)"
