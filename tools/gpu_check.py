#!/usr/bin/env python3
"""The stages of tools/gpu_check.sh that need Python, and the binding's self-test.

Usage:
  gpu_check.py --bundle DIR --out DIR/raw --stage facts|ceilings|forward|decode|backward
  gpu_check.py --bundle DIR --out DIR/raw --summary [--stage-results "facts=ok;..."]
  gpu_check.py --lib libattune.so --selftest-emu      (no GPU: the ctypes binding on the emulator)

Each stage writes OUT/STAGE.json (raw numbers) and OUT/STAGE.md (its report
section). Through the C API (libattune.so, ctypes) on torch's own device
tensors, so attune and SDPA run on the same inputs in the same process:
  facts     device name, SMs, clocks, driver, memory; torch and CUDA versions;
  ceilings  device-to-device copy bandwidth (read + write) and a bf16 GEMM
            rate (torch.matmul, 8192^3), the ceilings every ratio is read against;
  forward   attune's dispatched variant against fp32 SDPA (relative error next
            to bf16 SDPA's own), then bf16 timing at d 64 and 128, causal and
            not: the heuristic, the best of a small sweep of listed variants,
            and SDPA's flash and cuDNN backends. Median of 20 runs after
            warm-up, inputs rotated among 4 sets (more than L2);
  decode    split-KV decode on a 32k-token cache (8 KV heads, 64 query heads,
            d 128): correctness, then K and V bytes per second against the copy
            bandwidth, for the built-in split count and a few others;
  backward  dQ, dK, dV against fp32 autograd, then time against SDPA's flash
            backward, TFLOP/s from 2.5 times the forward's FLOPs.
FLOPs of a forward: 4 * B * H * D * visible pairs.
"""
import argparse
import concurrent.futures
import ctypes
import json
import math
import os
import statistics
import subprocess
import sys

# The attune package's ctypes binding (python/attune/_native.py; the bundle
# carries it in DIR/python): one mirror of the C structs, kept with the header.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from attune import _native as native  # noqa: E402

ATTUNE_MASK_NONE, ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT = native.MASK_NONE, native.MASK_CAUSAL_BOTTOM_RIGHT
ATTUNE_DTYPE_FP16, ATTUNE_DTYPE_BF16 = native.DTYPE_FP16, native.DTYPE_BF16
Problem = native.Problem


class Attune:
    def __init__(self, lib_path, backend):
        # NVRTC may come from pip (site-packages/nvidia/cu*/lib): tell the
        # library where this Python's site directories are.
        if "ATTUNE_PYTHON_SITE" not in os.environ:
            import site
            os.environ["ATTUNE_PYTHON_SITE"] = ":".join(site.getsitepackages() + sys.path)
        os.environ["ATTUNE_LIBRARY"] = os.path.abspath(lib_path)
        self.lib = native.lib()
        self.rt = ctypes.c_void_p()
        self._check(self.lib.attune_runtime_create(backend.encode(), 0, ctypes.byref(self.rt)))

    @staticmethod
    def _check(status):
        native.check(status)

    @staticmethod
    def problem(b, s, h, d, causal, dtype=ATTUNE_DTYPE_BF16):
        p = Problem()
        native.lib().attune_problem_init(ctypes.byref(p))
        p.dtype, p.batch, p.seqlen_q, p.seqlen_k = dtype, b, s, s
        p.heads_q = p.heads_kv = h
        p.head_dim_k = p.head_dim_v = d
        p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT if causal else ATTUNE_MASK_NONE
        return p

    @staticmethod
    def decode_problem(b, cache, hq, hkv, d, dtype=ATTUNE_DTYPE_BF16):
        """One query row per sequence against a contiguous cache of `cache` keys."""
        p = Problem()
        native.lib().attune_problem_init(ctypes.byref(p))
        p.dtype, p.batch, p.seqlen_q, p.seqlen_k = dtype, b, 1, cache
        p.heads_q, p.heads_kv = hq, hkv
        p.head_dim_k = p.head_dim_v = d
        return p

    def backward(self, p, q, k, v, o, d_o, lse, dq, dk, dv, deterministic=False):
        args = [ctypes.c_void_p(x) for x in (q, k, v, o, d_o, lse, dq, dk, dv)] + [ctypes.c_void_p(0)]
        self._check(self.lib.attune_backward(self.rt, ctypes.byref(p), 1 if deterministic else 0, *args))

    def decode(self, p, q, k, v, o, lse, splits=0):
        args = [ctypes.c_void_p(x) for x in (q, k, v, o, lse)] + [ctypes.c_void_p(0)]
        self._check(self.lib.attune_decode(self.rt, ctypes.byref(p), splits, *args))

    def forward(self, p, q, k, v, o, lse, variant=None):
        args = [ctypes.c_void_p(x) for x in (q, k, v, o, lse)] + [ctypes.c_void_p(0)]
        if variant is None:
            self._check(self.lib.attune_forward(self.rt, ctypes.byref(p), *args))
        else:
            self._check(self.lib.attune_forward_variant(self.rt, variant.encode(), ctypes.byref(p), *args))

    def explain(self, p):
        return native.checked_text(self.lib.attune_explain(self.rt, ctypes.byref(p)))


