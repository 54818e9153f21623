#!/usr/bin/env bash
# One bounded GPU run that cannot be wasted (docs/gpu-run.md). From the
# repository root, with the bundle of tools/gpu_bundle.sh carried along:
#
#   bash tools/gpu_check.sh --out "$OUT" --deadline 420 [BUNDLE]
#   bash tools/gpu_check.sh --dry-run --out DIR [BUNDLE]      # the rehearsal: emulator + fake driver
#
#   BUNDLE   build/gpu-bundle.tar.xz (default; unpacked under $TMPDIR), or an unpacked bundle folder
#   --out DIR        report.md, summary.txt, run.tgz, rewritten after every step (default: $OUT, else build/gpu-report)
#   --deadline S     seconds for everything (default 420); steps that no longer fit are skipped
#   --only a,b / --skip a,b   steps to run or leave out (facts compile smoke primitives sm90 sweep
#                             ceilings forward decode backward dropout fp8 python tests)
#   --plant KIND@JOB the rehearsal's planted faults: hang@JOB, sticky@JOB, wrong@JOB (JOB as the report names it)
#
# It refuses a bundle built from other sources than this tree's templates/,
# tools/ and python/attune/ (the hash in BUNDLE), with the command to rebuild.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${OUT:-$root/build/gpu-report}"
deadline=420
dry=()
pass=()
plants=()
bundle=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    --dry-run) dry=(--dry-run); shift ;;
    --only | --skip | --job-limit | --time-limit | --sweep | --wait-bound-ms | --work) pass+=("$1" "$2"); shift 2 ;;
    --plant) plants+=("$2"); shift 2 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) bundle="$1"; shift ;;
  esac
done
if [ -z "$bundle" ]; then
  bundle="$root/build/gpu-bundle.tar.xz"
  [ -e "$bundle" ] || bundle="$root/build/gpu-bundle"
fi
python="${PYTHON:-python3}"
if [ -f "$bundle" ]; then
  # Unpacked once per archive (its size and time name the folder).
  stamp="$(stat -c '%s-%Y' "$bundle")"
  dest="${TMPDIR:-/tmp}/attune-bundle-$stamp"
  if [ ! -f "$dest/BUNDLE" ]; then
    rm -rf "$dest.part"
    mkdir -p "$dest.part"
    t0=$(date +%s)
    "$python" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$dest.part" ||
      { echo "gpu_check: cannot unpack $bundle" >&2; exit 2; }
    chmod 700 "$dest.part/cache" 2>/dev/null
    mv "$dest.part" "$dest"
    echo "gpu_check: unpacked $bundle into $dest in $(($(date +%s) - t0)) s"
  fi
  bundle="$dest"
fi
if [ ! -x "$bundle/bin/attune" ] || [ ! -f "$bundle/lib/libattune.so" ]; then
  echo "gpu_check: $bundle is not a bundle (no bin/attune, lib/libattune.so): make one with bash tools/gpu_bundle.sh" >&2
  exit 2
fi
want="$(sed -n 's/^source: //p' "$bundle/BUNDLE")"
have="$("$python" "$root/tools/gpu_check/main.py" hash "$root")"
if [ "$want" != "$have" ]; then
  echo "gpu_check: the bundle was built from other sources (bundle: ${want:-none}, this tree: $have; $(grep '^commit:' "$bundle/BUNDLE"))." >&2
  echo "gpu_check: rebuild it here: bash tools/gpu_bundle.sh" >&2
  exit 2
fi
if [ ${#plants[@]} -gt 0 ]; then
  export ATTUNE_GPU_CHECK_PLANT="$(IFS=,; echo "${plants[*]}")"
fi
if [ ${#dry[@]} -gt 0 ]; then
  # The rehearsal: kernels run on the emulator; the driver is the recording fake.
  fake="${ATTUNE_REHEARSAL_FAKE_LIBCUDA:-$bundle/tests/libattune_fake_libcuda.so}"
  [ -f "$fake" ] && export ATTUNE_LIBCUDA="$fake"
fi
mkdir -p "$out"
exec "$python" "$root/tools/gpu_check/main.py" run --bundle "$bundle" --out "$out" --deadline "$deadline" \
  "${dry[@]}" "${pass[@]}"
