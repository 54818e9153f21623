#!/usr/bin/env python3
"""End-to-end test of `attune attention --backend reference` against numpy.

Usage: python3 attention_families_test.py PATH_TO_ATTUNE [--backend emu]

With --backend emu the same cases run on the kernel emulator, once with the
default (heuristic) variant and once with each of two flash_fwd ids and one
flash_fwd_sm90 id that `attune variants list` prints for the case's dtype
and head dims; outputs
must then meet FlashAttention's accuracy rule: error against the fp64
reference at most twice that of attention computed naively in the storage
dtype, plus 1e-5 (LSE: relative), with empty rows exactly 0 / -inf.

Contract checked (an independent fp64 implementation lives in this file):
  attune attention --backend reference --q Q.npy --k K.npy --v V.npy
      --out O.npy [--lse LSE.npy] [--dtype fp16|bf16] [--scale S]
      [--causal bottom-right|top-left] [--window LEFT,RIGHT]
      [--seqlens-k S.npy] [--cu-seqlens-q A.npy --cu-seqlens-k B.npy]
  * Inputs are float32: dense Q [B,Sq,Hq,Dk], K [B,Sk,Hkv,Dk], V [B,Sk,Hkv,Dv],
    or packed Q [Tq,Hq,Dk], K [Tk,Hkv,Dk], V [Tk,Hkv,Dv] with int32 cu_seqlens
    of length B+1. seqlens_k is int32 [B]; keys j >= seqlens_k[b] are padding.
  * Q, K, V are first rounded to --dtype (default bf16, round-to-nearest-even),
    then everything is computed in fp64. Query head h reads kv head
    h // (Hq // Hkv). The scale defaults to 1/sqrt(Dk).
  * Row i of a sequence with sq queries and sk keys sees key j iff
    bottom-right causal: j <= i + sk - sq; top-left causal: j <= i;
    window L,R (-1 = unbounded): j >= i+sk-sq-L and j <= i+sk-sq+R, with R
    clamped to <= 0 when combined with bottom-right causal.
  * O = softmax(scale * q.k) v over visible keys, LSE = natural log-sum-exp.
    A row with no visible key has O exactly 0 and LSE -inf; never NaN.
  * Outputs float32: O [B,Sq,Hq,Dv] (packed [Tq,Hq,Dv]), LSE [B,Hq,Sq]
    (packed [Hq,Tq]); compared with rtol = atol = 2e-6.
  * Invalid input: non-zero exit, exactly one non-empty stderr line naming
    the problem, no crash, and no output file written.
"""
import io
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_support import visible

RTOL = ATOL = 2e-6
CRASH_TEXT = ("terminate called", "Segmentation", "Aborted", "core dumped")
rng = np.random.default_rng(20240607)


# ---------------------------------------------------------------- reference
def round_to(x, dtype):
    x = np.asarray(x, dtype=np.float32)
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float64)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def attend_seq(q, k, v, scale, causal, window, naive=None):
    """One sequence: q [sq,Hq,Dk], k [sk,Hkv,Dk], v [sk,Hkv,Dv] (fp64).

    naive: a storage dtype; then compute as a framework does in that dtype:
    fp32 matmuls whose results (S, P, O) are rounded to it."""
    sq, hq = q.shape[:2]
    sk, hkv = k.shape[:2]
    vis = visible(sq, sk, causal, window)
    o = np.zeros((sq, hq, v.shape[2]))
    lse = np.full((hq, sq), -np.inf)
    rows = vis.any(axis=1)
    for h in range(hq):
        g = h // (hq // hkv)
        logits = scale * (q[:, h, :] @ k[:, g, :].T)
        if naive:
            logits = round_to(np.float32(scale) * (q[:, h, :].astype(np.float32) @ k[:, g, :].T.astype(np.float32)),
                              naive)
        s = np.where(vis, logits, -np.inf)[rows]
        if s.shape[0] == 0:
            continue
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(axis=1, keepdims=True)
        if naive:
            pn = round_to((p / l).astype(np.float32), naive).astype(np.float32)
            o[rows, h, :] = round_to(pn @ v[:, g, :].astype(np.float32), naive)
        else:
            o[rows, h, :] = (p @ v[:, g, :]) / l
        lse[h, rows] = (m + np.log(l))[:, 0]
    return o, lse


