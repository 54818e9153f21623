#!/usr/bin/env bash
# Installs the dependencies, builds attune (warnings as errors) and runs every
# test, lint included. GPU tests skip with a reason where no GPU exists. Then
# the sanitizer build (AddressSanitizer + UndefinedBehaviorSanitizer, clang):
# the unit tests that run no kernel, and a short run of every fuzz target
# (docs/reliability.md). The Python package is installed into the python3 on
# PATH (with PyTorch) and tested there; its tests fail rather than skip when
# torch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python="$(command -v python3)"
mkdir -p build
# PyTorch is a large download: fetched while the Debian packages install and
# the C++ builds (after them when this python3 has no pip yet).
early=0
if "$python" -m pip --version >/dev/null 2>&1; then
  bash tools/setup_python.sh "$python" >build/setup_python.log 2>&1 &
  setup_python=$!
  early=1
fi
bash tools/setup.sh
if [ "$early" = 0 ]; then
  bash tools/setup_python.sh "$python" >build/setup_python.log 2>&1 &
  setup_python=$!
fi
cmake --preset ci -DATTUNE_PACKAGE_PYTHON="$python"
cmake --build --preset ci -j "$(nproc)"
if ! wait "$setup_python"; then
  cat build/setup_python.log >&2
  echo "test: installing the Python dependencies failed" >&2
  exit 1
fi
cat build/setup_python.log
bash tools/python_install.sh build/ci "$python"
export ATTUNE_REQUIRE_TORCH=1
ctest --preset ci -j "$(nproc)"
# attune-gen from the main build: a build tool, and the slowest to compile.
cmake --preset sanitize -DATTUNE_GEN_EXECUTABLE="$PWD/build/ci/generator/attune-gen"
cmake --build --preset sanitize -j "$(nproc)"
ctest --preset sanitize -j "$(nproc)"