def bind(lib_path, backend):
    return Attune(lib_path, backend)


def selftest_emu(lib_path):
    """No GPU: the binding against the emulator on NumPy arrays."""
    import numpy as np
    a = bind(lib_path, "emu")
    b, s, h, d = 1, 37, 2, 64
    rng = np.random.default_rng(0)

    def bf16(x):
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF).astype(np.uint16)

    q, k, v = (bf16(rng.standard_normal((b, s, h, d))) for _ in range(3))
    o = np.zeros((b, s, h, d), np.uint16)
    lse = np.zeros((b, h, s), np.float32)
    p = Attune.problem(b, s, h, d, causal=True)
    a.forward(p, q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data, lse.ctypes.data)
    f = lambda x: (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    qf, kf, vf = f(q), f(k), f(v)
    logits = np.einsum("bihd,bjhd->bhij", qf, kf) / math.sqrt(d)
    logits = np.where(np.tril(np.ones((s, s), bool)), logits, -np.inf)
    ref = np.einsum("bhij,bjhd->bihd", np.exp(logits - logits.max(-1, keepdims=True)) /
                    np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True), vf)
    err = np.abs(f(o) - ref).max()
    print("selftest-emu: %s; max |O - ref| = %.2e" % (a.explain(p), err))
    # attune_decode: one row, 8 query heads on 1 KV head, 300 cached keys, 3 splits.
    cache, hq = 300, 8
    q, k, v = bf16(rng.standard_normal((1, 1, hq, d))), *(bf16(rng.standard_normal((1, cache, 1, d))) for _ in range(2))
    o = np.zeros((1, 1, hq, d), np.uint16)
    lse = np.zeros((1, hq, 1), np.float32)
    a.decode(Attune.decode_problem(1, cache, hq, 1, d), q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data,
             lse.ctypes.data, 3)
    logits = np.einsum("bihd,bjd->bhij", f(q), f(k)[:, :, 0]) / math.sqrt(d)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    ref = np.einsum("bhij,bjd->bihd", w / w.sum(-1, keepdims=True), f(v)[:, :, 0])
    decode_err = np.abs(f(o) - ref).max()
    print("selftest-emu: decode, 3 splits; max |O - ref| = %.2e" % decode_err)
    # attune_backward: one causal sequence of 20 rows, 2 heads, d 32.
    s_, h_, d_ = 20, 2, 32
    q, k, v, d_o = (bf16(rng.standard_normal((1, s_, h_, d_))) for _ in range(4))
    p = Attune.problem(1, s_, h_, d_, causal=True)
    o = np.zeros((1, s_, h_, d_), np.uint16)
    lse = np.zeros((1, h_, s_), np.float32)
    a.forward(p, q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data, lse.ctypes.data)
    grads = [np.zeros((1, s_, h_, d_), np.uint16) for _ in range(3)]
    a.backward(p, q.ctypes.data, k.ctypes.data, v.ctypes.data, o.ctypes.data, d_o.ctypes.data, lse.ctypes.data,
               *(g.ctypes.data for g in grads))
    qf, kf, vf, dof = f(q)[0], f(k)[0], f(v)[0], f(d_o)[0]
    want = [np.zeros((s_, h_, d_)) for _ in range(3)]
    for hh in range(h_):
        logits = np.where(np.tril(np.ones((s_, s_), bool)), qf[:, hh] @ kf[:, hh].T / math.sqrt(d_), -np.inf)
        pr = np.exp(logits - logits.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        dp = dof[:, hh] @ vf[:, hh].T
        ds = pr * (dp - (dof[:, hh] * (pr @ vf[:, hh])).sum(-1, keepdims=True))
        want[0][:, hh] = ds @ kf[:, hh] / math.sqrt(d_)
        want[1][:, hh] = ds.T @ qf[:, hh] / math.sqrt(d_)
        want[2][:, hh] = pr.T @ dof[:, hh]
    bwd_err = max(np.abs(f(g)[0] - w).max() / max(np.abs(w).max(), 1e-9) for g, w in zip(grads, want))
    print("selftest-emu: backward; max relative |grad - ref| = %.2e" % bwd_err)
    return 0 if err < 2e-2 and decode_err < 2e-2 and bwd_err < 3e-2 else 1



# ---------------------------------------------------------------- measuring

def median_ms(fn, inputs, warmup=3, reps=20):
    """Median and spread (max - min) in ms of `fn(*inputs[i % n])`, timed by device events."""
    import torch
    for i in range(warmup):
        fn(*inputs[i % len(inputs)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs[i % len(inputs)])
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), (max(times) - min(times))


def flops(b, h, s, d, causal):
    pairs = s * (s + 1) // 2 if causal else s * s
    return 4.0 * b * h * d * pairs


def tflops(fl, ms):
    return fl / (ms * 1e-3) / 1e12 if ms and math.isfinite(ms) else float("nan")


def device_arch():
    import torch
    major, minor = torch.cuda.get_device_capability()
    return "sm_%d%d%s" % (major, minor, "a" if major in (9, 10) and minor == 0 else "")


def listed(attune_bin, d, arch, family="flash_fwd"):
    out = subprocess.run([attune_bin, "variants", "list", "--dk", str(d), "--dv", str(d), "--arch", arch],
                         capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(family + "/")]


def fa2_style(ids, d):
    """FlashAttention-2's usual flash_fwd shape (4 warps of 16 rows, 2 stages),
    as attune's heuristic picks it off Hopper."""
    want = "bm64.bn%d.wm4.wn1.st2.qr1" % (64 if d <= 64 else 32)
    return next((i for i in ids if want in i), ids[0] if ids else None)


class Stage:
    """One stage's raw record (OUT/NAME.json) and report section (OUT/NAME.md),
    rewritten after every row so a stage cut short keeps what it measured."""

    def __init__(self, out, name, title):
        self.out, self.name = out, name
        self.record = {"stage": name, "ok": True, "rows": []}
        self.lines = ["## " + title, ""]
        self.flush()

    def text(self, *lines):
        self.lines += list(lines)
        self.flush()

    def row(self, line, **values):
        self.lines.append(line)
        self.record["rows"].append(values)
        self.flush()

    def fail(self):
        self.record["ok"] = False

    def flush(self):
        with open(os.path.join(self.out, self.name + ".json"), "w") as f:
            json.dump(self.record, f, indent=1)
        with open(os.path.join(self.out, self.name + ".md"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def load_json(out, name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------- stages

def stage_facts(args):
    import torch
    st = Stage(args.out, "facts", "Device and software")
    facts = {}
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,clocks.sm,"
                          "memory.total,power.limit,pcie.link.gen.current", "--format=csv,noheader"],
                         capture_output=True, text=True)
    keys = ["name", "driver", "max_sm_clock", "max_memory_clock", "sm_clock", "memory", "power_limit", "pcie_gen"]
    if smi.returncode == 0 and smi.stdout.strip():
        facts.update(dict(zip(keys, [x.strip() for x in smi.stdout.splitlines()[0].split(",")])))
    props = torch.cuda.get_device_properties(0)
    facts.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda, "sm_count": props.multi_processor_count,
                  "compute_capability": "%d.%d" % (props.major, props.minor), "arch": device_arch(),
                  "device_name": props.name, "total_memory_gib": round(props.total_memory / 2**30, 1)})
    doctor = subprocess.run([args.attune, "doctor"], capture_output=True, text=True)
    facts["doctor"] = doctor.stdout
    st.record["facts"] = facts
    st.text("| fact | value |", "|---|---|")
    for k in ["device_name", "compute_capability", "arch", "sm_count", "max_sm_clock", "sm_clock", "max_memory_clock",
              "memory", "total_memory_gib", "power_limit", "driver", "torch", "torch_cuda"]:
        st.text("| %s | %s |" % (k, facts.get(k, "?")))
    st.text("", "`attune doctor`:", "", "```", doctor.stdout.rstrip(), "```")
    if doctor.returncode != 0 or "gpu use:         ready" not in doctor.stdout:
        st.fail()
    return 0 if st.record["ok"] else 1


