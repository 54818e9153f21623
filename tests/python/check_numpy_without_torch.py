#!/usr/bin/env python3
"""`import attune` without torch (and without a CUDA driver): the
flash-attn-shaped functions on NumPy arrays, float16 on the emulator and
float64 on the fp64 reference, against an independent NumPy attention.
torch is blocked from importing, so this holds wherever it runs.

Usage: check_numpy_without_torch.py   (PYTHONPATH names the package; ATTUNE_LIBRARY may
name libattune.so)"""
import importlib.abc
import sys

import numpy as np


class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is blocked in this test")
        return None


sys.meta_path.insert(0, NoTorch())

import attune  # noqa: E402


def reference(q, k, v, causal=False, lens=None):
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = np.repeat(k.astype(np.float64), hq // hkv, axis=2)
    v = np.repeat(v.astype(np.float64), hq // hkv, axis=2)
    out = np.zeros((b, sq, hq, v.shape[-1]))
    for bi in range(b):
        n = sk if lens is None else lens[bi]
        s = np.einsum("qhd,khd->hqk", q[bi].astype(np.float64), k[bi, :n]) / np.sqrt(d)
        if causal:
            i, j = np.arange(sq)[:, None], np.arange(n)[None, :]
            s = np.where(j <= i + n - sq, s, -np.inf)
        m = s.max(-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        p = np.exp(s - m)
        den = p.sum(-1, keepdims=True)
        p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)
        out[bi] = np.einsum("hqk,khd->qhd", p, v[bi, :n])
    return out


def main():
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    check("torch" not in sys.modules, "attune imported without torch")
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 21, 4, 64))
    k = rng.standard_normal((2, 30, 2, 64))
    v = rng.standard_normal((2, 30, 2, 64))
    out = attune.flash_attn_func(q, k, v, causal=True)
    check(out.dtype == np.float64 and np.abs(out - reference(q, k, v, True)).max() < 1e-12,
          "float64 arrays: the fp64 reference, exactly")
    q16, k16, v16 = (x.astype(np.float16) for x in (q, k, v))
    out16, lse, _ = attune.flash_attn_func(q16, k16, v16, causal=True, return_attn_probs=True)
    err = np.abs(out16.astype(np.float64) - reference(q16, k16, v16, True)).max()
    check(out16.dtype == np.float16 and lse.shape == (2, 4, 21) and err < 5e-3,
          f"float16 arrays: the kernels on the emulator (max error {err:.2e})")
    qkv = np.stack([q16[:, :, :2], q16[:, ::-1, 2:], k16[:, :21]], axis=2)  # [2, 21, 3, 2, 64]
    out, lse, probs = attune.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    want = attune.flash_attn_func(*(np.ascontiguousarray(qkv[:, :, i]) for i in range(3)), causal=True)
    check(np.array_equal(out, want) and probs.shape == (0,),
          "flash_attn_qkvpacked_func: the unpacked function's output, an empty array for the probabilities")
    _, lse, _ = attune.flash_attn_func(q, k[:, :5], v[:, :5], causal=True, return_attn_probs=True)
    check((lse[:, :, :16] == np.inf).all() and np.isfinite(lse[:, :, 16:]).all(),
          "rows without keys: flash-attn's LSE, +inf")
    lens = np.array([30, 11], dtype=np.int32)
    dec = attune.flash_attn_with_kvcache(q16[:, :1], k16, v16, cache_seqlens=lens, causal=True, num_splits=2)
    err = np.abs(dec.astype(np.float64) - reference(q16[:, :1], k16, v16, True, lens)).max()
    check(err < 5e-3, f"a KV-cache decode with 2 splits (max error {err:.2e})")
    try:
        attune.flash_attn_func(q16, k16[..., :32], v16)
        check(False, "a head-dim mismatch is refused")
    except ValueError as e:
        check("head_dim" in str(e), f"a head-dim mismatch is refused: {e}")
    try:
        attune.flash_attn_func(q, k, v, dropout_p=0.5)
        check(False, "dropout with NumPy arrays is refused (its seed comes from torch's generator)")
    except NotImplementedError as e:
        check("dropout_p" in str(e), f"dropout with NumPy arrays is refused: {e}")
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
