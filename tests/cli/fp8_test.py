#!/usr/bin/env python3
"""FP8 inputs on `attune attention` as a user tries them, against an
independent NumPy fp64 statement of docs/contract.md ("FP8 inputs"): the
e4m3 and e5m2 bytes decoded here from the formats' definitions (not from
the C++), each input its stored value times its descale.

Usage: python3 fp8_test.py PATH_TO_ATTUNE

  attune attention --dtype e4m3|e5m2 [--q-descale X] [--k-descale X] [--v-descale X] ...
  attune attention --kv-dtype e4m3 --k-cache K --v-cache V [--block-table T --page-size P] [--k-scale X] ...
  * X: a number, or a float .npy of [Hkv] or [B, Hkv] values;
  * the inputs are rounded to the fp8 format (here they are fp8 values
    already, so nothing is lost); the kernels write O in bf16 for fp8 Q, K, V;
  * reference: to 1e-5 of the fp64 attention on the dequantized inputs;
    emu: within bf16's accuracy of it.
Also: bad fp8 flags are refused with one line naming what was wrong.
"""
import os
import sys

import numpy as np

from cli_support import cli_test, runner, visible

rng = np.random.default_rng(3535)


def decode(byte, fmt):
    """The value of an fp8 byte: sign, exponent, mantissa with the format's bias (e4m3: no infinities)."""
    mbits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    sign = -1.0 if byte & 0x80 else 1.0
    exp = (byte & 0x7F) >> mbits
    man = byte & ((1 << mbits) - 1)
    if exp == 0:
        return sign * man * 2.0 ** (1 - bias - mbits)
    return sign * (1 + man / 2.0 ** mbits) * 2.0 ** (exp - bias)


def fp8_values(shape, fmt, spread=4.0):
    """Random finite fp8 values of magnitude below `spread` (exactly representable, so rounding keeps them)."""
    table = np.array([decode(b, fmt) for b in range(256)])
    finite = np.flatnonzero(np.isfinite(table) & (np.abs(table) < spread) & ~((np.arange(256) & 0x7F) ==
                                                                              (0x7F if fmt == "e4m3" else 0x7C)))
    return table[rng.choice(finite, size=shape)]


def bf16(x):
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def attention(q, k, v, causal):
    """fp64 O [B, Sq, Hq, Dv] and LSE [B, Hq, Sq] of dense inputs (GQA by head groups)."""
    b_, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    o = np.zeros((b_, sq, hq, v.shape[3]))
    lse = np.zeros((b_, hq, sq))
    vis = visible(sq, sk, causal, None)
    for b in range(b_):
        for h in range(hq):
            g = h // (hq // hkv)
            s = np.where(vis, q[b, :, h] @ k[b, :, g].T / np.sqrt(d), -np.inf)
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            lse[b, h] = (m + np.log(e.sum(axis=1, keepdims=True)))[:, 0]
            o[b, :, h] = (e / e.sum(axis=1, keepdims=True)) @ v[b, :, g]
    return o, lse