def reference(q, k, v, dtype="bf16", causal=None, window=None, scale=None,
              seqlens_k=None, cu_q=None, cu_k=None, naive=None):
    q, k, v = round_to(q, dtype), round_to(k, dtype), round_to(v, dtype)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    if cu_q is not None:  # packed
        o = np.zeros(q.shape[:2] + (v.shape[-1],))
        lse = np.full((q.shape[1], q.shape[0]), -np.inf)
        for b in range(len(cu_q) - 1):
            qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
            o[qs], lse[:, qs] = attend_seq(q[qs], k[ks], v[ks], scale, causal, window, naive)
        return o, lse
    nb, sq, hq = q.shape[:3]
    o = np.zeros((nb, sq, hq, v.shape[-1]))
    lse = np.full((nb, hq, sq), -np.inf)
    for b in range(nb):
        sk = k.shape[1] if seqlens_k is None else seqlens_k[b]
        o[b], lse[b] = attend_seq(q[b], k[b, :sk], v[b, :sk], scale, causal, window, naive)
    return o, lse


# ---------------------------------------------------------------- running
BINARY = None
BACKEND = "reference"
TMP = None
_counter = [0]


def workdir():
    _counter[0] += 1
    d = os.path.join(TMP, "case%03d" % _counter[0])
    os.mkdir(d)
    return d


def run_attune(args, backend=None):
    return subprocess.run([BINARY, "attention", "--backend", backend or BACKEND] + args,
                          capture_output=True, text=True, timeout=600)


_listed = {}


