#!/usr/bin/env python3
"""Injected GPU faults through the recording fake driver (ATTUNE_LIBCUDA,
ATTUNE_FAKE_CUDA_FAIL=NAME:N:CODE; NVRTC compiles for real, the fake hands
out host memory and runs nothing, so every candidate fails the gate with
"wrong result", which is a measurement like any other):

- out of memory (cuMemAlloc -> 2) at plan time, `attune attention --backend
  cuda`: one line naming cuMemAlloc and CUDA_ERROR_OUT_OF_MEMORY, no output
  file, every allocation made before it freed;
- a launch failure (cuLaunchKernel -> 719, sticky) in `attune attention`: the
  message says the context is unusable, and nothing reaches the driver after
  it (the lost context fails fast);
- out of memory inside an in-process sweep: that candidate alone is recorded
  failed with CUDA_ERROR_OUT_OF_MEMORY, the sweep goes on;
- a launch failure inside an in-process sweep (`--isolate no`): the candidate
  is recorded failed with CUDA_ERROR_LAUNCH_FAILED, the sweep stops instead
  of recording every later candidate with the same error, and a rerun
  resumes with nothing measured twice;
- a sticky illegal address (700) in one candidate of `attune tune --backend
  cuda --isolate yes`: that candidate is recorded failed with
  CUDA_ERROR_ILLEGAL_ADDRESS, the next candidate runs in a new worker (and
  fails only the gate), the sweep finishes, `attune db verify` passes, and
  every row measured before is unchanged.

Can fail: each check prints FAIL with what it saw. The checker of the last
case is also run on two planted mishandlings (a worker not replaced, whose
poisoned context fails the next candidate with the same error; a row
measured before lost) and must report both, else the test fails.

Usage: gpu_faults_test.py PATH_TO_ATTUNE PATH_TO_FAKE_LIBCUDA
"""
import os
import sqlite3
import subprocess
import sys

import numpy as np

from cli_support import cli_test

TUNE = ["tune", "--backend", "cuda", "--head-dims", "32", "--max-variants", "4", "--repetitions", "1", "--quiet"]

# Runs the real worker; the one candidate named in $FAULT_VARIANT on
# $FAULT_SEQLEN gets a sticky illegal address at its first launch. Each
# start appends its pid to $WORKER_LOG.
WRAPPER = """#!/bin/bash
echo $$ >> "$WORKER_LOG"
args=" $* "
if [[ "$args" == *" --variant $FAULT_VARIANT "* && "$args" == *" --seqlen $FAULT_SEQLEN "* ]]; then
  export ATTUNE_FAKE_CUDA_FAIL=cuLaunchKernel:1:700
fi
exec "%s" "$@"
"""


def rows_of(db):
    """(variant, seqlen_q, ok, error) of every measurement, in the order recorded."""
    con = sqlite3.connect(db)
    try:
        return con.execute("select v.variant_id, p.seqlen_q, m.ok, coalesce(m.error, ''), m.measured_at from "
                           "measurements m join variants v on v.id = m.variant join problems p on p.id = m.problem "
                           "order by m.id").fetchall()
    finally:
        con.close()


def check_isolated_fault(before, after, variant, seqlen, workers):
    """What a sweep with one faulting candidate must leave; a list of failures."""
    why = []
    lost = [r for r in before if r not in after]
    if lost:
        why.append("rows measured before were lost or changed: %s" % lost)
    faulty = [r for r in after if r[0] == variant and r[1] == seqlen]
    if len(faulty) != 1 or faulty[0][2] != 0 or "CUDA_ERROR_ILLEGAL_ADDRESS" not in faulty[0][3]:
        why.append("the faulting candidate is not recorded failed with CUDA_ERROR_ILLEGAL_ADDRESS: %s" % faulty)
    new = [r for r in after if r not in before]
    others = [r for r in new if not (r[0] == variant and r[1] == seqlen)]
    poisoned = [r for r in others if "ILLEGAL_ADDRESS" in r[3]]
    if poisoned:
        why.append("later candidates failed with the fault too (worker not replaced): %s" % poisoned)
    if len(others) != 3 or any(not r[3].startswith("wrong result") for r in others):
        why.append("the other candidates of the sweep were not each measured once: %s" % others)
    if workers is not None and (len(workers) != len(new) or len(set(workers)) != len(workers)):
        why.append("%d worker processes (%d distinct) for %d candidates" % (len(workers), len(set(workers)), len(new)))
    return why


