#!/usr/bin/env python3
"""`attune attention --repeat N` on the recording fake driver (ATTUNE_LIBCUDA;
NVRTC compiles for real, the fake runs nothing): it plans once, uploads the
lengths and makes the workspace once, then runs on its own stream; so the
driver calls of --repeat 11 and --repeat 1 differ only by the ten runs'
launches (and the memset node of a dynamic tile scheduler), never by an allocation, free, copy, synchronization, module load
or context query. Checked for a dense
forward, a varlen forward, a paged decode with splits and packed queries over
a paged cache; it also prints the plan and a median host time.

Can fail: a planted difference (--repeat 11 against a convenience call
repeated) must be reported.

Usage: repeat_census_test.py PATH_TO_ATTUNE PATH_TO_FAKE_LIBCUDA
"""
import collections
import os
import subprocess
import sys
import tempfile

import numpy as np

from cli_support import Checks

# What each extra run may add: its launches, and the memset node that zeroes
# the Hopper forward's dynamic tile counter before its launch.
ALLOWED = {"cuLaunchKernel", "cuMemsetD32Async"}


def census(attune, args, env, log):
    if os.path.exists(log):
        os.remove(log)
    r = subprocess.run([attune] + args, env=dict(env, ATTUNE_FAKE_CUDA_LOG=log), capture_output=True, text=True,
                       timeout=300)
    calls = open(log).read().splitlines() if os.path.exists(log) else []
    return r, collections.Counter(line.split()[0] for line in calls)


def difference(more, fewer):
    """Calls by name that `more` made beyond `fewer` (negative: fewer)."""
    names = set(more) | set(fewer)
    return {n: more[n] - fewer[n] for n in names if more[n] != fewer[n]}


def main():
    attune, fake = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="attune_repeat_") as tmp:
        env = dict(os.environ, ATTUNE_LIBCUDA=fake, ATTUNE_CACHE_DIR=os.path.join(tmp, "cache"),
                   ATTUNE_TUNING_DB=os.path.join(tmp, "none.db"))
        env.pop("ATTUNE_FAKE_CUDA_FAIL", None)
        log = os.path.join(tmp, "driver.log")
        rng = np.random.default_rng(3)

        def save(name, array):
            path = os.path.join(tmp, name + ".npy")
            np.save(path, array)
            return path

        dense = ["--q", save("q", rng.standard_normal((2, 48, 4, 64)).astype(np.float32)),
                 "--k", save("k", rng.standard_normal((2, 80, 2, 64)).astype(np.float32)),
                 "--v", save("v", rng.standard_normal((2, 80, 2, 64)).astype(np.float32)), "--causal", "bottom-right"]
        varlen = ["--q", save("qp", rng.standard_normal((30, 4, 64)).astype(np.float32)),
                  "--k", save("kp", rng.standard_normal((50, 2, 64)).astype(np.float32)),
                  "--v", save("vp", rng.standard_normal((50, 2, 64)).astype(np.float32)),
                  "--cu-seqlens-q", save("cuq", np.array([0, 10, 30], np.int32)),
                  "--cu-seqlens-k", save("cuk", np.array([0, 20, 50], np.int32))]
        pool = rng.standard_normal((12, 16, 2, 64)).astype(np.float32)
        table = save("table", np.array([[3, 7, 1, 9], [0, 2, 11, 5]], np.int32))
        paged = ["--k-cache", save("kc", pool), "--v-cache", save("vc", pool), "--block-table", table,
                 "--page-size", "16", "--cache-seqlens", save("lens", np.array([60, 33], np.int32)),
                 "--causal", "bottom-right"]
        decode = ["--q", save("qd", rng.standard_normal((2, 1, 4, 64)).astype(np.float32))] + paged + ["--splits", "3"]
        mixed = ["--q", save("qm", rng.standard_normal((7, 4, 64)).astype(np.float32)),
                 "--cu-seqlens-q", save("cum", np.array([0, 1, 7], np.int32))] + paged + ["--splits", "2"]
        cases = {"dense forward": dense, "varlen forward": varlen, "paged decode, 3 splits": decode,
                 "packed queries over a paged cache": mixed}
        for name, flags in cases.items():
            base = ["attention", "--backend", "cuda", "--out", os.path.join(tmp, "o.npy")] + flags
            r1, one = census(attune, base + ["--repeat", "1"], env, log)
            r11, eleven = census(attune, base + ["--repeat", "11"], env, log)
            ok = r1.returncode == 0 and r11.returncode == 0
            checks.check(ok, "%s: --repeat 1 and 11 run: %s" % (name, (r1.stderr + r11.stderr).strip()[-300:]))
            if not ok:
                continue
            diff = difference(eleven, one)
            launches = diff.get("cuLaunchKernel", 0)
            checks.check(set(diff) <= ALLOWED and launches > 0 and launches % 10 == 0,
                         "%s: --repeat 11 against 1 differs only by launches: %s" % (name, diff))
            checks.check("host time per run: median" in r11.stdout and "plan: " in r11.stdout,
                         "%s: prints the plan and the median host time: %s" % (name, r11.stdout.strip()))
        # Planted: ten more convenience calls of the varlen forward copy and
        # synchronize each time; the same comparison must see it.
        base = ["attention", "--backend", "cuda", "--out", os.path.join(tmp, "o.npy")] + varlen
        _, single = census(attune, base, env, log)
        repeated = collections.Counter({n: c * 11 for n, c in single.items()})
        diff = difference(repeated, single)
        checks.check(not set(diff) <= ALLOWED, "planted: repeated convenience calls show copies: %s" % diff)
        r, _ = census(attune, base + ["--repeat", "-2"], env, log)
        checks.check(r.returncode != 0 and "--repeat" in r.stderr, "--repeat -2 is refused: %s" % r.stderr.strip())
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
