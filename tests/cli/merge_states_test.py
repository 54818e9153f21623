#!/usr/bin/env python3
"""`attune merge-states` as a user runs it for cascade attention: the
attention over keys [0, S) is the merge of `attune attention` over [0, s)
and [s, S) (each writing O and LSE), on the emulator's kernel and the fp64
reference, against an independent NumPy attention over all keys; an empty
partial (LSE -inf) changes nothing; mismatched inputs are refused with what
was expected.

Can fail: merging the partials with their LSE swapped must miss the whole.

Usage: merge_states_test.py PATH_TO_ATTUNE
"""
import os
import sys
import tempfile

import numpy as np

from cli_support import Checks, runner


def attention(q, k, v):
    """fp64 softmax(Q K^T / sqrt(d)) V of [1, S, H, D] tensors: O and LSE [1, H, Sq]."""
    s = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
    top = s.max(-1, keepdims=True)
    p = np.exp(s - top)
    lse = (np.log(p.sum(-1)) + top[..., 0])
    return np.einsum("bhqk,bkhd->bqhd", p / p.sum(-1, keepdims=True), v), lse


def main():
    run = runner(os.path.abspath(sys.argv[1]))
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="attune_merge_") as tmp:
        path = lambda name: os.path.join(tmp, name + ".npy")
        rng = np.random.default_rng(11)
        # bf16-exact inputs, so the NumPy oracle sees what the kernels see.
        bf16 = lambda a: (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32).astype(np.float64)
        q, k, v = (bf16(rng.standard_normal((1, n, 2, 32))) for n in (7, 50, 50))
        split = 21
        for name, a in {"q": q, "k1": k[:, :split], "v1": v[:, :split], "k2": k[:, split:], "v2": v[:, split:]}.items():
            np.save(path(name), a.astype(np.float32))
        for part in ("1", "2"):
            r = run("attention", "--backend", "emu", "--q", path("q"), "--k", path("k" + part), "--v", path("v" + part),
                    "--out", path("o" + part), "--lse", path("lse" + part))
            checks.check(r.returncode == 0, "attention over key part %s: %s" % (part, r.stderr.strip()))
        want, want_lse = attention(q, k, v)
        empty_o = path("o_empty")
        np.save(empty_o, np.full((1, 7, 2, 32), np.nan, np.float32))
        np.save(path("lse_empty"), np.full((1, 2, 7), -np.inf, np.float32))
        for backend in ("emu", "reference"):
            r = run("merge-states", "--backend", backend, "--o", ",".join([path("o1"), empty_o, path("o2")]),
                    "--lse", ",".join([path("lse1"), path("lse_empty"), path("lse2")]), "--out", path("merged"),
                    "--out-lse", path("merged_lse"))
            if not checks.check(r.returncode == 0, "merge-states --backend %s runs: %s" % (backend, r.stderr.strip())):
                continue
            got, got_lse = np.load(path("merged")), np.load(path("merged_lse"))
            err = np.abs(got - want).max()
            lse_err = np.abs(got_lse - want_lse).max()
            checks.check(got.shape == want.shape and err < 2e-2 and lse_err < 1e-3,
                         "%s: the merge of the parts is the attention over all keys: |dO| %.2g, |dLSE| %.2g"
                         % (backend, err, lse_err))
        # Planted: the LSE of the parts swapped.
        r = run("merge-states", "--o", ",".join([path("o1"), path("o2")]), "--lse",
                ",".join([path("lse2"), path("lse1")]), "--out", path("swapped"))
        checks.check(r.returncode == 0 and np.abs(np.load(path("swapped")) - want).max() > 5e-2,
                     "planted: swapped LSE miss the whole")
        r = run("merge-states", "--o", ",".join([path("o1"), path("o2")]), "--lse", path("lse1"), "--out",
                path("x"))
        checks.check(r.returncode != 0 and "2 LSE files, one per O file" in r.stderr,
                     "one LSE for two O is refused: %s" % r.stderr.strip())
        r = run("merge-states", "--o", path("o1"), "--lse", path("q"), "--out", path("x"))
        checks.check(r.returncode != 0 and "[heads, rows] = [2, 7]" in r.stderr,
                     "an LSE of the wrong shape is refused: %s" % r.stderr.strip())
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