def main():
    with cli_test("attune_gpu_faults_") as ((attune, fake), checks, tmp):
        check = checks.check
        base = dict(os.environ, ATTUNE_LIBCUDA=fake, ATTUNE_CACHE_DIR=os.path.join(tmp, "cache"))
        base.pop("ATTUNE_FAKE_CUDA_FAIL", None)
        log = os.path.join(tmp, "driver.log")

        def run(args, fail=None, env=None, timeout=300):
            if os.path.exists(log):
                os.remove(log)
            e = dict(env or base, ATTUNE_FAKE_CUDA_LOG=log)
            if fail:
                e["ATTUNE_FAKE_CUDA_FAIL"] = fail
            r = subprocess.run([attune] + args, env=e, capture_output=True, text=True, timeout=timeout)
            calls = open(log).read().splitlines() if os.path.exists(log) else []
            return r, calls

        rng = np.random.default_rng(5)
        for name in ("q", "k", "v"):
            np.save(os.path.join(tmp, name + ".npy"), rng.standard_normal((1, 64, 2, 64)).astype(np.float32))
        out = os.path.join(tmp, "o.npy")
        attention = ["attention", "--backend", "cuda", "--q", os.path.join(tmp, "q.npy"), "--k",
                     os.path.join(tmp, "k.npy"), "--v", os.path.join(tmp, "v.npy"), "--out", out]

        # Healthy first: the call works on the fake (and fills the cache).
        r, calls = run(attention)
        allocs = sum(1 for c in calls if c.startswith("cuMemAlloc_v2"))
        check(r.returncode == 0 and allocs >= 2, "attention on the fake driver: rc %d, %d allocations; %s" % (
            r.returncode, allocs, r.stderr.strip()))
        os.remove(out) if os.path.exists(out) else None

        # Out of memory at plan time, at the first, a middle and the last allocation.
        for nth in sorted({1, (allocs + 1) // 2, allocs}):
            r, calls = run(attention, fail="cuMemAlloc_v2:%d:2" % nth)
            lines = r.stderr.strip().splitlines()
            made = sum(1 for c in calls if c.startswith("cuMemAlloc_v2")) - 1
            freed = sum(1 for c in calls if c.startswith("cuMemFree_v2"))
            check(r.returncode != 0 and len(lines) == 1 and "cuMemAlloc" in lines[0] and
                  "CUDA_ERROR_OUT_OF_MEMORY" in lines[0], "allocation %d out of memory: one clear line: %s" % (
                      nth, r.stderr.strip()))
            check(not os.path.exists(out), "allocation %d out of memory: no output file" % nth)
            check(made == freed, "allocation %d out of memory: %d allocations made, %d freed" % (nth, made, freed))

        # A launch failure: sticky; nothing reaches the driver after it.
        r, calls = run(attention, fail="cuLaunchKernel:1:719")
        check(r.returncode != 0 and "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED" in r.stderr and
              "unusable" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
              "launch failure: one line naming it and the lost context: %s" % r.stderr.strip())
        check(calls and calls[-1].startswith("cuLaunchKernel"),
              "launch failure: no driver call after it (fail fast); last calls: %s" % calls[-3:])
        check(not os.path.exists(out), "launch failure: no output file")

        # Out of memory inside an in-process sweep: that candidate alone fails.
        db = os.path.join(tmp, "probe.db")
        r, calls = run(TUNE + ["--db", db, "--seqlens", "48", "--isolate", "no"])
        per_candidate = sum(1 for c in calls if c.startswith("cuMemAlloc_v2")) // 4
        check(r.returncode == 0 and len(rows_of(db)) == 4 and per_candidate > 0,
              "a healthy in-process sweep: %s, %d allocations per candidate" % (r.stdout.strip(), per_candidate))
        db = os.path.join(tmp, "oom.db")
        r, _ = run(TUNE + ["--db", db, "--seqlens", "48", "--isolate", "no"],
                   fail="cuMemAlloc_v2:%d:2" % (per_candidate + 2))
        rows = rows_of(db)
        oom = [x for x in rows if "CUDA_ERROR_OUT_OF_MEMORY" in x[3]]
        check(r.returncode == 0 and len(rows) == 4 and len(oom) == 1 and rows[1] == oom[0] and
              all(x[3].startswith("wrong result") for x in rows if x not in oom),
              "out of memory in the 2nd candidate of a sweep: only it failed with the error: %s %s" % (
                  [x[3][:60] for x in rows], r.stderr.strip()[-200:]))

        # A launch failure in an in-process sweep: recorded, then the sweep stops; a rerun resumes.
        db = os.path.join(tmp, "inprocess.db")
        r, _ = run(TUNE + ["--db", db, "--seqlens", "48", "--isolate", "no"], fail="cuLaunchKernel:2:719")
        rows = rows_of(db)
        check(r.returncode != 0 and "lost the CUDA context" in r.stderr and "rerun" in r.stderr,
              "in-process launch failure stops the sweep with a reason: rc %d %s" % (
                  r.returncode, r.stderr.strip()[-300:]))
        check(len(rows) == 2 and rows[0][3].startswith("wrong result") and "CUDA_ERROR_LAUNCH_FAILED" in rows[1][3],
              "in-process launch failure: the first candidate measured, the second failed with the error, no "
              "later one recorded: %s" % [x[3][:60] for x in rows])
        r2, _ = run(TUNE + ["--db", db, "--seqlens", "48", "--isolate", "no"])
        after = rows_of(db)
        verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
        check(r2.returncode == 0 and "already measured 2" in r2.stdout and len(after) == 4 and after[:2] == rows and
              verify.returncode == 0, "rerun after the lost context resumes: %s; verify %s" % (
                  r2.stdout.strip(), (verify.stdout + verify.stderr).strip()))

        # A sticky illegal address in one isolated candidate.
        wrapper = os.path.join(tmp, "worker.sh")
        with open(wrapper, "w") as f:
            f.write(WRAPPER % attune)
        os.chmod(wrapper, 0o755)
        db = os.path.join(tmp, "isolated.db")
        r, _ = run(TUNE + ["--db", db, "--seqlens", "48", "--isolate", "yes"])
        before = rows_of(db)
        variants = [x[0] for x in before]
        check(r.returncode == 0 and len(before) == 4, "isolated sweep on one problem: %s" % r.stdout.strip())
        workers_log = os.path.join(tmp, "workers.log")
        env = dict(base, ATTUNE_TUNE_WORKER=wrapper, WORKER_LOG=workers_log, FAULT_VARIANT=variants[1],
                   FAULT_SEQLEN="64")
        r, _ = run(TUNE + ["--db", db, "--seqlens", "48,64", "--isolate", "yes"], env=env)
        after = rows_of(db)
        workers = open(workers_log).read().split() if os.path.exists(workers_log) else []
        check(r.returncode == 0 and "failed 4, already measured 4" in r.stdout,
              "the sweep with a faulting candidate finishes: rc %d %s %s" % (
                  r.returncode, r.stdout.strip(), r.stderr.strip()[-200:]))
        for why in check_isolated_fault(before, after, variants[1], 64, workers) or [None]:
            checks.result("sticky illegal address in an isolated candidate", why)
        verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
        check(verify.returncode == 0, "db verify after the fault: " + (verify.stdout + verify.stderr).strip())
        shown = subprocess.run([attune, "db", "--db", db, "show", variants[1]], capture_output=True, text=True)
        check("CUDA_ERROR_ILLEGAL_ADDRESS" in shown.stdout, "db show names the error: " + shown.stdout.strip())

        # Planted mishandlings: the checker must catch them.
        later = [i for i, x in enumerate(after) if x not in before and x[0] != variants[1]][0]
        not_replaced = list(after)
        not_replaced[later] = after[later][:3] + ("cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS",) + after[later][4:]
        caught = check_isolated_fault(before, not_replaced, variants[1], 64, None)
        check(any("worker not replaced" in w for w in caught), "planted: a worker not replaced is reported: %s" % caught)
        caught = check_isolated_fault(before, after[1:], variants[1], 64, workers)
        check(any("measured before were lost" in w for w in caught), "planted: a lost row is reported: %s" % caught)
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
