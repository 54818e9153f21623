#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, in one run (under 10 minutes on an H200):
# builds attune (or reuses a build tree carried there), runs the GPU tests
# (ctest -L gpu: the emulator-checked covering set and every d64 variant on the
# GPU against the fp64 reference), times the heuristic variant and the best of
# a small sweep against PyTorch SDPA (flash and cuDNN) on the same tensors, and
# writes a Markdown report into DIR.
#
#   tools/gpu_check.sh DIR
#
# The device machines of this workplace cannot install packages: build there
# with what the image has (CMake, Ninja, CUDA), or set ATTUNE_GPU_BUILD to a
# build tree prepared elsewhere and carried along.
set -euo pipefail
out="${1:?usage: tools/gpu_check.sh DIR}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
build="${ATTUNE_GPU_BUILD:-build/gpu}"

if [ ! -x "$build/cli/attune" ] || [ ! -f "$build/runtime/libattune.so" ]; then
  echo "gpu_check: building in $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTUNE_BUILD_BENCHMARKS=OFF >"$out/configure.log"
  cmake --build "$build" -j "$(nproc)" >"$out/build.log"
fi

echo "gpu_check: doctor"
"$build/cli/attune" doctor | tee "$out/doctor.txt"

echo "gpu_check: GPU tests (ctest -L gpu)"
status=0
(cd "$build" && ctest -L gpu --output-on-failure --timeout 400) >"$out/gpu_tests.log" 2>&1 || status=1
tail -n 5 "$out/gpu_tests.log"

echo "gpu_check: timing against PyTorch SDPA"
PYTHONUNBUFFERED=1 python3 tools/gpu_check.py --attune "$build/cli/attune" --lib "$build/runtime/libattune.so" \
  --out "$out" || status=1

{
  echo
  echo "## GPU tests"
  echo
  echo '```'
  tail -n 20 "$out/gpu_tests.log"
  echo '```'
} >>"$out/report.md"
echo "gpu_check: report in $out/report.md (status $status)"
exit "$status"
