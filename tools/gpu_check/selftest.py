"""The C API's ctypes binding on the emulator, with NumPy arrays and no GPU:
a causal forward, a split-KV decode and a backward against NumPy fp64
(`main.py selftest-emu --lib libattune.so`; tools/gpu_rehearsal.sh runs it
inside the bundle with the toolkit hidden)."""
import ctypes
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "python"))
from attune import _native as native  # noqa: E402

ATTUNE_MASK_NONE, ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT = native.MASK_NONE, native.MASK_CAUSAL_BOTTOM_RIGHT
ATTUNE_DTYPE_FP16, ATTUNE_DTYPE_BF16 = native.DTYPE_FP16, native.DTYPE_BF16
Problem = native.Problem


class Attune:
    def __init__(self, backend):
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


def run():
    """No GPU: the binding against the emulator on NumPy arrays."""
    import numpy as np
    a = Attune("emu")
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
