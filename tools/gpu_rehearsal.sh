#!/usr/bin/env bash
# Rehearses a GPU run's first minutes on this machine: proves a bundle (from
# tools/gpu_bundle.sh) needs nothing outside itself.
#
#   tools/gpu_rehearsal.sh BUNDLE
#
#   1. size under 80 MiB unpacked (it travels xz-compressed, about 6 MiB;
#      gpu_bundle.sh checks what travels); every ELF file needs only libc, libm, libstdc++,
#      libgcc_s and the dynamic loader (libcuda and NVRTC are dlopened), and
#      its RUNPATH is $ORIGIN-relative; no file holds a path of this machine's
#      source or build tree;
#   2. the bundle is copied to a fresh directory and run under `env -i
#      PATH=/usr/bin:/bin`, from another working directory, in a private mount
#      namespace where the CUDA toolkit, the source tree and the build tree
#      are hidden (empty tmpfs mounted over them): `attune doctor`,
#      `gpu_check/main.py selftest-emu` (the working tree's tools travel beside
#      the bundle, copied here), `attune attention` on the emu and
#      reference backends pass, a compile fails with one line naming where
#      NVRTC was looked for, and an NVRTC laid out as pip installs it
#      (site-packages/nvidia/cu13/lib) is found through $ATTUNE_PYTHON_SITE
#      and through the site directories of python3 on PATH.
set -euo pipefail
bundle="$(cd "${1:?usage: tools/gpu_rehearsal.sh BUNDLE}" && pwd)"
root="$(cd "$(dirname "$0")/.." && pwd)"
fail() {
  echo "rehearsal: FAIL: $*" >&2
  exit 1
}

