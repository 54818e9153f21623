#!/usr/bin/env python3
"""`attune attention --backward` as a user tries it, against an independent
NumPy fp64 backward.

Usage: python3 backward_test.py PATH_TO_ATTUNE

  attune attention --backward --backend reference|emu --q Q.npy --k K.npy --v V.npy
      --do dO.npy --dq dQ.npy --dk dK.npy --dv dV.npy [--o-in O.npy --lse-in LSE.npy]
      [--deterministic] [the forward's flags: --causal, --window, --scale,
      --seqlens-k, --cu-seqlens-q/-k, --dtype]
  * dQ, dK, dV are the gradients of sum(dO * O) for the forward the flags
    describe (inputs rounded to --dtype first), float32 in Q's, K's and V's
    shapes. dK and dV of a KV head sum over its query heads (GQA). Rows and
    keys nobody sees get exactly 0; never NaN.
  * reference: to 1e-5 relative (it is fp64); emu: FlashAttention's rule for
    gradients, at most three times the error of the naive storage-dtype
    backward (P and dS rounded to the dtype, fp32 products) plus a floor of
    two storage-dtype ulps of the largest gradient.
Also: --deterministic under two emulator scheduling seeds gives bitwise-equal files; O and LSE given with
--o-in/--lse-in give the same gradients; bad flags are refused with one line.
"""
import os
import sys
import tempfile

import numpy as np

from cli_support import Checks, visible

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_families_test as fam  # noqa: E402  (rounding, files, running)

rng = np.random.default_rng(4321)


def backward_seq(q, k, v, do, scale, vis, naive=None):
    """One sequence; q [sq,Hq,Dk], k [sk,Hkv,Dk], v [sk,Hkv,Dv], do [sq,Hq,Dv]."""
    hq, hkv = q.shape[1], k.shape[1]
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    rows = vis.any(axis=1)
    f = (lambda x: x.astype(np.float32)) if naive else (lambda x: x)
    for h in range(hq):
        g = h // (hq // hkv)
        s = np.float32(scale) * (f(q[:, h]) @ f(k[:, g]).T) if naive else scale * (q[:, h] @ k[:, g].T)
        s = np.where(vis, s, -np.inf)
        p = np.zeros(s.shape)
        if rows.any():
            m = s[rows].max(axis=1, keepdims=True)
            e = np.exp(s[rows] - m)
            p[rows] = e / e.sum(axis=1, keepdims=True)
        if naive:
            p = fam.round_to(p.astype(np.float32), naive)
        o = f(p) @ f(v[:, g])
        if naive:
            o = fam.round_to(o, naive)
        dv[:, g] += f(p).T @ f(do[:, h])
        dp = f(do[:, h]) @ f(v[:, g]).T
        d = (f(do[:, h]) * f(o)).sum(axis=1)
        ds = p * (dp - d[:, None])
        if naive:
            ds = fam.round_to(ds.astype(np.float32), naive)
        dq[:, h] = scale * (f(ds) @ f(k[:, g]))
        dk[:, g] += scale * (f(ds).T @ f(q[:, h]))
    return dq, dk, dv


