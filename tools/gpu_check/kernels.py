"""What the forward steps of a run will launch, for tools/gpu_bundle.sh to
compile ahead into the bundle's kernel cache:

  BUNDLE/kernels.bounded.txt  smoke, sm90 and sweep checks (built with the wait bound)
  BUNDLE/kernels.txt          the timed variants (production builds), the dropout and fp8 steps'

Each line is "ID@DTYPE" for `attune variants compile --from`. The
dispatcher's choices come from attune's own explain on an sm_90a device (the
recording fake driver stands in for it here: run with ATTUNE_LIBCUDA set),
so the list follows the heuristic as it changes.
"""
import os
import re

import binding
import plan

VARLEN_TILES = "sm90_varlen_tiles/t256"


def _meta(torch, case):
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[case["dtype"]]
    dv = case.get("dv", case["d"])
    if case.get("cu_q"):
        shapes = [(case["cu_q"][-1], case["hq"], case["d"]), (case["cu_k"][-1], case["hkv"], case["d"]),
                  (case["cu_k"][-1], case["hkv"], dv)]
    else:
        shapes = [(case["b"], case["sq"], case["hq"], case["d"]), (case["b"], case["sk"], case["hkv"], case["d"]),
                  (case["b"], case["sk"], case["hkv"], dv)]
    return [torch.empty(s, dtype=dt, device="meta") for s in shapes]


def dispatched(rt, torch, case, dropout=0.0, backward=False):
    q, k, v = _meta(torch, case)
    mask = case["mask"] if case["mask"] != "varlen" else "none"
    prob = binding.Problem(q, k, v, mask, case.get("cu_q"), case.get("cu_k"))
    prob.c.dropout_p = dropout
    return (rt.explain_backward(prob) if backward else rt.explain(prob)).split()[0]


def fp8_dispatched(rt, torch, case, fp8):
    """The variant the fp8 step's forward plan of `case` runs (fp8 inputs, or the bf16 twin). Its decode plans
    compile on the GPU, as the decode step's do (explain_decode names the tiles without the fp8 loads)."""
    f8 = getattr(torch, {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}[case["fmt"]]) if fp8 else torch.bfloat16
    b, hq, hkv, d = case["b"], case["hq"], case["hkv"], case["d"]
    q, k, v = (torch.empty(s, dtype=f8, device="meta")
               for s in ((b, case["sq"], hq, d), (b, case["sk"], hkv, d), (b, case["sk"], hkv, d)))
    return rt.explain(binding.Problem(q, k, v, case["mask"])).split()[0]


def write(args):
    import torch
    rt = binding.Runtime("cuda")  # explain only: nothing is compiled or launched
    bounded, production = [], []

    def add(where, vid, dtype):
        item = "%s@%s" % (vid, dtype)
        if vid and item not in where:
            where.append(item)
        if vid and vid.startswith("flash_fwd_sm90/") and re.search(r"\.sc3(\.|$)", vid):
            add(where, VARLEN_TILES, dtype)  # the varlen scheduler's numbering kernel runs first

    d = 64
    fa2_64 = plan.fa2_style(plan.listed(args.attune, d, "sm_90a", "flash_fwd"), d)
    smoke = dict(b=1, sq=64, sk=64, hq=2, hkv=2, d=d, dtype="bf16", mask="causal")
    add(bounded, fa2_64, "bf16")
    add(bounded, dispatched(rt, torch, smoke), "bf16")
    for job in plan.sm90_check_jobs(args.dry_run):
        add(bounded, dispatched(rt, torch, job["case"]), job["case"]["dtype"])
    ids = plan.sweep_ids(args.attune, args.dry_run, args.sweep)
    for job in plan.sweep_check_jobs(ids, args.dry_run):
        add(bounded, job["variant"], job["case"]["dtype"])
    for d, (sm90_ids, fa2) in ids.items():
        for dtype in (("bf16",) if args.dry_run else plan.DTYPES):
            for causal in (False, True):
                add(production, dispatched(rt, torch, plan.timing_case(d, dtype, causal, args.dry_run)), dtype)
            add(production, dispatched(rt, torch, plan.varlen_timing_case(d, dtype, args.dry_run)), dtype)
            for vid in sm90_ids + [fa2]:
                add(production, vid, dtype)
    checks_, timing = plan.dropout_cases(args.dry_run)
    for case in checks_ + timing:  # the dropout step's forward and backward, with and without it
        for p in (0.0, plan.DROPOUT_P):
            for backward in (False, True):
                add(production, dispatched(rt, torch, case, p, backward), case["dtype"])
    checks_, timing = plan.fp8_cases(args.dry_run)
    for case in [c for c in checks_ + timing if c["op"] == "fwd"]:  # the fp8 step's and their bf16 twins' forwards
        for fp8 in (True, False):
            add(production, fp8_dispatched(rt, torch, case, fp8), "bf16")
    for name, items in (("kernels.bounded.txt", bounded), ("kernels.txt", production)):
        with open(os.path.join(args.bundle, name), "w") as f:
            f.write("# compiled ahead by tools/gpu_bundle.sh (tools/gpu_check/kernels.py)\n")
            f.write("\n".join(items) + "\n")
        print("%s: %d kernels" % (name, len(items)))
    return 0