# 1. Static facts.
size_kib=$(du -sk "$bundle" | cut -f1)
[ "$size_kib" -lt $((80 * 1024)) ] || fail "the bundle is $((size_kib / 1024)) MiB unpacked; expected under 80 MiB"
echo "rehearsal: size $((size_kib / 1024)) MiB unpacked (limit 80; it travels xz-compressed, gpu_bundle.sh checks that)"
allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2)$'
elves=0
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q $'\x7fELF' || continue
  elves=$((elves + 1))
  while read -r lib; do
    [ -f "$bundle/lib/$lib" ] && continue  # shipped in the bundle, found through $ORIGIN
    [[ "$lib" =~ $allowed ]] || fail "${f#"$bundle"/} needs $lib; expected only libc, libm, libstdc++, libgcc_s, ld-linux"
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  runpath=$(readelf -d "$f" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p')
  if [ -n "$runpath" ] && [[ ! "$runpath" =~ ^(\$ORIGIN[^:]*)(:\$ORIGIN[^:]*)*$ ]]; then
    fail "${f#"$bundle"/} has RUNPATH '$runpath'; expected only \$ORIGIN-relative entries"
  fi
  if readelf -S "$f" | grep -q '\.debug_info'; then fail "${f#"$bundle"/} is not stripped"; fi
done < <(find "$bundle" -type f -print0)
[ "$elves" -ge 5 ] || fail "found $elves ELF files; expected the CLI, libattune.so and the GPU tests"
echo "rehearsal: $elves ELF files need only the allowed libraries, RUNPATH \$ORIGIN-relative, stripped"
build_dirs=("$root")
[ -n "${ATTUNE_REHEARSAL_BUILD:-}" ] && build_dirs+=("$ATTUNE_REHEARSAL_BUILD")
for d in "${build_dirs[@]}"; do
  if grep -rl --binary-files=text -F "$d" "$bundle" >/dev/null 2>&1; then
    fail "these bundle files hold the path $d of this machine: $(grep -rl --binary-files=text -F "$d" "$bundle" | tr '\n' ' ')"
  fi
done
echo "rehearsal: no file holds ${build_dirs[*]}"

# 2. A fresh place, a scrubbed environment, no toolkit, no source tree.
work="$(mktemp -d /tmp/attune-rehearsal.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp -a "$bundle" "$work/bundle"
# What travels beside the bundle from the working tree: the check's Python.
mkdir -p "$work/tree/tools" "$work/tree/python"
cp -r "$root/tools/gpu_check" "$work/tree/tools/"
cp -r "$root/python/attune" "$work/tree/python/"
find "$work/tree" -name __pycache__ -prune -exec rm -rf {} +
# A stand-in driver (tests/fake_driver), so --backend cuda gets as far as
# compiling: the NVRTC line is what must come back.
fake=""
if [ -n "${ATTUNE_REHEARSAL_FAKE_LIBCUDA:-}" ] && [ -f "$ATTUNE_REHEARSAL_FAKE_LIBCUDA" ]; then
  fake="$work/libcuda-fake.so"
  cp "$ATTUNE_REHEARSAL_FAKE_LIBCUDA" "$fake"
fi
mkdir -p "$work/cwd" "$work/home"
# NVRTC laid out as `pip install torch` leaves it, for the pip step of the search.
nvrtc_dir="$(dirname "$(readlink -f /usr/local/cuda/lib64/libnvrtc.so)" 2>/dev/null || true)"
site="$work/py/site-packages"
if [ -n "$nvrtc_dir" ] && [ -f "$nvrtc_dir/libnvrtc.so.13" ]; then
  mkdir -p "$site/nvidia/cu13/lib"
  cp "$nvrtc_dir"/libnvrtc.so.13 "$nvrtc_dir"/libnvrtc-builtins.so.13.* "$site/nvidia/cu13/lib/"
fi
cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
b="$1"
cd "$2"
site="$3"
fake="$4"
tree="$5"
echo "inside: $(pwd), PATH=$PATH, $(env | wc -l) environment variables"
for d in /usr/local/cuda /usr/local/cuda-*; do
  [ -e "$d/lib64" ] && { echo "inside: FAIL: $d/lib64 is still visible"; exit 1; }
done
# Every binary resolves each library inside the bundle or from the allow-list.
while IFS= read -r -d '' f; do
  head -c 4 "$f" | grep -q $'\x7fELF' || continue
  ldd "$f" >ldd.txt 2>&1 || true
  if grep -q "not found" ldd.txt; then echo "inside: FAIL: $f:"; cat ldd.txt; exit 1; fi
  while read -r name arrow path rest; do
    [ "$arrow" = "=>" ] || continue
    case "$path" in "$b"/*) continue ;; esac
    [[ "$name" =~ ^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1)$ ]] ||
      { echo "inside: FAIL: $f resolves $name to $path, outside the bundle and the allow-list"; exit 1; }
  done <ldd.txt
done < <(find "$b" -type f -print0)
echo "inside: ldd of every binary: only the bundle and the allow-list"
"$b/bin/attune" doctor >doctor.txt
cat doctor.txt
grep -q '^nvrtc: *none' doctor.txt || { echo "inside: FAIL: doctor found an NVRTC with the toolkit hidden"; exit 1; }
python3 "$tree/tools/gpu_check/main.py" selftest-emu --lib "$b/lib/libattune.so"
python3 - <<'PY'
import numpy as np
rng = np.random.default_rng(1)
for name, shape in (("q", (1, 37, 4, 64)), ("k", (1, 50, 2, 64)), ("v", (1, 50, 2, 64))):
    np.save(name + ".npy", rng.standard_normal(shape, dtype=np.float32))
PY
for backend in emu reference; do
  "$b/bin/attune" attention --backend "$backend" --q q.npy --k k.npy --v v.npy --causal bottom-right \
    --out "o_$backend.npy" --lse "lse_$backend.npy"
done
python3 -c "
import numpy as np
d = np.abs(np.load('o_emu.npy') - np.load('o_reference.npy')).max()
print('inside: emu vs reference: max |dO| %.2e' % d)
assert d < 2e-2, d
"
set +e
"$b/bin/attune" variants list --op fwd --dk 64 --dv 64 --arch sm_90a --compile >compile.out 2>compile.err
rc=$?
set -e
[ "$rc" -ne 0 ] || { echo "inside: FAIL: variants list --compile succeeded without NVRTC"; exit 1; }
[ "$(wc -l <compile.err)" -eq 1 ] || { echo "inside: FAIL: expected one line, got:"; cat compile.err; exit 1; }
for place in ATTUNE_NVRTC CUDA_HOME /usr/local/cuda "python site-packages" "system search path"; do
  grep -qF "$place" compile.err || { echo "inside: FAIL: the message does not name $place:"; cat compile.err; exit 1; }
done
echo "inside: without NVRTC, --compile fails with: $(cat compile.err)"
set +e
"$b/bin/attune" attention --backend cuda --q q.npy --k k.npy --v v.npy --out o_cuda.npy 2>cuda.err
rc=$?
set -e
[ "$rc" -ne 0 ] && [ "$(wc -l <cuda.err)" -eq 1 ] || { echo "inside: FAIL: --backend cuda:"; cat cuda.err; exit 1; }
echo "inside: --backend cuda fails with: $(cat cuda.err)"
if [ -n "$fake" ]; then
  set +e
  ATTUNE_LIBCUDA="$fake" "$b/bin/attune" attention --backend cuda --q q.npy --k k.npy --v v.npy --out o_cuda.npy \
    2>cuda.err
  rc=$?
  set -e
  [ "$rc" -ne 0 ] && [ "$(wc -l <cuda.err)" -eq 1 ] && grep -q "NVRTC not found" cuda.err ||
    { echo "inside: FAIL: --backend cuda on a driver without NVRTC:"; cat cuda.err; exit 1; }
  echo "inside: --backend cuda with a driver but no NVRTC fails with: $(cat cuda.err)"
fi
if [ -d "$site/nvidia" ]; then
  ATTUNE_PYTHON_SITE="$site" "$b/bin/attune" doctor | grep "^nvrtc:" | tee nvrtc.txt
  grep -qF "($site/nvidia/cu13/lib/libnvrtc.so.13)" nvrtc.txt ||
    { echo "inside: FAIL: ATTUNE_PYTHON_SITE did not lead to pip's NVRTC"; exit 1; }
  PYTHONPATH="$site" "$b/bin/attune" doctor | grep "^nvrtc:" | tee nvrtc.txt
  grep -qF "($site/nvidia/cu13/lib/libnvrtc.so.13)" nvrtc.txt ||
    { echo "inside: FAIL: the site directories of python3 on PATH did not lead to pip's NVRTC"; exit 1; }
fi
echo "inside: ok"
EOF
hide=(/usr/local/cuda /usr/local/cuda-* "$root")
[ -n "${ATTUNE_REHEARSAL_BUILD:-}" ] && hide+=("$ATTUNE_REHEARSAL_BUILD")
mounts=""
# Deeper directories first: once a parent is covered, its children are gone.
for d in $(for h in "${hide[@]}"; do [ -d "$h" ] && readlink -f "$h"; done | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
  real="$d"
  case "$work" in "$real"/*) fail "the work directory $work lies inside hidden $real" ;; esac
  mounts+="mount -t tmpfs -o ro,size=1m none '$real'; "
done
if ! unshare --mount --propagation private true 2>/dev/null; then
  fail "unshare --mount is not permitted here (needed to hide the toolkit and the source tree; run as root)"
fi
unshare --mount --propagation private bash -c "$mounts exec env -i PATH=/usr/bin:/bin HOME='$work/home' \
  bash '$work/inside.sh' '$work/bundle' '$work/cwd' '$site' '$fake' '$work/tree'"
echo "rehearsal: ok"
