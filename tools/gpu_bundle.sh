#!/usr/bin/env bash
# Builds what a GPU run needs and copies it into DIR, relocatable and
# self-contained, so a bare CUDA machine runs it with no build step:
#
#   tools/gpu_bundle.sh [--build-dir B] [--no-build] DIR
#
#   DIR/bin/attune            the CLI                 (RPATH $ORIGIN/../lib)
#   DIR/lib/libattune.so      every attune library and the C API
#   DIR/tests/*               the GPU test programs, and gpu_tests.list naming them
#   DIR/tools/                gpu_check.sh, gpu_check.py, run_gpu_tests.sh
#   DIR/python/attune/        the Python package (gpu_check.py's binding; PYTHONPATH=DIR/python
#                             with ATTUNE_LIBRARY=DIR/lib/libattune.so runs it on the GPU)
#   DIR/BUNDLE                what was built, from which commit
#
# Release build (the `ci` preset's tree, build/ci, unless --build-dir says
# otherwise; --no-build reuses it as it is). SQLite and libcrypto are linked
# statically, GoogleTest too; libcuda and NVRTC are loaded at run time; the
# binaries are stripped and hold no path of this machine. Then:
#
#   bash DIR/tools/gpu_check.sh DIR      # on the GPU machine (docs/gpu-run.md)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/ci"
do_build=1
while [ $# -gt 1 ]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    *) echo "gpu_bundle: unknown option $1 (expected --build-dir B, --no-build, then DIR)" >&2; exit 2 ;;
  esac
done
out="${1:?usage: tools/gpu_bundle.sh [--build-dir B] [--no-build] DIR}"
targets=(attune attune_shared cuda_driver_test forward_gpu_test decode_gpu_test)

if [ "$do_build" = 1 ]; then
  bash "$root/tools/setup.sh" >/dev/null
  if [ "$build" = "$root/build/ci" ]; then
    (cd "$root" && cmake --preset ci >/dev/null)
  elif [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
fi
for t in "$build/cli/attune" "$build/libattune.so"; do
  [ -e "$t" ] || { echo "gpu_bundle: $t is missing: build $build first (drop --no-build)" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cmake --install "$build" --prefix "$out" --strip --component runtime >/dev/null
cmake --install "$build" --prefix "$out" --strip --component gpu_tests >/dev/null
mkdir -p "$out/tools"
cp "$root/tools/gpu_check.sh" "$root/tools/gpu_check.py" "$root/tools/run_gpu_tests.sh" "$out/tools/"
mkdir -p "$out/python"
cp -r "$root/python/attune" "$out/python/"
find "$out/python" -name __pycache__ -prune -exec rm -rf {} +
# The GPU test programs, each with its gtest filter and time limit (seconds).
cat >"$out/tests/gpu_tests.list" <<'EOF'
# program            gtest filter             seconds
cuda_driver_test     CudaDriverGpuTest.*      40
forward_gpu_test     *                        100
decode_gpu_test      *                        60
EOF
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)"
cat >"$out/BUNDLE" <<EOF
attune $("$out/bin/attune" --version 2>/dev/null | awk '{print $NF}') GPU bundle
commit: $commit$dirty
built: $(date -u +%Y-%m-%dT%H:%M:%SZ) ($(grep -m1 '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" | cut -d= -f2))
run: bash tools/gpu_check.sh .   (from this directory; see docs/gpu-run.md)
EOF
size=$(du -sk "$out" | cut -f1)
echo "gpu_bundle: $out ($((size / 1024)) MiB)"
