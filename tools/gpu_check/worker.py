"""The isolated worker: runs a list of kernel jobs in this process, one after
another, and says what it is doing before every launch.

    main.py worker --jobs JOBS.json --results RESULTS.jsonl --first N [--dry-run]

RESULTS gets one JSON line per event, flushed before the next step:
{"job": i, "event": "start"}, then {"job": i, "event": "partial", ...} for
each measured piece, then {"job": i, "event": "done", "result": {...}} or
{"job": i, "event": "error", "message": ..., "sticky": bool}. The parent
(isolate.py) names the job in flight when this process hangs or dies, kills
it, and starts a new worker after it. After a CUDA error the context may be
lost, so the worker records it and exits (status 3) instead of going on.

Jobs (built by plan.py): fwd_check (one variant on one case against the
fp64 oracle, with diagnostics and the emulator's output on failure),
fwd_time (variants, SDPA flash and cuDNN on the same inputs), decode, bwd,
dropout (forward and backward with dropout: checked, and timed beside the
plain ones).
Planted faults for the rehearsal: ATTUNE_GPU_CHECK_PLANT="hang@NAME,sticky@NAME,wrong@NAME"
(a job that never returns, a sticky CUDA error through the fake driver, an
output with one 8 x 8 group per tile off by 1).
"""
import json
import math
import os
import statistics
import sys
import time
import traceback

import binding
import checks

STICKY_EXIT = 3


class Context:
    """What every job needs: torch, the device, attune's runtimes."""

    def __init__(self, dry, work):
        import torch
        self.torch = torch
        self.dry = dry
        self.work = work
        self.dev = torch.device("cpu" if dry else "cuda")
        self.backend = "emu" if dry else "cuda"
        self._rt = None
        self._emu = None

    @property
    def rt(self):
        if self._rt is None:
            self._rt = binding.Runtime(self.backend)
        return self._rt

    @property
    def emu(self):
        if self._emu is None:
            self._emu = self.rt if self.dry else binding.Runtime("emu")
        return self._emu

    def stream(self):
        if self.dry:
            return None
        import ctypes
        return ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream)

    def sync(self):
        if not self.dry:
            self.torch.cuda.synchronize()

    def sm_clock_mhz(self):
        if self.dry:
            return None
        try:
            import pynvml
            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(self.torch.cuda.current_device())
            return pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        except Exception:  # noqa: BLE001 - the clock is context, not a result
            return None


