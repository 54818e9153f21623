#!/usr/bin/env python3
"""Score modifiers on `attune attention` as a user tries them, against an
independent NumPy fp64 implementation of docs/contract.md ("Score
modifiers"), forward, split-KV decode and backward.

Usage: python3 modifiers_test.py PATH_TO_ATTUNE

  attune attention [--backward] --softcap C --sinks S.npy --alibi-slopes A.npy ...
  * s = scale q.k; softcap: s = C tanh(s / C); ALiBi: s -= slope |i + Sk - Sq - j|
    (slopes float [Hq] or [B, Hq]); then the mask; sinks (float [Hq]) join
    every row's softmax as e^sink with no value: O = sum e^s v / (e^sink +
    sum e^s), LSE = log(e^sink + sum e^s); a row that sees no key: O = 0,
    LSE = sink. Backward: the tanh chain rule; --dsink writes dL/dsink [Hq].
  * reference: to 1e-5 (fp64); emu: FlashAttention's rule (at most twice the
    error of the naive storage-dtype computation, gradients three times plus
    a floor of two ulps).
Also: bad modifier inputs are refused with one line naming what was wrong.
"""
import os
import sys
import tempfile

import numpy as np

from cli_support import Checks, visible

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_families_test as fam  # noqa: E402  (rounding, files, running, the forward rule)
from backward_test import gradient_rule  # noqa: E402  (the gradient rule)

rng = np.random.default_rng(9090)


def f32(x):
    return np.asarray(x, np.float32)


def logits(q, k, h, g, scale, mods, sq, sk, naive):
    """[sq, sk] modified scores of head h (kv head g), before the mask."""
    if naive:
        s = np.float32(scale) * (f32(q[:, h]) @ f32(k[:, g]).T)
    else:
        s = scale * (q[:, h] @ k[:, g].T)
    c = mods.get("softcap")
    if c:
        s = c * np.tanh(s / c)
    slopes = mods.get("slopes_b")
    if slopes is not None:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        s = s - slopes[h] * np.abs(i + sk - sq - j)
    return fam.round_to(f32(s), naive) if naive else s


def forward_seq(q, k, v, scale, vis, mods, naive=None):
    sq, hq = q.shape[:2]
    sk, hkv = k.shape[:2]
    sinks = mods.get("sinks")
    o = np.zeros((sq, hq, v.shape[2]))
    lse = np.full((hq, sq), -np.inf)
    for h in range(hq):
        g = h // (hq // hkv)
        if mods.get("planted_cap_after_mask"):  # the bug the test must tell apart: masked keys weigh e^-c
            c = mods["softcap"]
            s = c * np.tanh(np.where(vis, logits(q, k, h, g, scale, dict(mods, softcap=None), sq, sk, naive),
                                     -np.inf) / c)
        else:
            s = np.where(vis, logits(q, k, h, g, scale, mods, sq, sk, naive), -np.inf)
        m = s.max(axis=1, initial=-np.inf)
        if sinks is not None:
            m = np.maximum(m, sinks[h])
        rows = np.isfinite(m)
        p = np.zeros(s.shape)
        p[rows] = np.exp(s[rows] - m[rows, None])
        l = p.sum(axis=1)
        if sinks is not None:
            l = l + np.exp(sinks[h] - np.where(rows, m, 0.0))
        pn = np.zeros(p.shape)
        pn[rows] = p[rows] / l[rows, None]
        if naive:
            o[:, h] = fam.round_to(f32(fam.round_to(f32(pn), naive)) @ f32(v[:, g]), naive)
        else:
            o[:, h] = pn @ v[:, g]
        lse[h, rows] = m[rows] + np.log(l[rows])
    return o, lse


