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
  clang-format clang-tidy-16
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

# nvdisasm (the SASS mix of `attune variants profile`) is not in every CUDA
# toolkit image; NVIDIA's PyPI wheel nvidia-cuda-nvdisasm carries it. The
# wheel is downloaded and the one binary unpacked into the user's cache, so
# nothing is installed into the system's Python.
tools_bin="${XDG_CACHE_HOME:-$HOME/.cache}/attune/tools/bin"
if ! command -v nvdisasm >/dev/null 2>&1 && [ ! -x "$cuda_home/bin/nvdisasm" ] && [ ! -x "$tools_bin/nvdisasm" ]; then
  echo "setup: fetching nvdisasm from PyPI (nvidia-cuda-nvdisasm) into $tools_bin"
  wheel_dir="$(mktemp -d)"
  /usr/bin/python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheel_dir" \
    "nvidia-cuda-nvdisasm>=13,<14"
  mkdir -p "$tools_bin"
  /usr/bin/python3 - "$wheel_dir" "$tools_bin" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith("/bin/nvdisasm"))
    target = os.path.join(sys.argv[2], "nvdisasm")
    with z.open(name) as src, open(target + ".tmp", "wb") as dst:
        dst.write(src.read())
    os.chmod(target + ".tmp", 0o755)
    os.replace(target + ".tmp", target)
PY
  rm -rf "$wheel_dir"
fi
"$tools_bin/nvdisasm" --version >/dev/null 2>&1 || command -v nvdisasm >/dev/null 2>&1 ||
  [ -x "$cuda_home/bin/nvdisasm" ] || { echo "setup: nvdisasm is missing" >&2; exit 1; }
echo "setup: nvdisasm found"
