#!/usr/bin/env bash
# Builds what a GPU run needs into one compressed, relocatable bundle, so a
# bare CUDA machine runs it with no build step (docs/gpu-run.md):
#
#   bash tools/gpu_bundle.sh [--build-dir B] [--no-build] [--dry-run-kernels] [DIR]
#
#   DIR (default build/gpu-bundle), unpacked:
#     bin/attune               the CLI                 (RPATH $ORIGIN/../lib)
#     lib/libattune.so         every attune library and the C API
#     tests/*                  the GPU test programs, gpu_tests.list, and the
#                              recording fake driver (for the rehearsal only)
#     cache/                   the kernels the run launches, compiled ahead for
#                              sm_90a (kernels.txt, kernels.bounded.txt): a GPU
#                              whose NVRTC matches compiles nothing
#     BUNDLE                   version, commit, the source hash gpu_check.sh checks
#   DIR.tar.xz                 the same, compressed: what the device command carries
#
# Release build (the `ci` preset's tree, build/ci, unless --build-dir says
# otherwise; --no-build reuses it as it is). SQLite and libcrypto are linked
# statically, GoogleTest too; libcuda and NVRTC are loaded at run time; the
# binaries are stripped and hold no path of this machine. --dry-run-kernels
# compiles only what the rehearsal launches (CI; $ATTUNE_BUNDLE_XZ=-1 packs
# faster than the default -6). It ends by printing what a
# device command carries (the working tree and DIR.tar.xz), which must stay
# under 32 MiB.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build/ci"
do_build=1
kernels_mode=()
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build="$(cd "$2" && pwd)"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --dry-run-kernels) kernels_mode=(--dry-run); shift ;;
    -*) echo "gpu_bundle: unknown option $1 (expected --build-dir B, --no-build, --dry-run-kernels, then DIR)" >&2
        exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
out="${out:-$root/build/gpu-bundle}"
targets=(attune attune_shared cuda_driver_test forward_gpu_test decode_gpu_test hopper_gpu_test attune_fake_libcuda)
start=$(date +%s)

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
# The GPU test programs, each with its gtest filter and time limit (seconds).
cat >"$out/tests/gpu_tests.list" <<'EOF'
# program            gtest filter             seconds
cuda_driver_test     CudaDriverGpuTest.*      20
forward_gpu_test     ForwardGpuTest.Dispatched*  20
decode_gpu_test      DecodeGpuTest.CoveringSet:DecodeGpuTest.DeviceLengths*:DecodeGpuTest.AppendKv* 30
EOF
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)"
cat >"$out/BUNDLE" <<EOF
attune $("$out/bin/attune" --version 2>/dev/null | awk '{print $NF}') GPU bundle
commit: $commit$dirty
source: $(python3 "$root/tools/gpu_check/main.py" hash "$root")
built: $(date -u +%Y-%m-%dT%H:%M:%SZ) ($(grep -m1 '^CMAKE_BUILD_TYPE:' "$build/CMakeCache.txt" | cut -d= -f2))
run: bash tools/gpu_check.sh --out \$OUT --deadline 420   (from the repository root; see docs/gpu-run.md)
EOF

# The kernels the run launches, compiled ahead. The dispatcher's choices come
# from explain on an sm_90a device (the fake driver stands in); compiles go
# through a persistent cache (build/gpu-kernel-cache) and the entries this run
# touched (a hit sets the mtime) are copied in.
fake="$out/tests/libattune_fake_libcuda.so"
persistent="$root/build/gpu-kernel-cache"
mkdir -p "$persistent"
chmod 700 "$persistent"
stamp="$(mktemp)"
ATTUNE_LIBCUDA="$fake" ATTUNE_CACHE_DIR="$persistent" python3 "$root/tools/gpu_check/main.py" kernels \
  --bundle "$out" --work "$(mktemp -d)" "${kernels_mode[@]}"
wait_bound="$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import main; print(main.DEFAULT_WAIT_BOUND_MS)' \
  "$root/tools/gpu_check")"
sleep 1
ATTUNE_CACHE_DIR="$persistent" "$out/bin/attune" variants compile --from "$out/kernels.txt" --arch sm_90a | tail -n 1
ATTUNE_CACHE_DIR="$persistent" ATTUNE_WAIT_BOUND_MS="$wait_bound" "$out/bin/attune" variants compile \
  --from "$out/kernels.bounded.txt" --arch sm_90a | tail -n 1
# The GPU test programs' kernels too: run on the fake sm_90a device, they
# compile what they would launch (their checks fail there: nothing runs).
if [ ${#kernels_mode[@]} -eq 0 ]; then
  while read -r t filter _; do
    case "$t" in '' | '#'* | cuda_driver_test) continue ;; esac
    t0=$(date +%s)
    ATTUNE_LIBCUDA="$fake" ATTUNE_CACHE_DIR="$persistent" timeout 900 "$out/tests/$t" --gtest_filter="$filter" \
      >/dev/null 2>&1 || true
    echo "gpu_bundle: $t ($filter): kernels compiled ahead in $(($(date +%s) - t0)) s"
  done <"$out/tests/gpu_tests.list"
fi
mkdir -p "$out/cache"
chmod 700 "$out/cache"
find "$persistent" -maxdepth 1 -type f -newer "$stamp" ! -name '.*' -exec cp -p {} "$out/cache/" \;
rm -f "$stamp"
echo "gpu_bundle: $(find "$out/cache" -type f | wc -l) compiled kernels in the bundle's cache"

# Compressed: the emulator's instantiations make the library large, and they
# compress well.
archive="$out.tar.xz"
rm -f "$archive"
(cd "$out" && XZ_OPT="${ATTUNE_BUNDLE_XZ:--6} -T$(nproc)" tar -cJf "$archive" .)
tree_bytes=$(cd "$root" && git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -n 1 |
  cut -f1)
bundle_bytes=$(stat -c %s "$archive")
total=$((tree_bytes + bundle_bytes))
printf 'gpu_bundle: %s (%d MiB unpacked) -> %s\n' "$out" $(($(du -sk "$out" | cut -f1) / 1024)) "$archive"
python3 -c 'import sys; t, b = int(sys.argv[1]), int(sys.argv[2]); m = 1 << 20
print("gpu_bundle: the device command carries %.1f MiB: working tree %.1f MiB + %s %.1f MiB (limit 32 MiB)"
      % ((t + b) / m, t / m, sys.argv[3], b / m))' "$tree_bytes" "$bundle_bytes" "$(basename "$archive")"
echo "gpu_bundle: done in $(($(date +%s) - start)) s"
if [ "$total" -ge $((32 * 1048576)) ]; then
  echo "gpu_bundle: FAIL: $total bytes would travel; the limit is 32 MiB" >&2
  exit 1
fi
