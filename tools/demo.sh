#!/usr/bin/env bash
# The main job: installs and builds attune, runs a small tuning sweep (on the
# GPU when one is usable, else on the CPU emulator), dispatches an attention
# call from the resulting database, checks it against the fp64 reference, and
# prints the best table. Rerunning resumes the sweep (nothing is measured twice).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
python="$(command -v python3)"
bash tools/setup_python.sh "$python"
cmake --preset dev -DATTUNE_PACKAGE_PYTHON="$python" >/dev/null
cmake --build --preset dev -j "$(nproc)" --target attune
attune=build/dev/cli/attune
work="${ATTUNE_DEMO_DIR:-build/demo}"
mkdir -p "$work"
db="$work/tuning.db"

backend=emu
if "$attune" doctor | grep -q "^gpu use: *ready"; then backend=cuda; fi
echo "demo: tuning on the $backend backend into $db"
"$attune" tune --backend "$backend" --db "$db" --dtypes bf16 --head-dims 64 --masks none,causal \
  --seqlens 64,128 --batch-heads 2x8 --max-variants 4 --repetitions 3

/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng(0)
# Batch 2, 128 queries and keys, 8 query heads sharing 2 kv heads (GQA), head dim 64.
np.save(f"{d}/q.npy", rng.standard_normal((2, 128, 8, 64), dtype=np.float32))
np.save(f"{d}/k.npy", rng.standard_normal((2, 128, 2, 64), dtype=np.float32))
np.save(f"{d}/v.npy", rng.standard_normal((2, 128, 2, 64), dtype=np.float32))
PY
echo "demo: which variant a causal call dispatches to"
"$attune" explain --backend "$backend" --db "$db" --batch 2 --seqlen-q 128 --seqlen-k 128 --heads-q 8 --heads-kv 2 \
  --dk 64 --dv 64 --causal bottom-right
inputs=(--q "$work/q.npy" --k "$work/k.npy" --v "$work/v.npy" --causal bottom-right --dtype bf16)
"$attune" attention --backend "$backend" --db "$db" "${inputs[@]}" --out "$work/o.npy" --lse "$work/lse.npy"
"$attune" attention --backend reference "${inputs[@]}" --out "$work/o_ref.npy" --lse "$work/lse_ref.npy"
/usr/bin/python3 - "$work" <<'PY'
import sys, numpy as np
d = sys.argv[1]
o, ref = np.load(f"{d}/o.npy"), np.load(f"{d}/o_ref.npy")
lse, lse_ref = np.load(f"{d}/lse.npy"), np.load(f"{d}/lse_ref.npy")
print(f"demo: dispatched kernel vs fp64 reference: max |dO| {np.abs(o - ref).max():.2e}, "
      f"max |dLSE| {np.abs(lse - lse_ref).max():.2e}")
PY
echo "demo: the tuning database"
"$attune" db --db "$db" best

echo "demo: the Python package (pip install . from this build), on the emulator"
bash tools/python_install.sh build/dev "$python"
(cd "$work" && "$python" -c "import attune, torch; print('demo: attune.flash_attn_func ->', tuple(attune.flash_attn_func(torch.randn(1,37,2,64,dtype=torch.bfloat16), *[torch.randn(1,50,2,64,dtype=torch.bfloat16)]*2, causal=True).shape))")
