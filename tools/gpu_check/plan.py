"""What a GPU check runs: the cases of each step, on a GPU and in the
rehearsal (--dry-run: the emulator, tiny shapes).

Job names are stable ("sm90.d128.bf16.causal.small"): the report, the
planted faults of the rehearsal and a rerun of one job all use them.
"""
import subprocess

HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
MASKS = ("none", "causal", "varlen")


def correctness_cases(d, dtype, mask, dry):
    """{label: case} for one (d, dtype, mask): a small case the emulator can
    run on the device machine when the GPU disagrees, and a larger one."""
    if dry:
        sizes = {"small": dict(b=1, sq=70, sk=70, hq=2, hkv=1)}
        varlen = {"small": ([0, 1, 40, 70], [0, 17, 60, 85])}
    else:
        sizes = {"small": dict(b=1, sq=130, sk=130, hq=2, hkv=1), "large": dict(b=2, sq=1000, sk=1000, hq=4, hkv=2)}
        varlen = {"small": ([0, 1, 130, 200], [0, 50, 181, 300]),
                  "large": ([0, 7, 520, 1300, 1301], [0, 300, 813, 2000, 2060])}
    out = {}
    for label, size in sizes.items():
        case = dict(size, d=d, dtype=dtype, mask=mask)
        if mask == "causal":
            case["sq"] = case["sq"] * 3 // 4  # queries aligned bottom-right against more keys
        if mask == "varlen":
            cu_q, cu_k = varlen[label]
            case.update(cu_q=cu_q, cu_k=cu_k, b=len(cu_q) - 1)
        out[label] = case
    return out


def sm90_check_jobs(dry):
    """flash_fwd_sm90 through the dispatcher (the heuristic's variant), every
    head dim, dtype and mask, small then large."""
    jobs = []
    dims = (64,) if dry else HEAD_DIMS
    # Small cases of every (d, dtype, mask) first, so a run cut short has
    # seen each kind once; the large ones after.
    for label in ("small", "large"):
        for dtype in DTYPES:
            for mask in MASKS:
                for d in dims:
                    case = correctness_cases(d, dtype, mask, dry).get(label)
                    if case:
                        jobs.append({"name": "sm90.d%d.%s.%s.%s" % (d, dtype, mask, label), "kind": "fwd_check",
                                     "case": case, "variant": None, "seed": d + len(jobs)})
    return jobs


def listed(attune, d, arch, family):
    out = subprocess.run([attune, "variants", "list", "--dk", str(d), "--dv", str(d), "--arch", arch],
                         capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(family + "/")]