def listed_variants(dtype, dk, dv):
    """Two flash_fwd ids `attune variants list` prints for this problem class,
    and one of the Hopper family's (listed for sm_90a up to head dim 256)."""
    key = (dtype, dk, dv)
    if key not in _listed:
        res = subprocess.run([BINARY, "variants", "list", "--dtype", dtype, "--dk", str(dk), "--dv", str(dv),
                              "--arch", "sm_90a"], capture_output=True, text=True, timeout=60, check=True)
        ids = [line.split()[0] for line in res.stdout.splitlines() if line.startswith("flash_fwd/")]
        hopper = [line.split()[0] for line in res.stdout.splitlines() if line.startswith("flash_fwd_sm90/")]
        _listed[key] = [ids[0], ids[len(ids) // 2]] + hopper[len(hopper) // 3:len(hopper) // 3 + 1]
    return _listed[key]


def accuracy_rule(name, got, want, naive):
    """FlashAttention's rule: |got - want| <= 2 |naive - want| + floor."""
    if np.isnan(got).any():
        return "%s contains NaN" % name
    if not np.array_equal(np.isneginf(got), np.isneginf(want)):
        return "%s infinities differ from reference" % name
    fin = np.isfinite(want)
    if not fin.any():
        return None
    g, w, n = got[fin].astype(np.float64), want[fin], naive[fin]
    scale = 1.0 if name == "O" else 1.0 + np.abs(w)
    err, limit = (np.abs(g - w) / scale).max(), 2 * (np.abs(n - w) / scale).max() + 1e-5
    return None if err <= limit else "%s error %.3g above the limit %.3g" % (name, err, limit)


def input_args(d, arrays):
    """Saves arrays (flag -> array) into d; returns the matching flags."""
    args = []
    for flag, arr in arrays.items():
        path = os.path.join(d, flag + ".npy")
        np.save(path, arr)
        args += ["--" + flag, path]
    return args


def compare(name, got, want, shape):
    if got.shape != shape:
        return "%s shape %s, expected %s" % (name, got.shape, shape)
    if got.dtype != np.float32:
        return "%s dtype %s, expected float32" % (name, got.dtype)
    if np.isnan(got).any():
        return "%s contains NaN" % name
    if not np.array_equal(np.isneginf(got), np.isneginf(want)) or np.isposinf(got).any():
        return "%s infinities differ from reference" % name
    fin = np.isfinite(want)
    g, w = got[fin].astype(np.float64), want[fin]
    if not np.allclose(g, w, rtol=RTOL, atol=ATOL):
        err = np.abs(g - w) - RTOL * np.abs(w)
        return "%s mismatch, worst excess error %.3g" % (name, err.max())
    return None


def check(q, k, v, dtype="bf16", causal=None, window=None, scale=None,
          seqlens_k=None, cu_q=None, cu_k=None, with_lse=True):
    """Runs one forward case; returns None on success or a failure reason."""
    d = workdir()
    arrays = {"q": q.astype(np.float32), "k": k.astype(np.float32),
              "v": v.astype(np.float32)}
    if seqlens_k is not None:
        arrays["seqlens-k"] = np.asarray(seqlens_k, dtype=np.int32)
    if cu_q is not None:
        arrays["cu-seqlens-q"] = np.asarray(cu_q, dtype=np.int32)
        arrays["cu-seqlens-k"] = np.asarray(cu_k, dtype=np.int32)
    out, lse_path = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    args = input_args(d, arrays) + ["--out", out, "--dtype", dtype]
    if with_lse:
        args += ["--lse", lse_path]
    if causal is not None:
        args += ["--causal", causal]
    if window is not None:
        args += ["--window", "%d,%d" % window]
    if scale is not None:
        args += ["--scale", repr(scale)]
    want_o, want_lse = reference(q, k, v, dtype, causal, window, scale,
                                 seqlens_k, cu_q, cu_k)
    if BACKEND == "emu":
        naive_o, naive_lse = reference(q, k, v, dtype, causal, window, scale, seqlens_k, cu_q, cu_k, naive=dtype)
        for variant in [None] + listed_variants(dtype, q.shape[-1], v.shape[-1]):
            res = run_attune(args + (["--variant", variant] if variant else []))
            label = variant or "default variant"
            if res.returncode != 0:
                return "%s: exit %d: %s" % (label, res.returncode, res.stderr.strip()[:300])
            got_o = np.load(out)
            empty = np.isneginf(want_lse.T if cu_q is not None else want_lse.transpose(0, 2, 1))
            why = accuracy_rule("O", got_o, want_o, naive_o)
            if why is None and np.any(got_o[empty] != 0):
                why = "O not exactly 0 on rows with no visible key"
            if why is None and with_lse:
                why = accuracy_rule("LSE", np.load(lse_path), want_lse, naive_lse)
            if why is not None:
                return "%s: %s" % (label, why)
        return None
    res = run_attune(args)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300])
    got_o = np.load(out)
    why = compare("O", got_o, want_o, want_o.shape)
    if why is None:
        # Rows without a visible key must be exactly zero.
        empty = np.isneginf(want_lse.T if cu_q is not None else want_lse.transpose(0, 2, 1))
        if np.any(got_o[empty] != 0):
            why = "O not exactly 0 on rows with no visible key"
    if why is None and with_lse:
        why = compare("LSE", np.load(lse_path), want_lse, want_lse.shape)
    if why is None and not with_lse and os.path.exists(lse_path):
        why = "LSE written without --lse"
    return why


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def qkv(b, sq, sk, hq, hkv, dk, dv):
    return randn(b, sq, hq, dk), randn(b, sk, hkv, dk), randn(b, sk, hkv, dv)


