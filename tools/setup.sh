#!/usr/bin/env bash
# Installs attune's build and test dependencies from Debian packages.
# Idempotent: packages already present are left alone. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libsqlite3-dev sqlite3
  libssl-dev
  nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  libcli11-dev
  libclang-16-dev libclang-cpp16-dev llvm-16-dev clang-16
  libclang-rt-16-dev
  clang-format
  python3-numpy python3-pip
  chromium
  slurm-wlm munge
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all Debian packages present"
fi

# The CUDA toolkit is not a Debian package here: it must already be installed.
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
problems=()
[ -f "$cuda_home/include/nvrtc.h" ] || problems+=("NVRTC header $cuda_home/include/nvrtc.h")
[ -f "$cuda_home/include/cuda_fp16.h" ] || problems+=("fp16 header $cuda_home/include/cuda_fp16.h")
[ -f "$cuda_home/include/cuda_bf16.h" ] || problems+=("bf16 header $cuda_home/include/cuda_bf16.h")
ls "$cuda_home"/lib64/libnvrtc.so* >/dev/null 2>&1 || problems+=("NVRTC library $cuda_home/lib64/libnvrtc.so")
if ((${#problems[@]})); then
  echo "setup: the CUDA toolkit at $cuda_home (set CUDA_HOME to change) is missing:" >&2
  for p in "${problems[@]}"; do echo "  - $p" >&2; done
  echo "setup: install the CUDA toolkit (13.x) so that these files exist" >&2
  exit 1
fi
echo "setup: CUDA toolkit found at $cuda_home"

# Two tools come from PyPI wheels, unpacked into the user's cache so nothing
# is installed into the system's Python. unpack_wheel SPEC MEMBER_PREFIX DEST:
# downloads SPEC's wheel and writes its members under MEMBER_PREFIX to DEST,
# keeping their paths below it and their executable bits.
tools_dir="${XDG_CACHE_HOME:-$HOME/.cache}/attune/tools"
unpack_wheel() {
  local wheel_dir
  wheel_dir="$(mktemp -d)"
  /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheel_dir" "$1"
  /usr/bin/python3 - "$wheel_dir" "$2" "$3" <<'PY'
import glob, os, shutil, sys, zipfile
wheel_dir, prefix, dest = sys.argv[1:]
wheel = glob.glob(os.path.join(wheel_dir, "*.whl"))[0]
staging = dest + ".partial"
shutil.rmtree(staging, ignore_errors=True)
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        target = os.path.join(staging, info.filename[len(prefix):])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        mode = (info.external_attr >> 16) & 0o777
        os.chmod(target, mode if mode else 0o644)
# Whole or not at all: a later run sees either the tool or nothing.
if os.path.isdir(dest):
    for name in os.listdir(staging):
        path = os.path.join(dest, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        shutil.move(os.path.join(staging, name), path)
    shutil.rmtree(staging)
else:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.rename(staging, dest)
PY
  rm -rf "$wheel_dir"
}

# nvdisasm (the SASS mix of `attune variants profile`) is not in every CUDA
# toolkit image; NVIDIA's wheel nvidia-cuda-nvdisasm carries it.
tools_bin="$tools_dir/bin"
if ! command -v nvdisasm >/dev/null 2>&1 && [ ! -x "$cuda_home/bin/nvdisasm" ] && [ ! -x "$tools_bin/nvdisasm" ]; then
  echo "setup: fetching nvdisasm from PyPI (nvidia-cuda-nvdisasm) into $tools_bin"
  unpack_wheel "nvidia-cuda-nvdisasm>=13,<14" "nvidia/cu13/bin/" "$tools_bin"
fi
"$tools_bin/nvdisasm" --version >/dev/null 2>&1 || command -v nvdisasm >/dev/null 2>&1 ||
  [ -x "$cuda_home/bin/nvdisasm" ] || { echo "setup: nvdisasm is missing" >&2; exit 1; }
echo "setup: nvdisasm found"

# clang-tidy for the lint test (tools/lint.sh), pinned: version 21 skips the
# declarations of system headers, which made clang-tidy 16 spend most of its
# time in CLI11 and nlohmann/json (about 2.5x faster over attune's sources).
# The wheel carries the binary and clang's own headers beside it.
clang_tidy_version=21.1.6
clang_tidy_dir="$tools_dir/clang-tidy-$clang_tidy_version"
if [ ! -x "$clang_tidy_dir/bin/clang-tidy" ]; then
  echo "setup: fetching clang-tidy $clang_tidy_version from PyPI (clang-tidy) into $clang_tidy_dir"
  unpack_wheel "clang-tidy==$clang_tidy_version" "clang_tidy/data/" "$clang_tidy_dir"
fi
"$clang_tidy_dir/bin/clang-tidy" --version >/dev/null || { echo "setup: clang-tidy is missing" >&2; exit 1; }
echo "setup: clang-tidy $clang_tidy_version found"