def main():
    with cli_test("attune_fp8_") as ((attune,), checks, tmp):
        run = runner(attune, timeout=600)

        def save(name, x):
            path = os.path.join(tmp, name + ".npy")
            np.save(path, np.asarray(x, np.float32))
            return path

        def out(name):
            return os.path.join(tmp, name + ".npy")

        def call(what, args):
            r = run("attention", *args, "--out", out("o"), "--lse", out("lse"))
            if not checks.check(r.returncode == 0, f"{what} runs{': ' + r.stderr.strip() if r.returncode else ''}"):
                return None
            return np.load(out("o")).astype(np.float64), np.load(out("lse")).astype(np.float64)

        # fp8 Q, K and V: B 2, GQA 4 -> 2, descales per tensor, per (batch, KV head) and per KV head.
        bsz, sq, sk, hq, hkv, d = 2, 19, 37, 4, 2, 32
        kd = np.array([[0.5, 0.125], [2.0, 1.25]])
        for fmt, causal in (("e4m3", "bottom-right"), ("e5m2", None)):
            q, k, v = (fp8_values(s, fmt) for s in ((bsz, sq, hq, d), (bsz, sk, hkv, d), (bsz, sk, hkv, d)))
            qd, vd = 0.25, np.array([3.0, 0.5])
            paths = ["--q", save("q", q), "--k", save("k", k), "--v", save("v", v), "--dtype", fmt,
                     "--q-descale", str(qd), "--k-descale", save("kd", kd), "--v-descale", save("vd", vd)]
            if causal:
                paths += ["--causal", causal]
            o, lse = attention(q * qd, k * kd[:, None, :, None], v * vd[None, None, :, None], causal)
            for backend, tol in (("reference", 1e-5), ("emu", 2e-2)):
                got = call(f"{backend} --dtype {fmt}", ["--backend", backend] + paths)
                if got is not None:
                    err = np.abs(got[0] - o).max() / max(1.0, np.abs(o).max())
                    checks.check(err <= tol, f"{backend} --dtype {fmt}: O of the dequantized inputs (error {err:.2e})")
                    checks.check(np.abs(got[1] - lse).max() <= 1e-3, f"{backend} --dtype {fmt}: LSE")

        # An fp8 paged cache under bf16 queries, split three ways, vLLM's scale names.
        page, pages = 16, 11
        lens = np.array([70, 33], np.int32)
        kc, vc = (fp8_values((pages, page, hkv, d), "e4m3") for _ in range(2))
        table = rng.permutation(pages)[:2 * 5].reshape(2, 5).astype(np.int32)
        qq = bf16(rng.standard_normal((2, 3, hq, d)))
        ks, vs = 0.375, 2.5
        dense_k = np.zeros((2, 80, hkv, d))
        dense_v = np.zeros((2, 80, hkv, d))
        for b in range(2):
            for j in range(lens[b]):
                dense_k[b, j] = kc[table[b, j // page], j % page] * ks
                dense_v[b, j] = vc[table[b, j // page], j % page] * vs
        cache = ["--q", save("qq", qq), "--k-cache", save("kc", kc), "--v-cache", save("vc", vc),
                 "--block-table", out("table"), "--page-size", str(page), "--cache-seqlens", out("lens"),
                 "--kv-dtype", "e4m3", "--k-scale", str(ks), "--v-scale", str(vs), "--causal", "bottom-right"]
        np.save(out("table"), table)
        np.save(out("lens"), lens)
        for backend, splits, tol in (("reference", None, 1e-5), ("emu", "3", 2e-2), ("emu", "1", 2e-2)):
            got = call(f"{backend} decode over an e4m3 paged cache" + (f", {splits} splits" if splits else ""),
                       ["--backend", backend] + cache + (["--splits", splits] if splits else []))
            if got is None:
                continue
            err = 0.0
            for b in range(2):
                n = lens[b]
                o, _ = attention(qq[b:b + 1], dense_k[b:b + 1, :n], dense_v[b:b + 1, :n], "bottom-right")
                err = max(err, np.abs(got[0][b] - o[0]).max() / max(1.0, np.abs(o).max()))
            checks.check(err <= tol, f"{backend} fp8 cache ({splits or 'no'} splits): O of the dequantized cache "
                                     f"(error {err:.2e})")

        base = ["--backend", "reference", "--q", save("q16", bf16(rng.standard_normal((1, 4, 2, 32)))),
                "--k", save("k16", bf16(rng.standard_normal((1, 6, 2, 32)))),
                "--v", save("v16", bf16(rng.standard_normal((1, 6, 2, 32)))), "--out", out("o")]
        np.save(out("bad_scales"), np.ones((3,), np.float32))
        for flags, words in ((["--kv-dtype", "bf16"], "--kv-dtype: got 'bf16'; expected e4m3 or e5m2"),
                             (["--dtype", "fp8"], "--dtype: got 'fp8'; expected fp16, bf16, e4m3 or e5m2"),
                             (["--q-descale", "2"], "--q-descale: got '2'; expected --dtype e4m3 or e5m2"),
                             (["--k-scale", "2"], "--k-descale: got '2'; expected --dtype or --kv-dtype e4m3"),
                             (["--dtype", "e4m3", "--k-descale", out("bad_scales")], "[Hkv] = [2]"),
                             (["--dtype", "e4m3", "--v-descale", "nan"], "finite descale factors"),
                             (["--dtype", "e4m3", "--dropout", "0.1"], "no dropout with fp8 inputs")):
            r = run("attention", *base, *flags)
            lines = r.stderr.strip().splitlines()
            checks.check(r.returncode != 0 and len(lines) == 1 and words in lines[0],
                         f"{' '.join(flags)} is refused in one line naming it: {r.stderr.strip()!r}")
        r = run("attention", *base[:-2], "--dtype", "e4m3", "--backward", "--do", base[3], "--dq", out("dq"),
                "--dk", out("dk"), "--dv", out("dv"))
        checks.check(r.returncode != 0 and "fp8 is a forward and KV-cache format" in r.stderr,
                     f"--backward with fp8 inputs is refused: {r.stderr.strip()!r}")
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