# ---------------------------------------------------------------- cases
def forward_cases():
    cases = []

    def add(name, *a, **kw):
        cases.append((name, a, kw))

    c1 = qkv(1, 5, 9, 1, 1, 4, 3)
    add("noncausal_irregular", *c1)
    add("noncausal_irregular_no_lse", *c1, with_lse=False)
    add("noncausal_irregular_fp16", *c1, dtype="fp16")
    c2 = qkv(1, 7, 7, 1, 1, 5, 2)
    add("square_causal_bottom_right", *c2, causal="bottom-right")
    add("square_causal_top_left", *c2, causal="top-left")
    add("rect_bottom_right_sq2_sk6", *qkv(1, 2, 6, 1, 1, 1, 1), causal="bottom-right")
    add("rect_bottom_right_empty_prefix", *qkv(1, 5, 2, 1, 1, 1, 1), causal="bottom-right")
    add("rect_top_left_sq5_sk8", *qkv(1, 5, 8, 1, 1, 4, 3), causal="top-left")
    add("rect_top_left_sq8_sk5", *qkv(1, 8, 5, 1, 1, 4, 3), causal="top-left")
    c5 = qkv(3, 6, 10, 1, 1, 4, 3)
    add("padding_seqlens_k", *c5, seqlens_k=[10, 3, 0])
    add("padding_seqlens_k_causal", *c5, seqlens_k=[10, 3, 0], causal="bottom-right")
    c6 = qkv(1, 3, 0, 1, 1, 4, 3)
    add("empty_key_axis", *c6)
    add("empty_key_axis_causal", *c6, causal="bottom-right")

    # Logits around +-1000 (scale*q.k ~ 0.707*2*30*30 ~ 1270) with spans ~200.
    base = np.array([30, 25, 30, 26.5, -30, 29, 30, 24], dtype=np.float32)
    kl = base[:, None] + rng.integers(-2, 3, (8, 2)) * 0.125
    kl = kl.reshape(1, 8, 1, 2).astype(np.float32)
    ql = (30 + rng.integers(-4, 5, (1, 4, 1, 2)) * 0.125).astype(np.float32)
    vl = randn(1, 8, 1, 3)
    add("large_positive_logits", ql, kl, vl)
    add("large_negative_logits", -ql, kl, vl)
    add("large_logits_causal", ql, kl, vl, causal="bottom-right")

    for hq, hkv in ((6, 2), (4, 1)):
        c8 = qkv(2, 7, 11, hq, hkv, 8, 5)
        tag = "gqa_%d_%d" % (hq, hkv)
        add(tag, *c8)
        add(tag + "_causal", *c8, causal="bottom-right")
        add(tag + "_fp16", *c8, dtype="fp16")
        add(tag + "_causal_fp16", *c8, dtype="fp16", causal="bottom-right")

    for sq, sk in ((9, 12), (12, 9)):
        c9 = qkv(1, sq, sk, 2, 1, 4, 3)
        for win in ((2, 0), (0, 0), (3, 2), (-1, 1), (1, -1)):
            add("window_%d_%d_sq%d_sk%d" % (win + (sq, sk)), *c9, window=win)
        add("causal_window_3_-1_sq%d_sk%d" % (sq, sk), *c9,
            causal="bottom-right", window=(3, -1))

    seqs = [(3, 5), (0, 4), (6, 2), (2, 0)]
    cu_q = np.concatenate([[0], np.cumsum([s[0] for s in seqs])]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum([s[1] for s in seqs])]).astype(np.int32)
    pq, pk, pv = randn(cu_q[-1], 4, 6), randn(cu_k[-1], 2, 6), randn(cu_k[-1], 2, 3)
    add("packed_varlen", pq, pk, pv, cu_q=cu_q, cu_k=cu_k)
    add("packed_varlen_causal", pq, pk, pv, cu_q=cu_q, cu_k=cu_k, causal="bottom-right")
    add("packed_varlen_window", pq, pk, pv, cu_q=cu_q, cu_k=cu_k, window=(1, 1))

    add("explicit_scale", *c1, scale=0.3)
    add("explicit_scale_causal", *c8, scale=0.3, causal="bottom-right")
    c13 = qkv(1, 33, 65, 2, 1, 64, 32)
    add("dk64_dv32", *c13)
    add("dk64_dv32_causal", *c13, causal="bottom-right")
    return cases


