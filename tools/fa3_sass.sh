#!/usr/bin/env bash
# FlashAttention-3's own sm_90a forward kernels, audited the way attune audits
# its own (docs/perf/hopper_forward.md): downloads the flash-attn3-jax wheel
# (which ships FA3's compiled kernels) and NVIDIA's cuobjdump wheel from PyPI
# into a scratch directory, extracts one cubin, and runs
# `attune variants audit --cubin` on it (registers and spills per setmaxnreg
# region, instructions per HGMMA in each main loop).
# Usage: tools/fa3_sass.sh ATTUNE [CUBIN_NAME] [DIR]
#   CUBIN_NAME  default flash_fwd_hdim128_bf16_sm90.sm_90a.cubin
#   DIR         scratch directory, kept (default: a new one under /tmp)
set -euo pipefail
attune="$(realpath "${1:?usage: tools/fa3_sass.sh ATTUNE [CUBIN_NAME] [DIR]}")"
cubin="${2:-flash_fwd_hdim128_bf16_sm90.sm_90a.cubin}"
dir="${3:-$(mktemp -d /tmp/fa3-sass.XXXXXX)}"
mkdir -p "$dir"
cd "$dir"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 -d wheels \
  "flash-attn3-jax==0.2.3" "nvidia-cuda-cuobjdump>=13,<14"
for w in wheels/*.whl; do python3 -m zipfile -e "$w" unpacked; done
cuobjdump="$(find unpacked -name cuobjdump -type f | head -1)"
chmod +x "$cuobjdump"
library="$(find unpacked -name 'flash_api*.so' | head -1)"
"$cuobjdump" -xelf "$cubin" "$library" >/dev/null
echo "fa3_sass: $dir/$cubin (from $(basename "$library"))" >&2
"$attune" variants audit --cubin "$cubin"