def backward(q, k, v, do, dtype, causal=None, window=None, scale=None, seqlens_k=None, cu_q=None, cu_k=None,
             naive=None):
    q, k, v, do = (fam.round_to(x, dtype) for x in (q, k, v, do))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    if cu_q is not None:
        for b in range(len(cu_q) - 1):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            sk = cu_k[b + 1] - cu_k[b] if seqlens_k is None else seqlens_k[b]
            ks_used = slice(cu_k[b], cu_k[b] + sk)
            vis = visible(cu_q[b + 1] - cu_q[b], sk, causal, window)
            g = backward_seq(q[qs], k[ks_used], v[ks_used], do[qs], scale, vis, naive)
            dq[qs], dk[ks_used], dv[ks_used] = g
        return dq, dk, dv
    for b in range(q.shape[0]):
        sk = k.shape[1] if seqlens_k is None else seqlens_k[b]
        vis = visible(q.shape[1], sk, causal, window)
        dq[b], dk[b, :sk], dv[b, :sk] = backward_seq(q[b], k[b, :sk], v[b, :sk], do[b], scale, vis, naive)
    return dq, dk, dv


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def cases():
    c = []

    def add(name, b, sq, sk, hq, hkv, dk, dv, **kw):
        c.append((name, (randn(b, sq, hq, dk), randn(b, sk, hkv, dk), randn(b, sk, hkv, dv), randn(b, sq, hq, dv)),
                  kw))

    add("none_irregular", 1, 37, 53, 2, 2, 32, 32)
    add("causal_bottom_right_wide", 1, 29, 70, 2, 1, 32, 24, causal="bottom-right")
    add("causal_bottom_right_tall (empty rows)", 1, 70, 29, 2, 2, 32, 32, causal="bottom-right")
    add("causal_top_left", 1, 45, 45, 2, 2, 64, 64, causal="top-left")
    add("window_8_0", 1, 40, 60, 2, 2, 32, 32, window=(8, 0))
    add("window_3_5", 1, 40, 33, 1, 1, 32, 16, window=(3, 5))
    add("gqa_3_to_1_causal", 2, 31, 31, 6, 2, 32, 32, causal="bottom-right")
    add("mqa_fp16", 1, 21, 47, 4, 1, 32, 32, dtype="fp16")
    add("scale_0.3_dk_ne_dv", 1, 25, 25, 2, 2, 64, 40, scale=0.3)
    add("padding_with_zero_length", 3, 17, 40, 2, 2, 32, 32, seqlens_k=[40, 11, 0])
    # Three key blocks of 128 add to every query tile's dQ (in turns when deterministic).
    add("causal_three_key_blocks", 1, 100, 300, 2, 1, 64, 64, causal="bottom-right")
    c.append(("packed_varlen_zero_keys", (randn(30, 2, 32), randn(41, 1, 32), randn(41, 1, 32), randn(30, 2, 32)),
              {"cu_q": [0, 9, 9, 22, 30], "cu_k": [0, 17, 20, 41, 41], "causal": "bottom-right"}))
    return c


def gradient_rule(name, got, want, naive, dtype):
    if np.isnan(got).any():
        return "%s contains NaN" % name
    err = np.abs(got - want).max(initial=0.0)
    ulp = 2.0 ** (-8 if dtype == "bf16" else -11)
    limit = 3 * np.abs(naive - want).max(initial=0.0) + 2 * ulp * np.abs(want).max(initial=0.0) + 1e-6
    return None if err <= limit else "%s error %.3g above the limit %.3g" % (name, err, limit)


def run_case(backend, name, tensors, kw, extra=()):
    d = fam.workdir()
    q, k, v, do = tensors
    dtype = kw.get("dtype", "bf16")
    arrays = {"q": q, "k": k, "v": v, "do": do}
    if kw.get("seqlens_k") is not None:
        arrays["seqlens-k"] = np.asarray(kw["seqlens_k"], np.int32)
    if kw.get("cu_q") is not None:
        arrays["cu-seqlens-q"] = np.asarray(kw["cu_q"], np.int32)
        arrays["cu-seqlens-k"] = np.asarray(kw["cu_k"], np.int32)
    outs = {g: os.path.join(d, g + ".npy") for g in ("dq", "dk", "dv")}
    args = fam.input_args(d, arrays) + ["--backward", "--dtype", dtype] + list(extra)
    for g, path in outs.items():
        args += ["--" + g, path]
    if kw.get("causal"):
        args += ["--causal", kw["causal"]]
    if kw.get("window"):
        args += ["--window", "%d,%d" % kw["window"]]
    if kw.get("scale"):
        args += ["--scale", repr(kw["scale"])]
    res = fam.run_attune(args, backend)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300]), None
    got = [np.load(outs[g]) for g in ("dq", "dk", "dv")]
    ref_kw = dict(causal=kw.get("causal"), window=kw.get("window"), scale=kw.get("scale"),
                  seqlens_k=kw.get("seqlens_k"), cu_q=kw.get("cu_q"), cu_k=kw.get("cu_k"))
    want = backward(q, k, v, do, dtype, **ref_kw)
    for g, w, name_ in zip(got, want, ("dQ", "dK", "dV")):
        if g.shape != w.shape or g.dtype != np.float32:
            return "%s: shape %s dtype %s, expected %s float32" % (name_, g.shape, g.dtype, w.shape), None
    if backend == "reference":
        for g, w, name_ in zip(got, want, ("dQ", "dK", "dV")):
            if not np.allclose(g, w, rtol=1e-5, atol=1e-6):
                return "%s differs from NumPy by %.3g" % (name_, np.abs(g - w).max()), None
        return None, got
    naive = backward(q, k, v, do, dtype, naive=dtype, **ref_kw)
    for g, w, n, name_ in zip(got, want, naive, ("dQ", "dK", "dV")):
        why = gradient_rule(name_, g, w, n, dtype)
        if why:
            return why, None
    return None, got


