#!/usr/bin/env bash
# The main job: installs, builds, and runs attention on a generated example.
# (Until the tuner lands this runs the fp64 reference backend on inputs that
# NumPy writes; see README.md.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake --preset dev >/dev/null
cmake --build --preset dev -j "$(nproc)" --target attune
work="${ATTUNE_DEMO_DIR:-build/demo}"
mkdir -p "$work"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
# Batch 2, 96 queries against 160 keys, 8 query heads sharing 2 kv heads (GQA), Dk 64, Dv 48.
np.save(f"{d}/q.npy", rng.standard_normal((2, 96, 8, 64), dtype=np.float32))
np.save(f"{d}/k.npy", rng.standard_normal((2, 160, 2, 64), dtype=np.float32))
np.save(f"{d}/v.npy", rng.standard_normal((2, 160, 2, 48), dtype=np.float32))
np.save(f"{d}/seqlens_k.npy", np.array([160, 100], dtype=np.int32))
PY
echo "demo: attune attention --backend reference (bf16, causal bottom-right, key padding)"
build/dev/cli/attune attention --backend reference --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" \
  --seqlens-k "$work/seqlens_k.npy" --causal bottom-right --dtype bf16 --out "$work/o.npy" --lse "$work/lse.npy"
echo "demo: the same call through the forward kernel on the emulator (heuristic variant)"
build/dev/cli/attune attention --backend emu --q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" \
  --seqlens-k "$work/seqlens_k.npy" --causal bottom-right --dtype bf16 --out "$work/o_emu.npy" --lse "$work/lse_emu.npy"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
d = sys.argv[1]
o, lse = np.load(f"{d}/o.npy"), np.load(f"{d}/lse.npy")
o_emu, lse_emu = np.load(f"{d}/o_emu.npy"), np.load(f"{d}/lse_emu.npy")
print(f"demo: emulated kernel vs fp64 reference: max |dO| {np.abs(o_emu - o).max():.2e}, "
      f"max |dLSE| {np.abs(lse_emu - lse)[np.isfinite(lse)].max():.2e}")
finite = np.isfinite(lse)
print(f"demo: O {o.shape} {o.dtype}, LSE {lse.shape}; rows with visible keys {finite.sum()}, empty rows {(~finite).sum()}")
print(f"demo: |O| max {np.abs(o).max():.4f}, LSE range [{lse[finite].min():.4f}, {lse[finite].max():.4f}]")
PY
echo "demo: outputs in $work"
