#!/usr/bin/env python3
"""`attune attention` with a KV cache, as a serving engineer tries it:
split-KV decode over contiguous and paged caches against an independent
NumPy fp64 computation.

Usage: python3 decode_test.py PATH_TO_ATTUNE

  attune attention --backend reference|emu --q Q.npy --k-cache K.npy --v-cache V.npy
      --cache-seqlens S.npy [--block-table T.npy --page-size P] [--splits N]
      --causal bottom-right --out O.npy --lse LSE.npy
  * Contiguous cache: K [B,Smax,Hkv,Dk], V [B,Smax,Hkv,Dv]. Paged: page pools
    K [pages,P,Hkv,Dk], V [pages,P,Hkv,Dv] and an int32 block table
    [B,max_pages]: key j of sequence b is row j % P of page T[b, j // P].
  * Sequence b holds S[b] keys; bottom-right causal aligns its Sq queries
    with the last S[b] keys.
  * The emu backend must meet FlashAttention's accuracy rule (twice the
    naive storage-dtype error plus 1e-5); the reference agrees to 2e-6.
FlashAttention's split-KV shapes (Sq x Sk) 1x339, 3x1024, 64x800, 3x799,
16x2000 with GQA 8:1 and splits 1, 2, 3, 5, 17 (every shape with every split
count on a paged or a contiguous cache); then bad inputs, each refused with
one line and no output written.
"""
import os
import sys
import tempfile

import numpy as np

from cli_support import Checks

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_families_test as fam  # noqa: E402  (the NumPy reference and checks)

SHAPES = [(1, 339), (3, 1024), (64, 800), (3, 799), (16, 2000)]
SPLITS = [1, 2, 3, 5, 17]
rng = np.random.default_rng(77)


