#!/usr/bin/env python3
"""Attention dropout on `attune attention` as a user tries it, against an
independent NumPy fp64 statement of docs/contract.md ("Dropout"): the mask
drawn by Philox-4x32-10 (written here from the paper, not from the C++),
forward and --backward on the reference and the emulator.

Usage: python3 dropout_test.py PATH_TO_ATTUNE

  attune attention [--backward] --dropout P [--seed S] [--offset O] ...
  * element (row i, key j) of sequence b, query head h is kept iff word
    2 ((i >> 3) & 1) + (j & 1) of Philox-4x32-10(counter (j >> 1,
    ((i >> 4) << 3) | (i & 7), b Hq + h, offset mod 2^32), key (seed mod
    2^32, (seed >> 32) ^ (offset >> 32))) is below floor((1 - P) 2^32);
    kept probabilities are scaled by 1 / (1 - P), LSE is without dropout.
  * reference: to 1e-5 (fp64, written as float32); emu: within bf16's
    accuracy of the same fp64 attention (the mask must be the same one).
  * --seed and --offset default to 0; another offset draws another mask.
Also: bad dropout flags are refused with one line naming what was wrong.
"""
import os
import sys

import numpy as np

from cli_support import cli_test, runner, visible

M32 = np.uint64(0xFFFFFFFF)
rng = np.random.default_rng(3636)


def philox(c, k0, k1):
    """Philox-4x32-10 of counters c (4 uint64 arrays holding 32-bit words) under key (k0, k1)."""
    c0, c1, c2, c3 = (np.asarray(x, np.uint64) for x in c)
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & M32
            k1 = (k1 + np.uint64(0xBB67AE85)) & M32
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & M32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & M32)
    return c0, c1, c2, c3


def keep_mask(p, seed, offset, b, h, heads, sq, sk):
    i = np.arange(sq, dtype=np.uint64)[:, None] + np.zeros((1, sk), np.uint64)
    j = np.arange(sk, dtype=np.uint64)[None, :] + np.zeros((sq, 1), np.uint64)
    counter = (j >> np.uint64(1), ((i >> np.uint64(4)) << np.uint64(3)) | (i & np.uint64(7)),
               np.full_like(i, b * heads + h), np.full_like(i, offset & 0xFFFFFFFF))
    words = philox(counter, seed & 0xFFFFFFFF, ((seed >> 32) ^ (offset >> 32)) & 0xFFFFFFFF)
    which = 2 * ((i >> np.uint64(3)) & np.uint64(1)) + (j & np.uint64(1))
    word = np.choose(which.astype(np.int64), words)
    below = min(int((1.0 - p) * 4294967296.0), 0xFFFFFFFF)
    return word < np.uint64(below)


def bf16(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def attention(q, k, v, do, p, seed, offset, causal):
    """fp64 (O, LSE, dQ, dK, dV) with the dropout mask, dense [1, S, H, D]."""
    q, k, v, do = q[0], k[0], v[0], do[0]
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    scale = 1.0 / np.sqrt(d)
    vis = visible(sq, sk, causal, None)
    o = np.zeros((sq, hq, v.shape[2]))
    lse = np.zeros((hq, sq))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for h in range(hq):
        g = h // (hq // hkv)
        s = np.where(vis, scale * q[:, h] @ k[:, g].T, -np.inf)
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - m)
        lse[h] = (m + np.log(e.sum(axis=1, keepdims=True)))[:, 0]
        pr = e / e.sum(axis=1, keepdims=True)
        z = keep_mask(p, seed, offset, 0, h, hq, sq, sk) / (1.0 - p)
        o[:, h] = (pr * z) @ v[:, g]
        dv[:, g] += (pr * z).T @ do[:, h]
        dp = (do[:, h] @ v[:, g].T) * z
        ds = pr * (dp - (dp * pr).sum(axis=1, keepdims=True))
        dq[:, h] = scale * ds @ k[:, g]
        dk[:, g] += scale * ds.T @ q[:, h]
    return o[None], lse[None], dq[None], dk[None], dv[None]