def backward_seq(q, k, v, do, scale, vis, mods, naive=None):
    """dq, dk, dv and this sequence's dsink share, in fp64 (naive: rounded as a framework would)."""
    sq, hq = q.shape[:2]
    sk, hkv = k.shape[:2]
    o, lse = forward_seq(q, k, v, scale, vis, mods, naive)
    f = f32 if naive else (lambda x: x)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dsink = np.zeros(hq)
    c = mods.get("softcap")
    for h in range(hq):
        g = h // (hq // hkv)
        x = scale * (q[:, h] @ k[:, g].T)
        s = np.where(vis, logits(q, k, h, g, scale, mods, sq, sk, None), -np.inf)
        fin = np.isfinite(lse[h])[:, None] & vis
        p = np.where(fin, np.exp(s - np.where(np.isfinite(lse[h]), lse[h], 0.0)[:, None]), 0.0)
        if naive:
            p = fam.round_to(f32(p), naive)
        dv[:, g] += f(p).T @ f(do[:, h])
        dp = f(do[:, h]) @ f(v[:, g]).T
        d = (f(do[:, h]) * f(o[:, h])).sum(axis=1)
        ds = p * (dp - d[:, None])
        if c:
            ds = ds * (1.0 - np.tanh(x / c) ** 2)
        if naive:
            ds = fam.round_to(f32(ds), naive)
        dq[:, h] = scale * (f(ds) @ f(k[:, g]))
        dk[:, g] += scale * (f(ds).T @ f(q[:, h]))
        if mods.get("sinks") is not None:
            has = np.isfinite(lse[h])
            dsink[h] -= (np.exp(mods["sinks"][h] - lse[h][has]) * d[has]).sum()
    return dq, dk, dv, dsink, o, lse


def per_batch(mods, b):
    m = dict(mods)
    slopes = mods.get("slopes")
    if slopes is not None:
        m["slopes_b"] = slopes[b] if slopes.ndim == 2 else slopes
    return m


def sequences(q_shape, k_len, kw):
    """(b, query slice, key slice, visible matrix) of each sequence, dense or packed."""
    out = []
    if kw.get("cu_q") is not None:
        cu_q, cu_k = kw["cu_q"], kw["cu_k"]
        for b in range(len(cu_q) - 1):
            sq, sk = cu_q[b + 1] - cu_q[b], cu_k[b + 1] - cu_k[b]
            out.append((b, slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b] + sk),
                        visible(sq, sk, kw.get("causal"), kw.get("window"))))
        return out
    for b in range(q_shape[0]):
        sk = k_len if kw.get("seqlens_k") is None else kw["seqlens_k"][b]
        out.append((b, (b, slice(None)), (b, slice(0, sk)), visible(q_shape[1], sk, kw.get("causal"),
                                                                     kw.get("window"))))
    return out


def forward(q, k, v, kw, mods, naive=None):
    dtype = kw.get("dtype", "bf16")
    q, k, v = (fam.round_to(x, dtype) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1])
    packed = kw.get("cu_q") is not None
    o = np.zeros(q.shape[:-1] + (v.shape[-1],))
    lse = np.full((q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1]), -np.inf)
    for b, qs, ks, vis in sequences(q.shape, k.shape[1], kw):
        ob, lb = forward_seq(q[qs], k[ks], v[ks], scale, vis, per_batch(mods, b), naive)
        o[qs] = ob
        if packed:
            lse[:, qs] = lb
        else:
            lse[b] = lb
    return o, lse


def backward(q, k, v, do, kw, mods, naive=None):
    dtype = kw.get("dtype", "bf16")
    q, k, v, do = (fam.round_to(x, dtype) for x in (q, k, v, do))
    scale = 1.0 / np.sqrt(q.shape[-1])
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dsink = np.zeros(q.shape[-2])
    for b, qs, ks, vis in sequences(q.shape, k.shape[1], kw):
        g = backward_seq(q[qs], k[ks], v[ks], do[qs], scale, vis, per_batch(mods, b), naive)
        dq[qs], dk[ks], dv[ks] = g[0], g[1], g[2]
        dsink += g[3]
    return dq, dk, dv, dsink


# ---------------------------------------------------------------- cases
def randn(*shape, s=1.0):
    return (s * rng.standard_normal(shape)).astype(np.float32)


def modifier_sets(hq, batch):
    sinks = rng.uniform(-1.0, 2.0, hq).astype(np.float32)
    slopes = (2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)).astype(np.float32)
    return {
        "softcap": {"softcap": 2.5},
        "sinks": {"sinks": sinks},
        "alibi": {"slopes": slopes},
        "all": {"softcap": 2.5, "sinks": sinks, "slopes": slopes},
        "all_batch_slopes": {"softcap": 4.0, "sinks": sinks,
                             "slopes": rng.uniform(0.01, 0.5, (batch, hq)).astype(np.float32)},
    }