def error_cases():
    """(name, keywords, arrays, raw files, extra args); one fault each."""
    q, k, v = qkv(1, 2, 3, 1, 1, 4, 4)
    base = {"q": q, "k": k, "v": v}
    cases = []

    def add(name, keywords, arrays=None, raw=None, extra=()):
        cases.append((name, keywords, dict(base, **(arrays or {})), raw or {}, list(extra)))

    buf = io.BytesIO()
    np.save(buf, q)
    valid_bytes = buf.getvalue()
    add("missing_q_file", ["no such", "not found", "exist", "open", "missing"],
        raw={"q": None})
    add("not_npy", ["npy", "magic", "format", "header"],
        raw={"q": rng.integers(0, 256, 200, dtype=np.uint8).tobytes()})
    add("truncated_npy", ["truncat", "short", "end of file", "eof", "size"],
        raw={"q": valid_bytes[:-10]})
    add("fortran_order", ["fortran", "column"],
        arrays={"q": np.asfortranarray(randn(1, 3, 2, 4))})
    add("int32_q", ["float32", "f4", "dtype", "type"],
        arrays={"q": np.ones((1, 2, 1, 4), dtype=np.int32)})
    add("hq_not_multiple_of_hkv", ["multiple", "divisib", "head"],
        arrays=dict(zip("qkv", qkv(1, 2, 3, 3, 2, 4, 4))))
    add("dk_mismatch", ["head", "dim", "dk", "mismatch", "shape"],
        arrays={"k": randn(1, 3, 1, 5)})
    add("head_dim_300", ["head", "dim", "dk"],
        arrays=dict(zip("qkv", qkv(1, 2, 3, 1, 1, 300, 300))))
    add("seqlens_k_above_sk", ["seqlens"],
        arrays={"seqlens-k": np.array([4], dtype=np.int32)})
    packed = {"q": randn(5, 1, 4), "k": randn(4, 1, 4), "v": randn(4, 1, 4)}
    add("cu_seqlens_q_not_zero_start", ["seqlens"],
        arrays=dict(packed, **{"cu-seqlens-q": np.array([1, 5], dtype=np.int32),
                               "cu-seqlens-k": np.array([0, 4], dtype=np.int32)}))
    add("cu_seqlens_k_decreasing", ["seqlens", "decreas", "monoton"],
        arrays=dict(packed, **{"cu-seqlens-q": np.array([0, 2, 5], dtype=np.int32),
                               "cu-seqlens-k": np.array([0, 4, 2], dtype=np.int32)}))
    add("dtype_fp8", ["dtype", "fp8"], extra=["--dtype", "fp8"])
    add("causal_sideways", ["causal", "sideways"], extra=["--causal", "sideways"])
    add("window_missing_right", ["window"], extra=["--window", "3"])
    add("unknown_flag", ["unknown", "unrecognized", "frobnicate"],
        extra=["--frobnicate", "1"])
    return cases


def check_error(keywords, arrays, raw, extra):
    d = workdir()
    args = input_args(d, {f: a for f, a in arrays.items() if f not in raw})
    for flag, data in raw.items():
        path = os.path.join(d, flag + ".npy")
        if data is not None:
            with open(path, "wb") as f:
                f.write(data)
        args += ["--" + flag, path]
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    res = run_attune(args + ["--out", out, "--lse", lse] + extra)
    err = res.stderr.strip()
    if res.returncode == 0:
        return "exit status 0"
    if res.returncode < 0:
        return "killed by signal %d" % -res.returncode
    if any(t in res.stderr + res.stdout for t in CRASH_TEXT):
        return "crash text in output: %r" % err[:200]
    if not err or "\n" in err:
        return "expected exactly one stderr line, got %r" % err[:300]
    if not any(kw in err.lower() for kw in keywords):
        return "stderr %r mentions none of %s" % (err, keywords)
    if os.path.exists(out) or os.path.exists(lse):
        return "output file created despite the error"
    return None


def main():
    global BINARY, BACKEND, TMP
    if len(sys.argv) not in (2, 4) or (len(sys.argv) == 4 and sys.argv[2:] != ["--backend", "emu"]):
        print(__doc__)
        return 2
    BINARY = os.path.abspath(sys.argv[1])
    BACKEND = "emu" if len(sys.argv) == 4 else "reference"
    results = []
    with tempfile.TemporaryDirectory(prefix="attune_attention_") as TMP:
        tests = [(n, check, a, kw) for n, a, kw in forward_cases()]
        if BACKEND == "reference":
            tests += [("error_" + n, check_error, (kws, arr, raw, extra), {})
                      for n, kws, arr, raw, extra in error_cases()]
        for name, fn, a, kw in tests:
            try:
                why = fn(*a, **kw)
            except Exception as e:  # report, never crash the harness
                why = "%s: %s" % (type(e).__name__, e)
            print(("ok %s" % name) if why is None else ("FAIL %s: %s" % (name, why)))
            results.append(why is None)
    passed = sum(results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