def check_refused(name, extra, keywords):
    d = fam.workdir()
    q, k, v, do = randn(1, 8, 1, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16), randn(1, 8, 1, 16)
    arrays = {"q": q, "k": k, "v": v, "do": do}
    outs = [os.path.join(d, g + ".npy") for g in ("dq", "dk", "dv")]
    args = fam.input_args(d, arrays) + ["--backward"] + list(extra)
    res = fam.run_attune(args, "emu")
    err = res.stderr.strip()
    if res.returncode == 0:
        return "exit status 0"
    if not err or "\n" in err:
        return "expected one stderr line, got %r" % err[:300]
    if not all(kw.lower() in err.lower() for kw in keywords):
        return "stderr %r does not mention %s" % (err, keywords)
    if any(os.path.exists(p) for p in outs):
        return "output written despite the error"
    return None


def main():
    fam.BINARY = os.path.abspath(sys.argv[1])
    results = Checks()  # each result printed as it comes
    with tempfile.TemporaryDirectory(prefix="attune_backward_") as tmp:
        fam.TMP = tmp
        for name, tensors, kw in cases():
            for backend in ("reference", "emu"):
                why, _ = run_case(backend, name, tensors, kw)
                results.append(("%s %s" % (backend, name), why))
        # Deterministic mode: two runs with the emulator's blocks in two
        # other orders (ATTUNE_EMU_SEED), bitwise-equal files.
        name, tensors, kw = next(c for c in cases() if c[0] == "causal_three_key_blocks")
        os.environ["ATTUNE_EMU_SEED"] = "1"
        first = run_case("emu", name, tensors, kw, ["--deterministic"])
        os.environ["ATTUNE_EMU_SEED"] = "2"
        second = run_case("emu", name, tensors, kw, ["--deterministic"])
        del os.environ["ATTUNE_EMU_SEED"]
        same = first[1] is not None and second[1] is not None and all(
            np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(first[1], second[1]))
        results.append(("emu --deterministic under two scheduling seeds: bitwise equal", first[0] or second[0] or
                        (None if same else "the two runs differ")))
        # O and LSE given: the same gradients as computed ones.
        d = fam.workdir()
        q, k, v, do = tensors
        o_path, lse_path = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
        fwd = fam.run_attune(fam.input_args(d, {"q": q, "k": k, "v": v}) +
                             ["--causal", "bottom-right", "--out", o_path, "--lse", lse_path], "emu")
        given = run_case("emu", name, tensors, kw, ["--o-in", o_path, "--lse-in", lse_path]) \
            if fwd.returncode == 0 else ("forward failed: " + fwd.stderr.strip(), None)
        results.append(("emu with --o-in/--lse-in", given[0]))
        for label, extra, keywords in [
                ("missing --dv", ["--dq", "a.npy", "--dk", "b.npy"], ["--dv", "missing"]),
                ("--o-in without --lse-in", ["--o-in", "o.npy"], ["--o-in", "--lse-in"]),
                ("--splits with --backward", ["--splits", "2"], ["--splits", "backward"]),
                ("--dq without --backward", None, ["--dq", "--backward"])]:
            if extra is None:
                d = fam.workdir()
                res = fam.run_attune(fam.input_args(d, {"q": randn(1, 4, 1, 8), "k": randn(1, 4, 1, 8),
                                                         "v": randn(1, 4, 1, 8)}) +
                                     ["--out", os.path.join(d, "o.npy"), "--dq", os.path.join(d, "dq.npy")], "emu")
                err = res.stderr.strip()
                ok = res.returncode != 0 and "\n" not in err and all(x in err for x in keywords)
                results.append(("refused: " + label, None if ok else "got %r" % err))
                continue
            d = fam.workdir()
            full = extra if "--dq" in extra else extra + ["--dq", os.path.join(d, "dq.npy"), "--dk",
                                                          os.path.join(d, "dk.npy"), "--dv", os.path.join(d, "dv.npy")]
            results.append(("refused: " + label, check_refused(label, full, keywords)))
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