def dtype_of(torch, name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


# ----------------------------------------------------------------- inputs

def make_case(ctx, case, seed):
    """Q, K, V and the problem of a case: {"b","sq","sk","hq","hkv","d","dv","mask","dtype","cu_q","cu_k"}."""
    torch = ctx.torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    dt = dtype_of(torch, case["dtype"])
    dv = case.get("dv", case["d"])
    if case.get("cu_q"):
        tq, tk = case["cu_q"][-1], case["cu_k"][-1]
        shapes = [(tq, case["hq"], case["d"]), (tk, case["hkv"], case["d"]), (tk, case["hkv"], dv)]
    else:
        shapes = [(case["b"], case["sq"], case["hq"], case["d"]), (case["b"], case["sk"], case["hkv"], case["d"]),
                  (case["b"], case["sk"], case["hkv"], dv)]
    q, k, v = (torch.randn(s, generator=g).to(dt).to(ctx.dev) for s in shapes)
    mask = case["mask"] if case["mask"] != "varlen" else "none"
    prob = binding.Problem(q, k, v, mask, case.get("cu_q"), case.get("cu_k"))
    return q, k, v, prob


def outputs(ctx, q, v, prob, device=None):
    """O and LSE filled with NaN, so an element no one writes fails the check
    (on ctx's device, or `device`)."""
    torch = ctx.torch
    device = device or ctx.dev
    o = torch.full(q.shape[:-1] + (v.shape[-1],), float("nan"), dtype=q.dtype, device=device)
    p = prob.c
    lse_shape = (p.heads_q, p.seqlen_q) if p.cu_seqlens_q else (p.batch, p.heads_q, p.seqlen_q)
    lse = torch.full(lse_shape, float("nan"), dtype=torch.float32, device=device)
    return o, lse


def oracle(ctx, q, k, v, case, p_storage=None):
    """(fp64 reference, naive storage-dtype attention), both (O, LSE);
    p_storage: the naive attention's P rounded to it first (fp8 Q, K, V)."""
    mask = "causal" if case["mask"] == "causal" else "none"
    scale = 1.0 / math.sqrt(case["d"])
    ref = checks.attention(q, k, v, mask, scale, case.get("cu_q"), case.get("cu_k"))
    naive = checks.attention(q, k, v, mask, scale, case.get("cu_q"), case.get("cu_k"), storage=q.dtype,
                             p_storage=p_storage)
    return ref, naive


# ----------------------------------------------------------------- jobs

def job_fwd_check(ctx, job, emit):
    """One variant (or the dispatcher's choice) on one case: NaN-filled
    outputs, the accuracy rule, diagnostics, and on failure the emulator on
    the same inputs."""
    case = job["case"]
    q, k, v, prob = make_case(ctx, case, job.get("seed", 1))
    variant = job.get("variant") or ctx.rt.explain(prob).split()[0]
    emit({"variant": variant, "shape": prob.describe()})
    o, lse = outputs(ctx, q, v, prob)
    ctx.rt.forward(prob, q, k, v, o, lse, variant, ctx.stream())
    ctx.sync()
    if job.get("planted") == "wrong":
        # The rehearsal's wrong kernel: one 8 x 8 group of each 64 x 64 tile
        # off by 1 (rows 8-15, columns 16-23), as a fragment-layout bug would be.
        view = o if o.dim() == 4 else o.unsqueeze(0)
        for r0 in range(8, view.shape[1], 64):
            view[:, r0:r0 + 8, :, 16:24] += 1
    ref, naive = oracle(ctx, q, k, v, case)
    ok, text, numbers = checks.within_rule((o, lse), ref, naive)
    result = {"variant": variant, "shape": prob.describe(), "ok": ok, "text": text, **numbers}
    if ok:
        return result
    record, lines = checks.diagnose(o, ref[0], numbers["o_limit"], packed=bool(case.get("cu_q")))
    result["diagnosis"] = record
    result["diagnosis_lines"] = lines
    stem = os.path.join(ctx.work, "npy", job["name"].replace("/", "_"))
    small = o.numel() <= job.get("save_limit", 1 << 20)
    if small:
        os.makedirs(os.path.dirname(stem), exist_ok=True)
        import numpy as np
        for name, t in (("o_gpu", o), ("lse_gpu", lse), ("o_ref", ref[0]), ("lse_ref", ref[1]),
                        ("q", q), ("k", k), ("v", v)):
            np.save("%s.%s.npy" % (stem, name), t.detach().float().cpu().numpy())
        result["npy"] = os.path.basename(stem) + ".*.npy"
    # On a GPU the emulator runs the same inputs; in the rehearsal only for a
    # planted wrong result (the emulator is the "GPU" there).
    if job.get("emulate", True) and small and (not ctx.dry or job.get("planted") == "wrong"):
        emit({"emulating": variant})
        cpu = [x.cpu() for x in (q, k, v)]
        eprob = binding.Problem(*cpu, prob_mask(case), case.get("cu_q"), case.get("cu_k"))
        eo, else_ = outputs(ctx, cpu[0], cpu[2], eprob, "cpu")
        try:
            ctx.emu.forward(eprob, *cpu, eo, else_, variant)
            ref_cpu = tuple(x.cpu() for x in ref)
            naive_cpu = tuple(x.cpu() for x in naive)
            emu_ok, emu_text, _ = checks.within_rule((eo, else_), ref_cpu, naive_cpu)
            same = (eo.float() - o.cpu().float()).abs().nan_to_num(nan=math.inf).max().item()
            gpu_vs_emu = same <= numbers["o_limit"]
            result["emulator"] = {"ok": emu_ok, "text": emu_text, "max_gpu_minus_emu": same}
            import numpy as np
            np.save("%s.o_emu.npy" % stem, eo.float().numpy())
        except Exception as e:  # noqa: BLE001 - the emulator's own report (a KernelFault) is the answer
            emu_ok, gpu_vs_emu = False, False
            result["emulator"] = {"ok": False, "text": "emulator: " + str(e)[:600]}
        result["verdict"] = checks.verdict(False, emu_ok, gpu_vs_emu)
    else:
        result["verdict"] = checks.verdict(False, None, None)
    return result


def prob_mask(case):
    return case["mask"] if case["mask"] != "varlen" else "none"


def time_launches(ctx, launch, sets, launches, reps):
    """Per-launch ms: median and spread (max - min) of `reps` timings of
    `launches` back-to-back launches between one pair of events, inputs
    rotated among `sets`."""
    torch = ctx.torch
    for i in range(1 if ctx.dry else 2):
        launch(*sets[i % len(sets)])
    ctx.sync()
    times = []
    for _ in range(reps):
        if ctx.dry:
            start = time.perf_counter()
            for i in range(launches):
                launch(*sets[i % len(sets)])
            times.append((time.perf_counter() - start) * 1e3 / launches)
            continue
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(launches):
            launch(*sets[i % len(sets)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / launches)
    return statistics.median(times), max(times) - min(times)


def fwd_flops(case):
    if case.get("cu_q"):  # packed: each sequence's own (its keys as long as its queries when causal)
        return sum(fwd_flops(dict(case, b=1, sq=q1 - q0, sk=k1 - k0, cu_q=None))
                   for q0, q1, k0, k1 in zip(case["cu_q"], case["cu_q"][1:], case["cu_k"], case["cu_k"][1:]))
    b, s, h, d = case["b"], case["sq"], case["hq"], case["d"]
    pairs = s * (s + 1) // 2 if case["mask"] == "causal" else s * case["sk"]
    return 4.0 * b * h * d * pairs


def tflops(fl, ms):
    return fl / (ms * 1e-3) / 1e12 if ms and math.isfinite(ms) and ms > 0 else float("nan")


def sdpa_launch(ctx, causal, backend):
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    def launch(q, k, v):
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=causal)
    return launch


def job_fwd_time(ctx, job, emit):
    """attune variants (each on its own plan), SDPA flash and cuDNN on the
    same 4 input sets; per-launch median ms of back-to-back launches."""
    torch = ctx.torch
    from torch.nn.attention import SDPBackend
    case = job["case"]
    sets = []
    for i in range(job.get("sets", 4)):
        q, k, v, prob = make_case(ctx, case, 100 + i)
        sets.append((q, k, v))
    o = torch.empty_like(sets[0][0])
    packed = bool(case.get("cu_q"))
    lse = torch.empty(*((case["hq"], case["cu_q"][-1]) if packed else (case["b"], case["hq"], case["sq"])),
                      dtype=torch.float32, device=ctx.dev)
    fl = fwd_flops(case)
    # A packed case's plan reads its offsets from device memory at each run.
    metadata = {name: torch.tensor(case[key], dtype=torch.int32, device=ctx.dev)
                for name, key in (("cu_seqlens_q", "cu_q"), ("cu_seqlens_k", "cu_k"))} if packed else None
    heuristic = ctx.rt.explain(prob).split()[0]
    rows = {}
    launches, reps = job.get("launches", 10), job.get("reps", 10)
    for name in [None] + job["variants"]:
        label = name or "heuristic"
        try:
            plan = ctx.rt.plan(prob, "fwd", name)
            stream = ctx.stream()
            ms, spread = time_launches(ctx, lambda q, k, v: plan.run(stream, metadata, q=q, k=k, v=v, o=o, lse=lse),
                                       sets, launches, reps)
            row = {"variant": name or heuristic, "ms": ms, "spread_ms": spread, "tflops": tflops(fl, ms)}
        except Exception as e:  # noqa: BLE001 - recorded with the variant; a CUDA error ends the worker below
            if is_cuda_error(e):
                raise
            row = {"variant": name or heuristic, "error": str(e)[:400]}
        rows[label] = row
        emit({"timed": label, **row})
    for label, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        if packed:
            rows[label] = {"error": "SDPA takes no packed sequences"}
            continue
        try:
            ms, spread = time_launches(ctx, sdpa_launch(ctx, case["mask"] == "causal", backend), sets, launches, reps)
            rows[label] = {"ms": ms, "spread_ms": spread, "tflops": tflops(fl, ms)}
        except RuntimeError as e:
            if is_cuda_error(e):
                raise
            rows[label] = {"error": str(e)[:200]}
        emit({"timed": label, **rows[label]})
    return {"case": case, "heuristic": heuristic, "flops": fl, "rows": rows, "sm_clock_mhz": ctx.sm_clock_mhz()}


def job_decode(ctx, job, emit):
    """Split-KV decode on a long contiguous cache: correctness, then per-launch
    time for several split counts (plans, one workspace each, replayed)."""
    torch = ctx.torch
    case = job["case"]
    b, cache, hq, hkv, d = case["b"], case["sk"], case["hq"], case["hkv"], case["d"]
    g = torch.Generator(device="cpu").manual_seed(7)
    dt = dtype_of(torch, case["dtype"])
    sets = [tuple(torch.randn(s, generator=g).to(dt).to(ctx.dev) for s in
                  ((b, 1, hq, d), (b, cache, hkv, d), (b, cache, hkv, d))) for _ in range(job.get("sets", 2))]
    q, k, v = sets[0]
    prob = binding.Problem(q, k, v, "none")
    o, lse = outputs(ctx, q, v, prob)
    plan0 = ctx.rt.plan(prob, "decode")
    plan0.run(ctx.stream(), q=q, k=k, v=v, o=o, lse=lse)
    ctx.sync()
    ref, naive = oracle(ctx, q, k, v, dict(case, mask="none", sq=1))
    ok, text, numbers = checks.within_rule((o, lse), ref, naive)
    emit({"correct": ok, "text": text, "plan": plan0.description})
    kv_bytes = 2 * b * cache * hkv * d * q.element_size()
    rows = []
    for splits in job["splits"]:
        try:
            plan = ctx.rt.plan(prob, "decode", splits=splits)
            stream = ctx.stream()
            ms, spread = time_launches(ctx, lambda q, k, v: plan.run(stream, q=q, k=k, v=v, o=o, lse=lse), sets,
                                       job.get("launches", 20), job.get("reps", 10))
            row = {"splits": splits, "plan": plan.description, "ms": ms, "spread_ms": spread,
                   "bytes_per_s": kv_bytes / (ms * 1e-3)}
        except Exception as e:  # noqa: BLE001
            if is_cuda_error(e):
                raise
            row = {"splits": splits, "error": str(e)[:300]}
        rows.append(row)
        emit({"timed": splits, **row})
    return {"case": case, "ok": ok, "text": text, "plan": plan0.description, "kv_bytes": kv_bytes, "rows": rows,
            **numbers, "sm_clock_mhz": ctx.sm_clock_mhz()}


def job_bwd(ctx, job, emit):
    """Gradients against fp32 autograd of the fp64 oracle's formula (a
    correctness case), or per-launch time of plans (deterministic or not)
    against SDPA flash's backward (a timing case)."""
    torch = ctx.torch
    case = job["case"]
    q, k, v, prob = make_case(ctx, case, 11)
    g = torch.Generator(device="cpu").manual_seed(12)
    d_o = torch.randn(q.shape, generator=g).to(q.dtype).to(ctx.dev)
    o, lse = outputs(ctx, q, v, prob)
    ctx.rt.forward(prob, q, k, v, o, lse, None, ctx.stream())
    grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
    bwd = ctx.rt.plan(prob, "bwd")
    stream = ctx.stream()

    def run(plan):
        plan.run(stream, q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=grads[0], dk=grads[1], dv=grads[2])

    run(bwd)
    ctx.sync()
    if job.get("check", True):
        causal = case["mask"] == "causal"
        qf, kf, vf = (x.double().detach().requires_grad_() for x in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(
            qf.transpose(1, 2), kf.transpose(1, 2), vf.transpose(1, 2), is_causal=causal)
        out.backward(d_o.double().transpose(1, 2))
        errs = [((gr.double() - w.grad).norm() / w.grad.norm()).item() for gr, w in zip(grads, (qf, kf, vf))]
        ok = all(math.isfinite(e) and e <= 2e-2 for e in errs)
        result = {"case": case, "ok": ok, "errors": dict(zip(("dq", "dk", "dv"), errs)), "plan": bwd.description}
        emit(result)
        if not job.get("time", False):
            return result
    else:
        result = {"case": case, "plan": bwd.description}
    from torch.nn.attention import SDPBackend
    fl = 2.5 * fwd_flops(case)
    launches, reps = job.get("launches", 5), job.get("reps", 7)
    ms, spread = time_launches(ctx, lambda: run(bwd), [()], launches, reps)
    det = ctx.rt.plan(prob, "bwd", deterministic=True)
    det_ms, det_spread = time_launches(ctx, lambda: run(det), [()], launches, reps)
    # Deterministic mode: one more run from NaN gradients gives the same bits.
    ctx.sync()
    first = [x.clone() for x in grads]
    for x in grads:
        x.fill_(float("nan"))
    run(det)
    ctx.sync()
    bitwise = all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(first, grads))
    result.update({"ms": ms, "spread_ms": spread, "tflops": tflops(fl, ms), "deterministic_ms": det_ms,
                   "deterministic_plan": det.description, "deterministic_bitwise": bitwise})
    emit({"timed": "attune", "ms": ms, "deterministic_ms": det_ms})
    # The same gradients from SDPA's FlashAttention and cuDNN backends.
    for label, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel([backend]):
                qs, ks, vs = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
                out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=case["mask"] == "causal")
                dot = d_o.transpose(1, 2)
                sdpa_ms, _ = time_launches(
                    ctx, lambda: torch.autograd.grad(out, (qs, ks, vs), dot, retain_graph=True), [()], launches, reps)
        except RuntimeError as e:
            if is_cuda_error(e):
                raise
            sdpa_ms = float("nan")
        result[label + "_ms"] = sdpa_ms
    result.update({"sdpa_tflops": tflops(fl, result["sdpa_flash_ms"]), "sm_clock_mhz": ctx.sm_clock_mhz()})
    return result