def sweep(ids, count, keep=()):
    """`count` ids spread over the list (the space's order varies the tunables), plus `keep`."""
    step = max(1, len(ids) // max(count, 1))
    chosen = [i for i in keep if i in ids]
    for i in ids[::step]:
        if len(chosen) >= count + len(keep):
            break
        if i not in chosen:
            chosen.append(i)
    return chosen


def fa2_style(ids, d):
    """FlashAttention-2's usual flash_fwd shape (4 warps of 16 rows, 2 stages)."""
    want = "bm64.bn%d.wm4.wn1.st2.qr1" % (64 if d <= 64 else 32)
    return next((i for i in ids if want in i), ids[0] if ids else None)


def timing_case(d, dtype, causal, dry):
    if dry:
        return dict(b=1, sq=128, sk=128, hq=1, hkv=1, d=d, dtype=dtype, mask="causal" if causal else "none")
    return dict(b=4, sq=4096, sk=4096, hq=16, hkv=16, d=d, dtype=dtype, mask="causal" if causal else "none")


# The heuristic's choices before issue 33's measured register table (128 x
# 176 at d128 was out of the space then): timed beside today's, so the GPU
# says what the change bought.
PREVIOUS_HEURISTIC = {128: "flash_fwd_sm90/d128.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc0"}

# The tile schedulers (templates/sm90_scheduler.cuh) on the d128 heuristic
# tiles, non-causal 128 x 176 and causal 128 x 128: one CTA per tile,
# static persistent, dynamic persistent, varlen, static over 2 x 1
# clusters with K/V multicast (paired on the non-causal case, its blocks
# alone elsewhere), each timed on both masks and on packed sequences of
# unequal lengths (varlen_timing_case).
SCHEDULERS = ("grid", "static", "dynamic", "varlen", "cluster")
SCHEDULER_TWINS = {128: ["flash_fwd_sm90/d128.bm128.bn%d.st2.pp1.ov1.ra0.ts1.sc%d" % (bn, sc)
                         for bn in (176, 128) for sc in range(len(SCHEDULERS))]}


def varlen_timing_case(d, dtype, dry):
    """Packed causal sequences of unequal lengths (a prefill batch), each with its own keys: where the
    varlen scheduler numbers only the tiles that exist and takes the longest sequence first."""
    lengths = [130, 5, 70] if dry else [8192, 512, 4096, 128, 2048, 1024, 300, 6000]
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    hq = 2 if dry else 16
    return dict(b=len(lengths), sq=max(lengths), sk=max(lengths), hq=hq, hkv=hq, d=d, dtype=dtype, mask="causal",
                cu_q=cu, cu_k=list(cu))


def sweep_ids(attune, dry, count):
    """{d: (sm90 ids to time, the flash_fwd FA2-style id)}: the variants the
    timing step may launch (each checked for correctness first), the
    previous heuristic's among them."""
    out = {}
    for d in ((64,) if dry else HEAD_DIMS):
        sm90 = listed(attune, d, "sm_90a", "flash_fwd_sm90")
        fa2 = fa2_style(listed(attune, d, "sm_90a", "flash_fwd"), d)
        keep = ([PREVIOUS_HEURISTIC[d]] if d in PREVIOUS_HEURISTIC else []) + SCHEDULER_TWINS.get(d, [])
        out[d] = (sweep(sm90, 1 if dry else count, keep), fa2)
    return out


def sweep_check_jobs(ids_by_d, dry):
    """Each variant the timing step will time, on one small causal case per dtype."""
    jobs = []
    for d, (ids, fa2) in ids_by_d.items():
        for vid in ids + ([fa2] if fa2 else []):
            for dtype in (("bf16",) if dry else DTYPES):
                case = correctness_cases(d, dtype, "causal", dry)["small"]
                jobs.append({"name": "sweep.%s.%s" % (vid, dtype), "kind": "fwd_check", "case": case,
                             "variant": vid, "seed": 3})
    return jobs


def decode_case(dry):
    if dry:
        return dict(b=1, sk=300, hq=4, hkv=1, d=64, dtype="bf16")
    return dict(b=1, sk=32768, hq=64, hkv=8, d=128, dtype="bf16")


def bwd_cases(dry):
    """(check cases, timing cases)."""
    if dry:
        return ([dict(b=1, sq=40, sk=40, hq=2, hkv=2, d=32, dtype="bf16", mask="causal")],
                [dict(b=1, sq=64, sk=64, hq=1, hkv=1, d=64, dtype="bf16", mask="none")])
    checks = [dict(b=2, sq=1000, sk=1000, hq=4, hkv=4, d=64, dtype="bf16", mask=m) for m in ("none", "causal")]
    checks += [dict(b=1, sq=777, sk=777, hq=4, hkv=4, d=128, dtype="bf16", mask="causal")]
    timing = [dict(b=8, sq=4096, sk=4096, hq=16, hkv=16, d=d, dtype="bf16", mask=m)
              for d in (64, 128) for m in ("none", "causal")]
    return checks, timing


DROPOUT_P = 0.1


def dropout_cases(dry):
    """(check cases, timing cases) of the dropout step: a small causal GQA
    check, and the backward's timing shape with and without dropout."""
    if dry:
        return ([dict(b=1, sq=40, sk=40, hq=2, hkv=1, d=64, dtype="bf16", mask="causal")],
                [dict(b=1, sq=64, sk=64, hq=1, hkv=1, d=64, dtype="bf16", mask="none")])
    checks = [dict(b=2, sq=300, sk=300, hq=4, hkv=2, d=d, dtype="bf16", mask="causal") for d in (64, 128)]
    timing = [dict(b=8, sq=4096, sk=4096, hq=16, hkv=16, d=128, dtype="bf16", mask=m) for m in ("none", "causal")]
    return checks, timing


def fp8_cases(dry):
    """(check cases, timing cases) of the fp8 step: e4m3 forwards at d 128,
    causal and not, and decode over an e4m3 paged cache under bf16 queries;
    timed at shapes of a few milliseconds."""
    if dry:
        fwd = [dict(op="fwd", fmt="e4m3", b=1, sq=40, sk=40, hq=2, hkv=2, d=128, mask=m) for m in ("none", "causal")]
        dec = dict(op="decode", fmt="e4m3", b=2, sk=150, page=16, hq=4, hkv=1, d=128)
        return fwd + [dec], [dict(fwd[0], sq=64, sk=64, hq=1, hkv=1), dict(dec, b=1)]
    fwd = [dict(op="fwd", fmt="e4m3", b=2, sq=500, sk=500, hq=4, hkv=4, d=128, mask=m) for m in ("none", "causal")]
    dec = dict(op="decode", fmt="e4m3", b=3, sk=1000, page=64, hq=16, hkv=2, d=128)
    timing = [dict(op="fwd", fmt="e4m3", b=4, sq=4096, sk=4096, hq=16, hkv=16, d=128, mask=m)
              for m in ("none", "causal")]
    timing += [dict(op="decode", fmt="e4m3", b=8, sk=16384, page=64, hq=64, hkv=8, d=128)]
    return fwd + [dec], timing