def main():
    with cli_test("attune_dropout_") as ((attune,), checks, tmp):
        run = runner(attune, timeout=600)
        q, k, v = (bf16(rng.standard_normal(s)) for s in ((1, 24, 2, 32), (1, 40, 1, 32), (1, 40, 1, 32)))
        do = bf16(rng.standard_normal((1, 24, 2, 32)))
        paths = {}
        for name, x in (("q", q), ("k", k), ("v", v), ("do", do)):
            paths[name] = os.path.join(tmp, name + ".npy")
            np.save(paths[name], x.astype(np.float32))
        inputs = ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--causal", "bottom-right"]

        def out(name):
            return os.path.join(tmp, name + ".npy")

        def call(backend, dropout, backward=False):
            args = ["attention", "--backend", backend] + inputs + dropout
            if backward:
                args += ["--backward", "--do", paths["do"], "--dq", out("dq"), "--dk", out("dk"), "--dv", out("dv")]
            else:
                args += ["--out", out("o"), "--lse", out("lse")]
            r = run(*args)
            if not checks.check(r.returncode == 0, f"{backend} {' '.join(dropout)}{' --backward' if backward else ''}"
                                                   f" runs{': ' + r.stderr.strip() if r.returncode else ''}"):
                return None
            names = ("dq", "dk", "dv") if backward else ("o", "lse")
            return [np.load(out(n)).astype(np.float64) for n in names]

        for backend, tol_o, tol_g in (("reference", 1e-5, 1e-5), ("emu", 1e-2, 2e-2)):
            for p, seed, offset in ((0.2, 5, 0), (0.6, 2**40 + 3, 2**33 + 1)):
                flags = ["--dropout", str(p), "--seed", str(seed), "--offset", str(offset)]
                o, lse, dq, dk, dv = attention(q, k, v, do, p, seed, offset, "bottom-right")
                got = call(backend, flags)
                if got is not None:
                    err = np.abs(got[0] - o).max() / max(1.0, np.abs(o).max())
                    checks.check(err <= tol_o, f"{backend} p={p}: O drops what Philox says (error {err:.2e})")
                    checks.check(np.abs(got[1] - lse).max() <= 1e-3, f"{backend} p={p}: LSE without dropout")
                grads = call(backend, flags, backward=True)
                if grads is not None:
                    for name, g, w in zip(("dQ", "dK", "dV"), grads, (dq, dk, dv)):
                        err = np.abs(g - w).max() / max(1.0, np.abs(w).max())
                        checks.check(err <= tol_g, f"{backend} p={p}: {name} with the forward's mask "
                                                   f"(error {err:.2e})")

        # The defaults are seed 0, offset 0; another offset is another mask.
        o0 = attention(q, k, v, do, 0.3, 0, 0, "bottom-right")[0]
        o1 = attention(q, k, v, do, 0.3, 0, 1, "bottom-right")[0]
        got = call("reference", ["--dropout", "0.3"])
        if got is not None:
            checks.check(np.abs(got[0] - o0).max() <= 1e-5, "--seed and --offset default to 0")
            checks.check(np.abs(o0 - o1).max() > 1e-2, "another offset draws another mask")
        kept = keep_mask(0.5, 9, 4, 0, 0, 1, 256, 256).mean()
        checks.check(abs(kept - 0.5) < 0.01, f"p = 0.5 keeps about half ({kept:.4f})")

        for flags, words in ((["--dropout", "1"], "--dropout: got '1'; expected a probability p in [0, 1)"),
                             (["--dropout", "-0.5"], "--dropout: got '-0.5'"),
                             (["--seed", "3"], "--seed: got '3'; expected --dropout P with it"),
                             (["--offset", "3"], "--offset: got '3'; expected --dropout P with it")):
            r = run("attention", "--backend", "reference", *inputs, "--out", out("o"), *flags)
            lines = r.stderr.strip().splitlines()
            checks.check(r.returncode != 0 and len(lines) == 1 and words in lines[0],
                         f"{' '.join(flags)} is refused in one line naming it: {r.stderr.strip()!r}")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
