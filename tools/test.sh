#!/usr/bin/env bash
# Installs the dependencies, builds attune (warnings as errors) and runs every
# test, lint included. GPU tests skip with a reason where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset ci
cmake --build --preset ci -j "$(nproc)"
ctest --preset ci -j "$(nproc)"