def forward_cases():
    c = []

    def add(name, b, sq, sk, hq, hkv, dk, dv, which, **kw):
        sets = modifier_sets(hq, b)
        for w in which:
            c.append(("%s %s" % (w, name), (randn(b, sq, hq, dk, s=2.0), randn(b, sk, hkv, dk, s=2.0),
                                           randn(b, sk, hkv, dv)), kw, sets[w]))

    add("none_irregular", 2, 37, 53, 4, 2, 32, 24, ["softcap", "sinks", "alibi", "all_batch_slopes"])
    add("causal_bottom_right_tall (empty rows)", 1, 70, 29, 2, 2, 32, 32, ["all"], causal="bottom-right")
    add("causal_top_left", 1, 45, 45, 2, 1, 64, 64, ["all"], causal="top-left")
    add("window_3_5", 1, 40, 33, 2, 2, 32, 16, ["all"], window=(3, 5))
    add("gqa_fp16_dk_ne_dv", 1, 21, 47, 4, 1, 64, 40, ["all"], dtype="fp16", causal="bottom-right")
    add("padding_with_zero_length", 3, 17, 40, 2, 2, 32, 32, ["all_batch_slopes"], seqlens_k=[40, 11, 0])
    sets = modifier_sets(2, 4)
    c.append(("all packed_varlen_zero_keys", (randn(30, 2, 32, s=2.0), randn(41, 1, 32, s=2.0), randn(41, 1, 32)),
              {"cu_q": [0, 9, 9, 22, 30], "cu_k": [0, 17, 20, 41, 41], "causal": "bottom-right"}, sets["all"]))
    return c


def modifier_args(d, mods):
    args = []
    if mods.get("softcap"):
        args += ["--softcap", repr(mods["softcap"])]
    arrays = {}
    if mods.get("sinks") is not None:
        arrays["sinks"] = mods["sinks"]
    if mods.get("slopes") is not None:
        arrays["alibi-slopes"] = mods["slopes"]
    return args + fam.input_args(d, arrays)


def problem_args(d, tensors, kw, names):
    arrays = dict(zip(names, tensors))
    if kw.get("seqlens_k") is not None:
        arrays["seqlens-k"] = np.asarray(kw["seqlens_k"], np.int32)
    if kw.get("cu_q") is not None:
        arrays["cu-seqlens-q"] = np.asarray(kw["cu_q"], np.int32)
        arrays["cu-seqlens-k"] = np.asarray(kw["cu_k"], np.int32)
    args = fam.input_args(d, arrays) + ["--dtype", kw.get("dtype", "bf16")]
    if kw.get("causal"):
        args += ["--causal", kw["causal"]]
    if kw.get("window"):
        args += ["--window", "%d,%d" % kw["window"]]
    return args


def judge_forward(backend, got_o, got_lse, want, naive):
    if backend == "reference":
        return fam.compare("O", got_o, want[0], want[0].shape) or fam.compare("LSE", got_lse, want[1], want[1].shape)
    return fam.accuracy_rule("O", got_o, want[0], naive[0]) or fam.accuracy_rule("LSE", got_lse, want[1], naive[1])


def run_forward(backend, tensors, kw, mods):
    d = fam.workdir()
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    args = problem_args(d, tensors, kw, ("q", "k", "v")) + modifier_args(d, mods) + ["--out", out, "--lse", lse]
    res = fam.run_attune(args, backend)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300])
    want = forward(*tensors, kw, mods)
    naive = forward(*tensors, kw, mods, naive=kw.get("dtype", "bf16")) if backend != "reference" else None
    return judge_forward(backend, np.load(out), np.load(lse), want, naive)