DROPOUT_SEED, DROPOUT_OFFSET = 0x243F6A8885A308D3, 8


def with_dropout(prob, p):
    """The problem with dropout p under the check's fixed seed and offset."""
    prob.c.dropout_p, prob.c.seed, prob.c.offset = p, DROPOUT_SEED, DROPOUT_OFFSET
    return prob


def dropout_weights(ctx, case, p):
    """[B, Hq, Sq, Sk] float64: 1 / (1 - p) where the kernels keep an element
    under the check's seed and offset, 0 where they drop it (the host's copy
    of the kernels' Philox decision, attune._dropout.keep_mask)."""
    from attune import _dropout
    keep = _dropout.keep_mask(p, DROPOUT_SEED, DROPOUT_OFFSET, case["b"], case["hq"], case["sq"], case["sk"])
    return (ctx.torch.from_numpy(keep).to(ctx.torch.float64) / (1.0 - p)).to(ctx.dev)


def dropout_oracle_grads(ctx, q, k, v, d_o, causal, weights):
    """dQ, dK, dV of the dropout forward in float64 autograd: O = (softmax(S) W) V."""
    torch = ctx.torch
    qf, kf, vf = (x.double().detach().requires_grad_() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    qh = qf.transpose(1, 2)
    kh = kf.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = vf.transpose(1, 2).repeat_interleave(group, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = s.shape[-2], s.shape[-1]
        i = torch.arange(sq, device=s.device).view(-1, 1)
        j = torch.arange(sk, device=s.device).view(1, -1)
        s = s.masked_fill(j > i + (sk - sq), -math.inf)
    out = torch.matmul(torch.softmax(s, dim=-1) * weights, vh)
    out.backward(d_o.double().transpose(1, 2))
    return qf.grad, kf.grad, vf.grad


def job_dropout(ctx, job, emit):
    """Dropout (p = job["p"]): a correctness case (the dispatched forward
    against the fp64 oracle with the host's mask, the backward plan's
    gradients against float64 autograd of the same formula), or a timing case
    (forward and backward plans with and without dropout on the same inputs,
    and SDPA flash with and without dropout)."""
    torch = ctx.torch
    case, p = job["case"], job["p"]
    causal = case["mask"] == "causal"
    stream = ctx.stream()
    q, k, v, plain = make_case(ctx, case, 31)
    drop = with_dropout(binding.Problem(q, k, v, prob_mask(case)), p)
    g = torch.Generator(device="cpu").manual_seed(32)
    d_o = torch.randn(q.shape, generator=g).to(q.dtype).to(ctx.dev)
    result = {"case": case, "p": p, "variant": ctx.rt.explain(drop).split()[0]}
    if job.get("check", False):
        o, lse = outputs(ctx, q, v, drop)
        ctx.rt.forward(drop, q, k, v, o, lse, None, stream)
        ctx.sync()
        w = dropout_weights(ctx, case, p)
        scale = 1.0 / math.sqrt(case["d"])
        mask = "causal" if causal else "none"
        ref = checks.attention(q, k, v, mask, scale, weights=w)
        naive = checks.attention(q, k, v, mask, scale, storage=q.dtype, weights=w)
        ok, text, numbers = checks.within_rule((o, lse), ref, naive)
        result.update({"ok": ok, "text": text, **numbers})
        grads = [torch.full_like(x, float("nan")) for x in (q, k, v)]
        bwd = ctx.rt.plan(drop, "bwd")
        bwd.run(stream, q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=grads[0], dk=grads[1], dv=grads[2])
        ctx.sync()
        want = dropout_oracle_grads(ctx, q, k, v, d_o, causal, w)
        errs = [((gr.double() - wg).norm() / wg.norm()).item() for gr, wg in zip(grads, want)]
        result["errors"] = dict(zip(("dq", "dk", "dv"), errs))
        result["ok"] = ok and all(math.isfinite(e) and e <= 2e-2 for e in errs)
        result["bwd_plan"] = bwd.description
        emit(result)
        return result
    launches, reps = job.get("launches", 5), job.get("reps", 7)
    fl = fwd_flops(case)
    for label, prob in (("plain", plain), ("dropout", drop)):
        o, lse = outputs(ctx, q, v, prob)
        fwd = ctx.rt.plan(prob, "fwd")
        ms, spread = time_launches(ctx, lambda: fwd.run(stream, q=q, k=k, v=v, o=o, lse=lse), [()], launches, reps)
        grads = [torch.empty_like(x) for x in (q, k, v)]
        bwd = ctx.rt.plan(prob, "bwd")
        bms, bspread = time_launches(ctx, lambda: bwd.run(stream, q=q, k=k, v=v, o=o, lse=lse, d_o=d_o, dq=grads[0],
                                                          dk=grads[1], dv=grads[2]), [()], launches, reps)
        result[label] = {"fwd_plan": fwd.description, "fwd_ms": ms, "fwd_spread_ms": spread,
                         "fwd_tflops": tflops(fl, ms), "bwd_plan": bwd.description, "bwd_ms": bms,
                         "bwd_spread_ms": bspread, "bwd_tflops": tflops(2.5 * fl, bms)}
        emit({"timed": label, **result[label]})
    try:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qs, ks, vs = (x.transpose(1, 2).detach().requires_grad_() for x in (q, k, v))
        for label, dp in (("sdpa_flash_plain", 0.0), ("sdpa_flash_dropout", p)):
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                fms, _ = time_launches(ctx, lambda: F.scaled_dot_product_attention(qs, ks, vs, dropout_p=dp,
                                                                                   is_causal=causal), [()],
                                       launches, reps)
                out = F.scaled_dot_product_attention(qs, ks, vs, dropout_p=dp, is_causal=causal)
                dot = d_o.transpose(1, 2)
                bms, _ = time_launches(ctx, lambda: torch.autograd.grad(out, (qs, ks, vs), dot, retain_graph=True),
                                       [()], launches, reps)
            result[label] = {"fwd_ms": fms, "bwd_ms": bms}
            emit({"timed": label, **result[label]})
    except RuntimeError as e:
        if is_cuda_error(e):
            raise
        result["sdpa_error"] = str(e)[:200]
    result["sm_clock_mhz"] = ctx.sm_clock_mhz()
    return result

FP8 = {"e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2"}


def fp8_sets(ctx, shapes, fmt, count, seed):
    """`count` input sets in the fp8 format and the same values in bf16 (every
    e4m3 and e5m2 value is a bf16 value: the 16-bit twin reads what fp8 stores)."""
    torch = ctx.torch
    f8 = getattr(torch, FP8[fmt])
    g = torch.Generator(device="cpu").manual_seed(seed)
    sets8 = [tuple(torch.randn(s, generator=g).to(f8).to(ctx.dev) for s in shapes) for _ in range(count)]
    return sets8, [tuple(x.to(torch.bfloat16) for x in s) for s in sets8]


def job_fp8(ctx, job, emit):
    """fp8 inputs: a forward of fp8 Q, K and V (O in bf16), or decode over an
    fp8 paged cache under bf16 queries. Checked against the oracle on the
    dequantized values (descales 1); timed beside the same shape in bf16 (and
    the forward beside SDPA's best bf16 backend) on the same values."""
    torch = ctx.torch
    from torch.nn.attention import SDPBackend
    case = job["case"]
    b, hq, hkv, d, fmt = case["b"], case["hq"], case["hkv"], case["d"], case["fmt"]
    launches, reps = job.get("launches", 10), job.get("reps", 7)
    if case["op"] == "fwd":
        sq, sk = case["sq"], case["sk"]
        sets8, sets16 = fp8_sets(ctx, ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)), fmt, job.get("sets", 1), 11)
        q8, k8, v8 = sets8[0]
        probs = {"fp8": binding.Problem(q8, k8, v8, case["mask"]), "bf16": binding.Problem(*sets16[0], case["mask"])}
        sizes, meta = {"fp8": 0, "bf16": 0}, None
        op, oracle_case = "fwd", case
    else:
        # A paged cache: pages shuffled, each sequence `sk` keys long; bf16 queries over an fp8 (or bf16) pool.
        sk, page = case["sk"], case["page"]
        per = -(-sk // page)
        order = torch.randperm(b * per, generator=torch.Generator(device="cpu").manual_seed(5)).tolist()
        table = [order[i * per:(i + 1) * per] for i in range(b)]
        shapes = ((b, 1, hq, d), (b * per, page, hkv, d), (b * per, page, hkv, d))
        sets8, sets16 = fp8_sets(ctx, shapes, fmt, job.get("sets", 1), 13)
        sets8 = [(q16, k8, v8) for (q16, _, _), (_, k8, v8) in zip(sets16, sets8)]  # bf16 queries
        q8, k8, v8 = sets8[0]
        paged = (table, [sk] * b)
        probs = {"fp8": binding.Problem(q8, k8, v8, "none", paged=paged),
                 "bf16": binding.Problem(*sets16[0], "none", paged=paged)}
        # K and V bytes read: the cache as stored (1 byte an fp8 element).
        sizes = {"fp8": 2 * b * sk * hkv * d, "bf16": 4 * b * sk * hkv * d}
        op, oracle_case = "decode", dict(case, mask="none", sq=1)
        meta = {"seqlens_k": torch.tensor([sk] * b, dtype=torch.int32, device=ctx.dev),
                "block_table": torch.tensor(table, dtype=torch.int32, device=ctx.dev)}
    q16, k16, v16 = sets16[0]
    o, lse = outputs(ctx, q16, v16, probs["bf16"])
    plan8 = ctx.rt.plan(probs["fp8"], op)
    plan8.run(ctx.stream(), meta, q=q8, k=k8, v=v8, o=o, lse=lse)
    ctx.sync()
    if op == "decode":
        # The oracle on the dense cache the block table describes.
        def dense(pool):
            return torch.stack([pool[torch.tensor(t)].reshape(-1, hkv, d)[:sk] for t in table])
        k16, v16 = dense(k16), dense(v16)
    # fp8 Q, K and V: the rule's naive attention rounds P to their format too (an fp8 cache's keeps bf16 P).
    p_storage = getattr(torch, FP8[fmt]) if op == "fwd" else None
    ref, naive = oracle(ctx, q16, k16, v16, oracle_case, p_storage)
    ok, text, numbers = checks.within_rule((o, lse), ref, naive)
    result = {"case": case, "ok": ok, "text": text, "plan": plan8.description, **numbers}
    emit({"correct": ok, "text": text, "plan": plan8.description})
    if not job.get("time"):
        return result
    rows = {}
    for label, sets in (("fp8", sets8), ("bf16", sets16)):
        plan = plan8 if label == "fp8" else ctx.rt.plan(probs[label], op)
        stream = ctx.stream()
        ms, spread = time_launches(ctx, lambda q, k, v, plan=plan: plan.run(stream, meta, q=q, k=k, v=v, o=o, lse=lse),
                                   sets, launches, reps)
        rows[label] = {"plan": plan.description, "ms": ms, "spread_ms": spread}
        if op == "fwd":
            rows[label]["tflops"] = tflops(fwd_flops(case), ms)
        else:
            rows[label]["bytes_per_s"] = sizes[label] / (ms * 1e-3)
        emit({"timed": label, **rows[label]})
    if op == "fwd":
        # SDPA has no fp8 attention: its fastest bf16 backend on the same values.
        for label, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                               ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                ms, spread = time_launches(ctx, sdpa_launch(ctx, case["mask"] == "causal", backend), sets16, launches,
                                           reps)
                rows[label] = {"ms": ms, "spread_ms": spread, "tflops": tflops(fwd_flops(case), ms)}
            except RuntimeError as e:
                if is_cuda_error(e):
                    raise
                rows[label] = {"error": str(e)[:200]}
            emit({"timed": label, **rows[label]})
    result.update(rows=rows, sm_clock_mhz=ctx.sm_clock_mhz())
    return result


JOBS = {"fwd_check": job_fwd_check, "fwd_time": job_fwd_time, "decode": job_decode, "bwd": job_bwd,
        "dropout": job_dropout, "fp8": job_fp8}


def is_cuda_error(e):
    """A CUDA error (attune's or torch's): the context may be lost."""
    if isinstance(e, binding.CudaError):
        return True
    text = str(e)
    return "CUDA error" in text or "CUDA_ERROR" in text or "cudaError" in text


def planted(name):
    """The planted fault for job `name` (rehearsal only): "hang", "sticky" or None."""
    for item in os.environ.get("ATTUNE_GPU_CHECK_PLANT", "").split(","):
        if "@" in item:
            kind, target = item.split("@", 1)
            if target == name:
                return kind
    return None


def plant_sticky(ctx, job):
    """A sticky fault through the real error path: a launch on the recording
    fake driver that fails with CUDA_ERROR_ILLEGAL_ADDRESS."""
    os.environ["ATTUNE_FAKE_CUDA_FAIL"] = "cuLaunchKernel:1:700"
    rt = binding.Runtime("cuda")
    q, k, v, prob = make_case(ctx, job["case"], 1)
    o, lse = outputs(ctx, q, v, prob, "cpu")
    rt.forward(prob, q, k, v, o, lse, job.get("variant"))
    raise AssertionError("the planted sticky fault did not fail")


def main(args):
    with open(args.jobs) as f:
        jobs = json.load(f)
    ctx = Context(args.dry_run, args.work)
    out = open(args.results, "a", buffering=1)

    def write(record):
        out.write(json.dumps(record, default=str) + "\n")
        out.flush()
        os.fsync(out.fileno())

    for i in range(args.first, len(jobs)):
        job = jobs[i]
        write({"job": i, "event": "start", "name": job["name"], "t": time.time()})
        try:
            plant = planted(job["name"])
            if plant == "hang":
                while True:  # a kernel that never returns
                    time.sleep(1)
            if plant == "sticky":
                plant_sticky(ctx, job)
            if plant == "wrong":
                job = dict(job, planted="wrong")
            result = JOBS[job["kind"]](ctx, job, lambda piece: write({"job": i, "event": "partial", **piece}))
            write({"job": i, "event": "done", "result": result})
        except Exception as e:  # noqa: BLE001 - every failure is recorded with its job
            sticky = is_cuda_error(e)
            report = binding.wait_report() if sticky else ""
            write({"job": i, "event": "error", "message": str(e)[:2000], "type": type(e).__name__,
                   "sticky": sticky, "wait_report": report, "traceback": traceback.format_exc()[-1500:]})
            if sticky:
                out.close()
                os._exit(STICKY_EXIT)  # the context may be lost: a new worker goes on
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit("run through main.py worker")