def stage_ceilings(args):
    import torch
    st = Stage(args.out, "ceilings", "Ceilings measured in this run")
    nbytes = 1 << 30
    src = torch.empty(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms, spread = median_ms(lambda: dst.copy_(src), [()])
    copy = 2 * nbytes / (ms * 1e-3)
    del src, dst
    n = 8192
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    gms, gspread = median_ms(lambda: a @ b, [()])
    gemm = 2.0 * n ** 3 / (gms * 1e-3) / 1e12
    st.record.update({"copy_bytes_per_s": copy, "gemm_bf16_tflops": gemm})
    st.text("| ceiling | value | median ms (spread) |", "|---|---|---|",
            "| device copy, 1 GiB (read + write) | %.0f GB/s | %.3f (%.3f) |" % (copy / 1e9, ms, spread),
            "| bf16 GEMM %d^3 (torch.matmul) | %.0f TFLOP/s | %.3f (%.3f) |" % (n, gemm, gms, gspread))
    return 0


def ceiling(args, key):
    c = load_json(args.out, "ceilings")
    return c.get(key) if c else None


def cuda_stage(args, name, title):
    """What the timing stages start with: attune on the cuda backend, the
    device, and the stage's record."""
    import torch
    return bind(args.lib, "cuda"), torch.device("cuda"), Stage(args.out, name, title)


def transposed(x):
    """[B, S, H, D] as SDPA's [B, H, S, D] (a view)."""
    return x.transpose(1, 2)


def stage_forward(args):
    import torch
    import torch.nn.functional as F
    a, dev, st = cuda_stage(args, "forward", "Forward")
    t = transposed
    st.text("Correctness: relative error of O against fp32 SDPA, next to bf16 SDPA's own.", "",
            "| shape | causal | variant | attune | bf16 SDPA |", "|---|---|---|---|---|")

    def run(p, q, k, v, o, lse, variant=None):
        a.forward(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), variant)

    for (b, s, h, d) in [(2, 1024, 8, 64), (2, 1000, 8, 128), (1, 4096, 16, 128)]:
        for causal in (False, True):
            q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
            o = torch.full_like(q, float("nan"))
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            p = Attune.problem(b, s, h, d, causal)
            run(p, q, k, v, o, lse)
            torch.cuda.synchronize()
            ref = F.scaled_dot_product_attention(t(q).float(), t(k).float(), t(v).float(), is_causal=causal)
            low = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=causal)
            err = ((t(o).float() - ref).norm() / ref.norm()).item()
            sdpa_err = ((low.float() - ref).norm() / ref.norm()).item()
            good = math.isfinite(err) and err <= max(2 * sdpa_err, 1e-3)
            if not good:
                st.fail()
            variant = a.explain(p).split()[0]
            st.row("| %dx%dx%dx%d | %s | %s | %.2e%s | %.2e |" % (b, s, h, d, causal, variant, err,
                                                                  "" if good else " FAIL", sdpa_err),
                   kind="correctness", shape=[b, s, h, d], causal=causal, variant=variant, error=err,
                   sdpa_error=sdpa_err, ok=good)

    gemm = ceiling(args, "gemm_bf16_tflops")
    st.text("", "Timing: bf16, B 16, H 16, S 4096, median ms of 20 runs, inputs rotated among 4 sets; "
            "%% of GEMM: best attune against the bf16 GEMM ceiling (%s)." %
            ("%.0f TFLOP/s" % gemm if gemm else "not measured"), "",
            "| d | causal | heuristic | TFLOP/s | best of sweep | TFLOP/s | SDPA flash | SDPA cuDNN | "
            "best attune / best SDPA | % of GEMM |", "|---|---|---|---|---|---|---|---|---|---|")
    b, h, s = 16, 16, 4096
    arch = device_arch()
    for d in (64, 128):
        ids = listed(args.attune, d, arch)
        step = max(1, len(ids) // args.sweep)
        sweep = ids[::step][:args.sweep]
        # Compile the sweep in parallel first (ctypes releases the GIL).
        small = Attune.problem(1, 128, 1, d, False)
        xs = [torch.randn(1, 128, 1, d, device=dev, dtype=torch.bfloat16) for _ in range(3)]
        so, sl = torch.empty_like(xs[0]), torch.empty(1, 1, 128, device=dev, dtype=torch.float32)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda vid: _try(lambda: run(small, *xs, so, sl, vid)), sweep + [None]))
        for causal in (False, True):
            sets = [tuple(torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
                    for _ in range(4)]
            o = torch.empty(b, s, h, d, device=dev, dtype=torch.bfloat16)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            p = Attune.problem(b, s, h, d, causal)
            fl = flops(b, h, s, d, causal)
            heur_ms, _ = median_ms(lambda q, k, v: run(p, q, k, v, o, lse), sets)
            best = (heur_ms, a.explain(p).split()[0])
            swept = {}
            for vid in sweep:
                try:
                    ms, _ = median_ms(lambda q, k, v: run(p, q, k, v, o, lse, vid), sets)
                    swept[vid] = ms
                    best = min(best, (ms, vid))
                except RuntimeError as e:
                    swept[vid] = str(e)
            sdpa = sdpa_ms(sets, causal)
            finite = [x for x in sdpa.values() if math.isfinite(x)]
            best_sdpa = min(finite) if finite else float("nan")
            ratio = best_sdpa / best[0] if finite else float("nan")
            share = 100 * tflops(fl, best[0]) / gemm if gemm else float("nan")
            st.row("| %d | %s | %.3f | %.0f | %.3f (%s) | %.0f | %.3f | %.3f | %.2f | %.0f%% |" % (
                d, causal, heur_ms, tflops(fl, heur_ms), best[0], best[1], tflops(fl, best[0]), sdpa["flash"],
                sdpa["cudnn"], ratio, share),
                kind="timing", d=d, causal=causal, heuristic_ms=heur_ms, heuristic_tflops=tflops(fl, heur_ms),
                best_ms=best[0], best_variant=best[1], best_tflops=tflops(fl, best[0]), sweep=swept,
                sdpa_flash_ms=sdpa["flash"], sdpa_cudnn_ms=sdpa["cudnn"], best_over_sdpa=ratio, gemm_share=share)
    if arch == "sm_90a":
        hopper_timing(args, a, st, dev, run, gemm)
    return 0 if st.record["ok"] else 1


def sdpa_ms(sets, causal):
    """Median ms of PyTorch's SDPA on `sets` (attune's [B, S, H, D] tensors),
    with its flash and its cuDNN backend each; NaN where one cannot run."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([backend]):
                out[name], _ = median_ms(lambda q, k, v: F.scaled_dot_product_attention(
                    transposed(q), transposed(k), transposed(v), is_causal=causal), sets)
        except RuntimeError:
            out[name] = float("nan")
    return out


def hopper_timing(args, a, st, dev, run, gemm):
    """The Hopper family (flash_fwd_sm90) in the same run as SDPA and the
    FlashAttention-2-style flash_fwd: its heuristic variant and the best of a
    small sweep, d64/d128/d256, causal and not, bf16 and fp16, B 4, H 16, S 4096."""
    import torch
    st.text("", "Hopper family: flash_fwd_sm90 (heuristic, and the best of a sweep of %d), against "
            "FlashAttention-2-style flash_fwd and SDPA (flash, cuDNN); B 4, H 16, S 4096; median ms of 20." %
            args.sweep, "",
            "| d | dtype | causal | sm90 heuristic | TFLOP/s | best sm90 | TFLOP/s | flash_fwd (FA2) | TFLOP/s | "
            "SDPA flash | SDPA cuDNN | best sm90 / best SDPA | % of GEMM |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    b, h, s = 4, 16, 4096
    for d in (64, 128, 256):
        sm90_ids = listed(args.attune, d, "sm_90a", "flash_fwd_sm90")
        fa2 = fa2_style(listed(args.attune, d, "sm_90a"), d)
        step = max(1, len(sm90_ids) // args.sweep)
        sweep = sm90_ids[::step][:args.sweep]
        for tdtype, code in ((torch.bfloat16, ATTUNE_DTYPE_BF16), (torch.float16, ATTUNE_DTYPE_FP16)):
            small = Attune.problem(1, 128, 1, d, False, code)
            xs = [torch.randn(1, 128, 1, d, device=dev, dtype=tdtype) for _ in range(3)]
            so, sl = torch.empty_like(xs[0]), torch.empty(1, 1, 128, device=dev, dtype=torch.float32)
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda vid: _try(lambda: run(small, *xs, so, sl, vid)), sweep + [fa2, None]))
            for causal in (False, True):
                sets = [tuple(torch.randn(b, s, h, d, device=dev, dtype=tdtype) for _ in range(3)) for _ in range(4)]
                o = torch.empty(b, s, h, d, device=dev, dtype=tdtype)
                lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
                p = Attune.problem(b, s, h, d, causal, code)
                fl = flops(b, h, s, d, causal)
                chosen = a.explain(p).split()[0]
                heur_ms, _ = median_ms(lambda q, k, v: run(p, q, k, v, o, lse), sets)
                best = (heur_ms, chosen)
                def timed(vid):
                    try:
                        return median_ms(lambda q, k, v: run(p, q, k, v, o, lse, vid), sets)[0]
                    except RuntimeError:
                        return float("nan")

                for vid in sweep:
                    ms = timed(vid)
                    if math.isfinite(ms):
                        best = min(best, (ms, vid))
                fa2_ms = timed(fa2) if fa2 else float("nan")
                sdpa = sdpa_ms(sets, causal)
                finite = [x for x in sdpa.values() if math.isfinite(x)]
                ratio = min(finite) / best[0] if finite else float("nan")
                share = 100 * tflops(fl, best[0]) / gemm if gemm else float("nan")
                name = "bf16" if tdtype == torch.bfloat16 else "fp16"
                st.row("| %d | %s | %s | %.3f (%s) | %.0f | %.3f (%s) | %.0f | %.3f | %.0f | %.3f | %.3f | %.2f | "
                       "%.0f%% |" % (d, name, causal, heur_ms, chosen, tflops(fl, heur_ms), best[0], best[1],
                                    tflops(fl, best[0]), fa2_ms, tflops(fl, fa2_ms), sdpa["flash"], sdpa["cudnn"],
                                    ratio, share),
                       kind="hopper_timing", d=d, dtype=name, causal=causal, heuristic=chosen, heuristic_ms=heur_ms,
                       heuristic_tflops=tflops(fl, heur_ms), best_ms=best[0], best_variant=best[1],
                       best_tflops=tflops(fl, best[0]), fa2_variant=fa2, fa2_ms=fa2_ms,
                       sdpa_flash_ms=sdpa["flash"], sdpa_cudnn_ms=sdpa["cudnn"], best_over_sdpa=ratio,
                       gemm_share=share)


def _try(fn):
    try:
        fn()
    except RuntimeError:
        pass


def stage_decode(args):
    import torch
    import torch.nn.functional as F
    a, dev, st = cuda_stage(args, "decode",
                            "Split-KV decode (batch 1, 32k cached tokens, 8 KV heads, 64 query heads, d 128, bf16)")
    b, cache, hq, hkv, d = 1, 32768, 64, 8, 128
    p = Attune.decode_problem(b, cache, hq, hkv, d)
    kv_bytes = 2 * b * cache * hkv * d * 2
    sets = [(torch.randn(b, 1, hq, d, device=dev, dtype=torch.bfloat16),
             torch.randn(b, cache, hkv, d, device=dev, dtype=torch.bfloat16),
             torch.randn(b, cache, hkv, d, device=dev, dtype=torch.bfloat16)) for _ in range(4)]
    o = torch.empty(b, 1, hq, d, device=dev, dtype=torch.bfloat16)
    lse = torch.empty(b, hq, 1, device=dev, dtype=torch.float32)
    q, k, v = sets[0]
    a.decode(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    torch.cuda.synchronize()
    t = transposed
    rep = lambda x: x.repeat_interleave(hq // hkv, dim=2)
    ref = F.scaled_dot_product_attention(t(q).float(), t(rep(k)).float(), t(rep(v)).float())
    err = ((t(o).float() - ref).norm() / ref.norm()).item()
    good = math.isfinite(err) and err <= 1e-2
    if not good:
        st.fail()
    peak = ceiling(args, "copy_bytes_per_s")
    st.record.update({"error": err, "kv_bytes": kv_bytes, "copy_bytes_per_s": peak})
    st.text("Relative error of O against fp32 SDPA: %.2e%s. K and V: %.0f MiB per call; copy bandwidth (ceilings "
            "stage): %s." % (err, "" if good else " FAIL", kv_bytes / 2**20,
                             "%.0f GB/s" % (peak / 1e9) if peak else "not measured"), "",
            "| splits | ms | GB/s of K and V | share of copy bandwidth |", "|---|---|---|---|")
    for splits in (0, 1, 4, 16, 32, 64):
        try:
            ms, _ = median_ms(lambda q, k, v: a.decode(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                                                       lse.data_ptr(), splits), sets)
        except RuntimeError as e:
            st.row("| %s | error: %s | | |" % (splits or "built-in", e), splits=splits, error=str(e))
            continue
        bw = kv_bytes / (ms * 1e-3)
        share = 100 * bw / peak if peak else float("nan")
        st.row("| %s | %.4f | %.0f | %.0f%% |" % (splits or "built-in", ms, bw / 1e9, share),
               splits=splits, ms=ms, bytes_per_s=bw, copy_share=share)
    return 0 if st.record["ok"] else 1


def stage_backward(args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    a, dev, st = cuda_stage(args, "backward", "Backward")
    t = transposed
    st.text("Correctness (bf16): relative error against fp32 autograd.", "",
            "| shape | causal | dQ | dK | dV |", "|---|---|---|---|---|")

    def grads(p, q, k, v, d_o):
        b, s, h, d = q.shape
        o = torch.empty_like(q)
        lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
        a.forward(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        a.backward(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(), lse.data_ptr(),
                   dq.data_ptr(), dk.data_ptr(), dv.data_ptr())
        return dq, dk, dv

    for (b, s, h, d) in [(2, 1000, 4, 64), (1, 2048, 8, 128)]:
        for causal in (False, True):
            q, k, v, d_o = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
            got = grads(Attune.problem(b, s, h, d, causal), q, k, v, d_o)
            qf, kf, vf = (x.float().requires_grad_() for x in (q, k, v))
            F.scaled_dot_product_attention(t(qf), t(kf), t(vf), is_causal=causal).backward(t(d_o.float()))
            errs = [((g.float() - w.grad).norm() / w.grad.norm()).item() for g, w in zip(got, (qf, kf, vf))]
            good = all(math.isfinite(e) and e <= 2e-2 for e in errs)
            if not good:
                st.fail()
            st.row("| %dx%dx%dx%d | %s | %.2e | %.2e | %.2e%s |" % (b, s, h, d, causal, *errs, "" if good else " FAIL"),
                   kind="correctness", shape=[b, s, h, d], causal=causal, errors=errs, ok=good)
    st.text("", "Timing: B 8, H 16, S 4096, median ms of 20 runs (attune: backward only, O and LSE precomputed; "
            "SDPA flash: backward of a recorded forward); TFLOP/s from 2.5x the forward's FLOPs.", "",
            "| d | causal | attune | TFLOP/s | deterministic | SDPA flash bwd | TFLOP/s | SDPA / attune |",
            "|---|---|---|---|---|---|---|---|")
    b, h, s = 8, 16, 4096
    for d in (64, 128):
        for causal in (False, True):
            q, k, v, d_o = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16) for _ in range(4))
            p = Attune.problem(b, s, h, d, causal)
            o = torch.empty_like(q)
            lse = torch.empty(b, h, s, device=dev, dtype=torch.float32)
            a.forward(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            run = lambda det: a.backward(p, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(),
                                         lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), det)
            ms, _ = median_ms(lambda: run(False), [()])
            det_ms, _ = median_ms(lambda: run(True), [()])
            fl = 2.5 * flops(b, h, s, d, causal)
            try:
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    qs, ks, vs = (t(x).detach().requires_grad_() for x in (q, k, v))
                    out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
                    sdpa_ms, _ = median_ms(lambda: torch.autograd.grad(out, (qs, ks, vs), t(d_o), retain_graph=True),
                                           [()])
            except RuntimeError:
                sdpa_ms = float("nan")
            st.row("| %d | %s | %.3f | %.0f | %.3f | %.3f | %.0f | %.2f |" % (
                d, causal, ms, tflops(fl, ms), det_ms, sdpa_ms, tflops(fl, sdpa_ms), sdpa_ms / ms),
                kind="timing", d=d, causal=causal, ms=ms, tflops=tflops(fl, ms), deterministic_ms=det_ms,
                sdpa_flash_ms=sdpa_ms, sdpa_over_attune=sdpa_ms / ms)
    return 0 if st.record["ok"] else 1


def stage_python(args):
    """The Python package on the GPU (docs/python.md): flash-attn-shaped calls
    against fp32 SDPA, a call on a side stream, the current device left
    alone, a BatchDecode run captured in a CUDA graph and replayed with new
    lengths, and the host time of a call next to SDPA's."""
    import time

    import torch
    import torch.nn.functional as F
    os.environ["ATTUNE_LIBRARY"] = os.path.abspath(args.lib)
    os.environ["ATTUNE_CLI"] = os.path.abspath(args.attune)
    import attune
    st = Stage(args.out, "python", "Python package (import attune)")
    dev = torch.device("cuda")
    st.text("| check | result |", "|---|---|")

    def check(name, ok, **values):
        st.row("| %s | %s |" % (name, ("ok " if ok else "FAIL ") + " ".join("%s=%s" % kv for kv in values.items())),
               check=name, ok=bool(ok), **values)
        if not ok:
            st.fail()

    def rel(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    def value(fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - the row says what failed
            st.text("", "error: " + repr(e)[:300])
            return None

    b, s, hq, hkv, d = 2, 1000, 16, 4, 128
    q = torch.randn(b, s, hq, d, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    device_before = torch.cuda.current_device()
    out = value(lambda: attune.flash_attn_func(q, k, v, causal=True))
    ref = F.scaled_dot_product_attention(*(transposed(x).float() for x in (q, k, v)), is_causal=True,
                                         enable_gqa=True).transpose(1, 2)
    check("flash_attn_func causal GQA d128 vs fp32 SDPA", out is not None and rel(out, ref) < 2e-2,
          rel_error="%.2e" % (rel(out, ref) if out is not None else float("nan")))
    check("current device unchanged", torch.cuda.current_device() == device_before)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out2 = value(lambda: attune.flash_attn_func(q, k, v, causal=True))
    side.synchronize()
    check("a call on a side stream", out2 is not None and out is not None and torch.equal(out, out2))
    # Serving: plan once, capture a run in a CUDA graph, replay with new lengths.
    pages, page = 64, 16
    kc, vc = (torch.randn(pages, page, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(pages, device=dev, dtype=torch.int32)[:2 * 16].reshape(2, 16).contiguous()
    lens = torch.tensor([200, 37], device=dev, dtype=torch.int32)
    qd = torch.randn(2, 1, hq, d, device=dev, dtype=torch.bfloat16)
    dec = attune.BatchDecode().plan(batch_size=2, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                    max_pages=16, num_pages=pages)
    outd = torch.empty(2, 1, hq, d, device=dev, dtype=torch.bfloat16)
    dec.run(qd, kc, vc, table, lens, out=outd)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    ok = True
    try:
        with torch.cuda.graph(graph):
            dec.run(qd, kc, vc, table, lens, out=outd)
        lens.copy_(torch.tensor([64, 250], device=dev, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want = attune.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=lens, block_table=table, causal=True)
        err = rel(outd, want)
        ok = err < 1e-2
    except Exception as e:  # noqa: BLE001 - reported in the row
        err, ok = repr(e)[:120], False
    check("BatchDecode.run captured in a CUDA graph, replayed with new lengths", ok, rel_error=err,
          plan=dec.description)
    # Host time per call: launches only, no synchronization in the loop.
    qs, ks = torch.randn(1, 128, 8, 64, device=dev, dtype=torch.bfloat16), torch.randn(
        1, 128, 8, 64, device=dev, dtype=torch.bfloat16)

    def host_us(fn, n=300):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = (time.perf_counter() - start) / n * 1e6
        torch.cuda.synchronize()
        return took

    mine = host_us(lambda: attune.flash_attn_func(qs, ks, ks, causal=True))
    sdpa = host_us(lambda: F.scaled_dot_product_attention(transposed(qs), transposed(ks), transposed(ks),
                                                          is_causal=True))
    check("host time per flash_attn_func call (goal 15 us)", mine <= 15, attune_us="%.1f" % mine,
          sdpa_us="%.1f" % sdpa)
    return 0 if st.record["ok"] else 1


def summary(args):
    """One screen from the raw records, whatever stages finished."""
    results = dict(x.split("=", 1) for x in args.stage_results.split(";") if "=" in x)
    out = []
    facts = (load_json(args.out, "facts") or {}).get("facts", {})
    out.append("device:   %s, cc %s, %s SMs, SM clock %s (max %s), driver %s, torch %s" % (
        facts.get("device_name", "?"), facts.get("compute_capability", "?"), facts.get("sm_count", "?"),
        facts.get("sm_clock", "?"), facts.get("max_sm_clock", "?"), facts.get("driver", "?"), facts.get("torch", "?")))
    c = load_json(args.out, "ceilings") or {}
    if c.get("copy_bytes_per_s"):
        out.append("ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s" % (c["copy_bytes_per_s"] / 1e9,
                                                                        c["gemm_bf16_tflops"]))
    for name in ("facts", "tests", "ceilings", "forward", "decode", "backward"):
        out.append("stage %-9s %s" % (name, results.get(name, "not run")))
    fwd = load_json(args.out, "forward") or {"rows": []}
    for r in fwd["rows"]:
        if r.get("kind") == "timing":
            out.append("forward  d%-3d %-6s best %4.0f TFLOP/s (%s), %.2fx SDPA, %.0f%% of GEMM" % (
                r["d"], "causal" if r["causal"] else "full", r["best_tflops"], r["best_variant"],
                r["best_over_sdpa"], r["gemm_share"]))
    bad = [r for r in fwd["rows"] if r.get("kind") == "correctness" and not r.get("ok")]
    if bad:
        out.append("forward  %d correctness rows FAIL" % len(bad))
    dec = load_json(args.out, "decode") or {"rows": []}
    for r in dec["rows"]:
        if "ms" in r and r["splits"] == 0:
            out.append("decode   built-in splits: %.4f ms, %.0f GB/s, %.0f%% of copy bandwidth" % (
                r["ms"], r["bytes_per_s"] / 1e9, r["copy_share"]))
    bwd = load_json(args.out, "backward") or {"rows": []}
    for r in bwd["rows"]:
        if r.get("kind") == "timing":
            out.append("backward d%-3d %-6s %4.0f TFLOP/s, SDPA/attune %.2f" % (
                r["d"], "causal" if r["causal"] else "full", r["tflops"], r["sdpa_over_attune"]))
    py = load_json(args.out, "python") or {"rows": []}
    for r in py["rows"]:
        out.append("python   %s: %s" % (r["check"], "ok" if r["ok"] else "FAIL"))
    print("\n".join(out))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundle", help="the bundle directory (bin/attune, lib/libattune.so)")
    ap.add_argument("--lib", help="libattune.so (default: BUNDLE/lib/libattune.so)")
    ap.add_argument("--attune", help="the attune CLI (default: BUNDLE/bin/attune)")
    ap.add_argument("--out", help="where STAGE.json and STAGE.md go")
    ap.add_argument("--stage", choices=["facts", "ceilings", "forward", "decode", "backward", "python"])
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--stage-results", default="")
    ap.add_argument("--selftest-emu", action="store_true")
    ap.add_argument("--sweep", type=int, default=6, help="listed variants timed per configuration")
    args = ap.parse_args()
    if args.bundle:
        args.lib = args.lib or os.path.join(args.bundle, "lib", "libattune.so")
        args.attune = args.attune or os.path.join(args.bundle, "bin", "attune")
    if args.selftest_emu:
        if not args.lib:
            ap.error("--selftest-emu needs --lib or --bundle")
        return selftest_emu(args.lib)
    if not args.out:
        ap.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    if args.summary:
        return summary(args)
    if not args.stage:
        ap.error("one of --stage, --summary, --selftest-emu")
    return {"facts": stage_facts, "ceilings": stage_ceilings, "forward": stage_forward, "decode": stage_decode,
            "backward": stage_backward, "python": stage_python}[args.stage](args)


if __name__ == "__main__":
    sys.exit(main())