def run_decode(backend, splits, paged):
    """Paged or contiguous cache, GQA 8 -> 2 packed, all modifiers, cache lengths 150 and 61."""
    d = fam.workdir()
    b, sq, smax, hq, hkv, dh, page = 2, 3, 150, 8, 2, 32, 16
    lens = np.array([150, 61], np.int32)
    q, k, v = randn(b, sq, hq, dh, s=2.0), randn(b, smax, hkv, dh, s=2.0), randn(b, smax, hkv, dh)
    mods = modifier_sets(hq, b)["all_batch_slopes"]
    arrays = {"q": q, "cache-seqlens": lens}
    extra = []
    if paged:
        max_pages = -(-smax // page)
        pages = b * max_pages + 3
        table = rng.permutation(pages).astype(np.int32)[: b * max_pages].reshape(b, max_pages)
        k_pool, v_pool = randn(pages, page, hkv, dh), randn(pages, page, hkv, dh)
        for bb in range(b):
            for j in range(smax):
                k_pool[table[bb, j // page], j % page] = k[bb, j]
                v_pool[table[bb, j // page], j % page] = v[bb, j]
        arrays.update({"k-cache": k_pool, "v-cache": v_pool, "block-table": table})
        extra = ["--page-size", str(page)]
    else:
        arrays.update({"k-cache": k, "v-cache": v})
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    args = fam.input_args(d, arrays) + extra + modifier_args(d, mods) + [
        "--causal", "bottom-right", "--splits", str(splits), "--out", out, "--lse", lse]
    res = fam.run_attune(args, backend)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300])
    kw = {"causal": "bottom-right", "seqlens_k": lens}
    want = forward(q, k, v, kw, mods)
    naive = forward(q, k, v, kw, mods, naive="bf16") if backend != "reference" else None
    return judge_forward(backend, np.load(out), np.load(lse), want, naive)


def run_backward(backend, tensors, kw, mods):
    d = fam.workdir()
    outs = {g: os.path.join(d, g + ".npy") for g in ("dq", "dk", "dv", "dsink")}
    args = problem_args(d, tensors, kw, ("q", "k", "v", "do")) + modifier_args(d, mods) + ["--backward"]
    for g, path in outs.items():
        if g != "dsink" or mods.get("sinks") is not None:
            args += ["--" + g, path]
    res = fam.run_attune(args, backend)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300])
    names = ["dq", "dk", "dv"] + (["dsink"] if mods.get("sinks") is not None else [])
    got = [np.load(outs[g]) for g in names]
    want = backward(*tensors, kw, mods)
    dtype = kw.get("dtype", "bf16")
    naive = backward(*tensors, kw, mods, naive=dtype) if backend != "reference" else None
    for i, name in enumerate(names):
        if got[i].shape != want[i].shape:
            return "%s shape %s, expected %s" % (name, got[i].shape, want[i].shape)
        if backend == "reference":
            scale = np.abs(want[i]).max(initial=0.0) + 1e-30
            if np.abs(got[i] - want[i]).max(initial=0.0) > 1e-5 * scale + 1e-6:
                return "%s differs from the NumPy fp64 backward" % name
        else:
            why = gradient_rule(name, got[i], want[i], naive[i], dtype)
            if why:
                return why
    return None


def backward_cases():
    c = []

    def add(name, b, sq, sk, hq, hkv, dk, dv, which, **kw):
        sets = modifier_sets(hq, b)
        c.append(("%s %s" % (which, name), (randn(b, sq, hq, dk, s=2.0), randn(b, sk, hkv, dk, s=2.0),
                                           randn(b, sk, hkv, dv), randn(b, sq, hq, dv)), kw, sets[which]))

    add("gqa_causal_dk_ne_dv", 1, 37, 53, 4, 2, 32, 24, "all", causal="bottom-right")
    add("tall_top_left (empty rows)", 1, 50, 29, 2, 2, 32, 32, "sinks", causal="top-left")
    add("window_softcap", 1, 40, 33, 2, 1, 32, 32, "softcap", window=(3, 5))
    add("padding_batch_slopes", 2, 17, 40, 2, 2, 32, 32, "all_batch_slopes", seqlens_k=[40, 0])
    sets = modifier_sets(2, 4)
    c.append(("all packed_varlen", (randn(30, 2, 32, s=2.0), randn(41, 1, 32, s=2.0), randn(41, 1, 32),
                                    randn(30, 2, 32)),
              {"cu_q": [0, 9, 9, 22, 30], "cu_k": [0, 17, 20, 41, 41], "causal": "bottom-right"}, sets["all"]))
    return c


def error_cases(d):
    q, k, v = randn(1, 8, 2, 32), randn(1, 8, 2, 32), randn(1, 8, 2, 32)
    base = fam.input_args(d, {"q": q, "k": k, "v": v}) + ["--out", os.path.join(d, "o.npy")]
    bad_nan = np.array([0.1, np.nan], np.float32)
    arrays = {"sinks3": np.zeros(3, np.float32), "nan-slopes": bad_nan, "slopes3d": np.zeros((1, 1, 2), np.float32),
              "slopes-b": np.zeros((2, 2), np.float32)}
    paths = {}
    for name, arr in arrays.items():
        paths[name] = os.path.join(d, name + ".npy")
        np.save(paths[name], arr)
    return [
        ("a negative softcap", base + ["--softcap", "-1"], ["--softcap", "-1"]),
        ("a zero softcap", base + ["--softcap", "0"], ["--softcap", "> 0"]),
        ("sinks of the wrong length", base + ["--sinks", paths["sinks3"]], ["--sinks", "[3]", "[Hq] = [2]"]),
        ("a NaN slope", base + ["--alibi-slopes", paths["nan-slopes"]], ["alibi_slopes[1]", "nan", "finite"]),
        ("3-D slopes", base + ["--alibi-slopes", paths["slopes3d"]], ["--alibi-slopes", "[Hq] or [B, Hq]"]),
        ("[B, Hq] slopes for another batch", base + ["--alibi-slopes", paths["slopes-b"]], ["[B, Hq] = [1, 2]"]),
        ("--dsink without --sinks", base[:-2] + ["--backward", "--do", os.path.join(d, "q.npy"),
                                                  "--dq", os.path.join(d, "a.npy"), "--dk", os.path.join(d, "b.npy"),
                                                  "--dv", os.path.join(d, "c.npy"), "--dsink",
                                                  os.path.join(d, "e.npy")], ["--dsink", "--sinks"]),
    ]


def main():
    fam.BINARY = os.path.abspath(sys.argv[1])
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="attune_mods_") as tmp:
        fam.TMP = tmp
        for name, tensors, kw, mods in forward_cases():
            for backend in ("reference", "emu"):
                checks.result("forward %s %s" % (backend, name), run_forward(backend, tensors, kw, mods))
        for splits, paged in ((3, True), (1, False), (4, False)):
            for backend in ("reference", "emu"):
                checks.result("decode %s all modifiers, %s cache, %d splits" % (
                    backend, "paged" if paged else "contiguous", splits), run_decode(backend, splits, paged))
        for name, tensors, kw, mods in backward_cases():
            for backend in ("reference", "emu"):
                checks.result("backward %s %s" % (backend, name), run_backward(backend, tensors, kw, mods))
        # The checks can fail: the NumPy forward with softcap applied after
        # the mask and bias (tanh of -inf is -1: masked keys come back), or
        # with the sink dropped, is far from what attune computes.
        name, tensors, kw, mods = forward_cases()[4]  # "all" with bottom-right causal on a tall problem
        d = fam.workdir()
        out = os.path.join(d, "o.npy")
        fam.run_attune(problem_args(d, tensors, kw, ("q", "k", "v")) + modifier_args(d, mods) + ["--out", out],
                       "emu")
        got = np.load(out)
        no_sink = dict(mods)
        no_sink.pop("sinks")
        wrong = forward(*tensors, kw, no_sink)[0]
        checks.check(np.abs(got - wrong).max() > 1e-2, "planted: the forward without its sink is told apart")
        late = forward(*tensors, kw, dict(mods, planted_cap_after_mask=True))[0]
        checks.check(np.abs(got - late).max() > 1e-2, "planted: softcap applied after the mask is told apart")
        d = fam.workdir()
        for what, args, words in error_cases(d):
            res = fam.run_attune(args, "emu")
            text = res.stderr.strip()
            ok = res.returncode != 0 and len(text.splitlines()) == 1 and all(w.lower() in text.lower() for w in words)
            checks.check(ok, "refused: %s (%s)" % (what, text[:200]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