def make_cache(sq, sk, paged, page_size, hq=8, hkv=1, d=32, batch=2):
    lens = np.array([sk, max(sk - 37, sq)], dtype=np.int32)[:batch]
    q = rng.standard_normal((batch, sq, hq, d)).astype(np.float32)
    k = rng.standard_normal((batch, sk, hkv, d)).astype(np.float32)
    v = rng.standard_normal((batch, sk, hkv, d)).astype(np.float32)
    arrays = {"q": q, "cache-seqlens": lens}
    if not paged:
        arrays.update({"k-cache": k, "v-cache": v})
        return arrays, (q, k, v, lens), []
    max_pages = -(-sk // page_size)
    pages = batch * max_pages + 5
    order = rng.permutation(pages).astype(np.int32)
    table = order[: batch * max_pages].reshape(batch, max_pages)
    k_pool = rng.standard_normal((pages, page_size, hkv, d)).astype(np.float32)  # unused rows: noise
    v_pool = rng.standard_normal((pages, page_size, hkv, d)).astype(np.float32)
    for b in range(batch):
        for j in range(sk):
            k_pool[table[b, j // page_size], j % page_size] = k[b, j]
            v_pool[table[b, j // page_size], j % page_size] = v[b, j]
    arrays.update({"k-cache": k_pool, "v-cache": v_pool, "block-table": table})
    return arrays, (q, k, v, lens), ["--page-size", str(page_size)]


def run_case(backend, sq, sk, splits, paged, page_size=16):
    d = fam.workdir()
    arrays, (q, k, v, lens), extra = make_cache(sq, sk, paged, page_size)
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    args = fam.input_args(d, arrays) + extra + ["--causal", "bottom-right", "--out", out, "--lse", lse]
    if splits is not None:
        args += ["--splits", str(splits)]
    res = fam.run_attune(args, backend)
    if res.returncode != 0:
        return "exit %d: %s" % (res.returncode, res.stderr.strip()[:300])
    want_o, want_lse = fam.reference(q, k, v, "bf16", "bottom-right", None, None, lens)
    got_o, got_lse = np.load(out), np.load(lse)
    if backend == "reference":
        return fam.compare("O", got_o, want_o, want_o.shape) or fam.compare("LSE", got_lse, want_lse, want_lse.shape)
    naive_o, naive_lse = fam.reference(q, k, v, "bf16", "bottom-right", None, None, lens, naive="bf16")
    return fam.accuracy_rule("O", got_o, want_o, naive_o) or fam.accuracy_rule("LSE", got_lse, want_lse, naive_lse)


def error_cases():
    """(name, keywords, arrays, extra flags) of inputs that must be refused."""
    arrays, _, extra = make_cache(2, 100, True, 16)
    cases = []
    bad = dict(arrays)
    bad["block-table"] = arrays["block-table"].copy()
    bad["block-table"][1, 0] = 999
    cases.append(("page index out of range", ["block_table[1, 0]"], bad, extra))
    cases.append(("page size disagrees with the pool", ["page pool", "page_size"], arrays, ["--page-size", "32"]))
    cases.append(("block table without a page size", ["--block-table", "--page-size"], arrays, []))
    flat = dict(arrays)
    flat["block-table"] = arrays["block-table"].reshape(-1)
    cases.append(("1-D block table", ["block_table", "2-d"], flat, extra))
    cases.append(("too many splits", ["--splits"], arrays, extra + ["--splits", "300"]))
    cases.append(("negative splits", ["--splits"], arrays, extra + ["--splits", "-1"]))
    lens = dict(arrays)
    lens["cache-seqlens"] = np.array([100, 500], dtype=np.int32)
    cases.append(("cache length beyond the table", ["seqlens_k[1]", "at most 112", "max_pages x page_size"], lens,
                  extra))
    rows = dict(arrays)
    rows["block-table"] = np.concatenate([arrays["block-table"]] * 2)
    cases.append(("block table rows != B", ["block_table has 4 rows", "B = 2"], rows, extra))
    contiguous, _, _ = make_cache(2, 50, False, 16)
    both = dict(contiguous)
    both["k"] = contiguous["k-cache"]
    cases.append(("--k and --k-cache together", ["excludes"], both, []))
    only_k = dict(contiguous)
    del only_k["v-cache"]
    cases.append(("--k-cache without --v-cache", ["requires", "v-cache"], only_k, []))
    return cases


def check_error(keywords, arrays, extra):
    d = fam.workdir()
    out, lse = os.path.join(d, "o.npy"), os.path.join(d, "lse.npy")
    res = fam.run_attune(fam.input_args(d, arrays) + extra + ["--out", out, "--lse", lse], "emu")
    err = res.stderr.strip()
    if res.returncode == 0:
        return "exit status 0"
    if res.returncode < 0 or any(t in res.stderr + res.stdout for t in fam.CRASH_TEXT):
        return "crashed: %r" % err[:200]
    if not err or "\n" in err:
        return "expected exactly one stderr line, got %r" % err[:300]
    if not all(kw.lower() in err.lower() for kw in keywords):
        return "stderr %r does not mention all of %s" % (err, keywords)
    if os.path.exists(out) or os.path.exists(lse):
        return "output file created despite the error"
    return None


def main():
    fam.BINARY = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="attune_decode_") as tmp:
        fam.TMP = tmp
        results = Checks()  # each result printed as it comes
        for n, (sq, sk) in enumerate(SHAPES):
            for m, splits in enumerate(SPLITS):
                paged = (n + m) % 2 == 0
                results.append(("emu %dx%d %s splits %d" % (sq, sk, "paged" if paged else "contiguous", splits),
                                run_case("emu", sq, sk, splits, paged, 16 if m % 2 else 64)))
            results.append(("emu %dx%d paged, built-in splits" % (sq, sk), run_case("emu", sq, sk, None, True)))
            results.append(("reference %dx%d paged" % (sq, sk), run_case("reference", sq, sk, 3, True)))
        for name, keywords, arrays, extra in error_cases():
            results.append(("refused: " + name, check_error(keywords, arrays, extra)))
    return results.finish()


if __name__ == "__main__":
    sys.exit(main())
