#!/usr/bin/env python3
"""The GPU check rehearsed without a GPU (tools/gpu_check.sh --dry-run): every
step on the emulator and the recording fake driver, tiny shapes, short limits.

1. A run with a planted hanging kernel and a planted sticky fault (in two
   flash_fwd_sm90 correctness jobs): the run goes on, names both culprits
   with their variant and case, later jobs and later steps still run and
   report, and DIR holds report.md, summary.txt and run.tgz. A third job's
   output is planted wrong (one 8 x 8 group per tile): the report locates it
   (worst element, the group map), compares with the emulator ("GPU !=
   emulator") and keeps the arrays in run.tgz.
2. A run killed with SIGKILL (its whole process group) at a random moment:
   DIR/report.md is readable and run.tgz opens, holding the record of every
   step the report says finished, and nothing of the run is left running.

  gpu_check_rehearsal_test.py BUNDLE   (an unpacked bundle or its .tar.xz, from tools/gpu_bundle.sh)
"""
import json
import os
import random
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HANG = "sm90.d64.bf16.causal.small"
STICKY = "sm90.d64.fp16.none.small"
WRONG = "sm90.d64.fp16.varlen.small"
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def gpu_check(bundle, out, *extra, **popen):
    cmd = ["bash", os.path.join(ROOT, "tools", "gpu_check.sh"), "--dry-run", "--out", out, *extra, bundle]
    env = dict(os.environ)
    env.pop("OUT", None)
    return cmd, env


def tgz_names(path):
    with tarfile.open(path) as t:
        return t.getnames()


def step_table(report):
    """{step: status} from report.md's step table."""
    out = {}
    lines = report.splitlines()
    start = lines.index("| step | status | seconds | limit |") + 2
    for line in lines[start:]:
        m = re.match(r"\| (\w+) \| ([^|]+) \| [^|]* \| [^|]* \|$", line)
        if not m:
            break
        out[m.group(1)] = m.group(2).strip()
    return out


def planted_run(bundle, tmp):
    out = os.path.join(tmp, "planted")
    cmd, env = gpu_check(bundle, out)
    cmd[3:3] = ["--deadline", "400", "--job-limit", "25", "--plant", "hang@" + HANG, "--plant", "sticky@" + STICKY,
                "--plant", "wrong@" + WRONG, "--work", os.path.join(tmp, "planted-work")]
    start = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    took = time.time() - start
    print(r.stdout[-6000:])
    print(r.stderr[-3000:], file=sys.stderr)
    check(r.returncode == 1, "the run ends with status 1 (a step did not pass), got %s, in %.0f s" % (r.returncode, took))
    for name in ("report.md", "summary.txt", "run.tgz"):
        check(os.path.isfile(os.path.join(out, name)), "DIR/%s exists" % name)
    report = open(os.path.join(out, "report.md")).read()
    steps = step_table(report)
    print("steps:", steps)
    check(steps.get("sm90", "").startswith("FAILED"), "the sm90 step failed (planted faults): %s" % steps.get("sm90"))
    for later in ("ceilings", "forward", "decode", "backward", "dropout", "fp8", "python"):
        check(steps.get(later) == "ok", "the later step %s still ran and passed: %s" % (later, steps.get(later)))
    # The culprits, named with variant and case.
    hang_block = report[report.find("**" + HANG + "**"):][:1500]
    check("**%s** (hung)" % HANG in report, "the hanging job is named as hung")
    check("flash_fwd_sm90/" in hang_block or "\"d\": 64" in hang_block, "the hung job's case or variant is given")
    sticky_block = report[report.find("**" + STICKY + "**"):][:1500]
    check("**%s** (error)" % STICKY in report, "the sticky fault's job is named")
    check("CUDA_ERROR_ILLEGAL_ADDRESS" in sticky_block, "with the sticky error's message")
    # Jobs after each culprit ran in a fresh worker.
    sm90 = json.load(open(os.path.join(tmp, "planted-work", "sm90.json")))
    status = {r["name"]: r["status"] for r in sm90["results"]}
    check(status.get(HANG) == "hung" and status.get(STICKY) == "error", "culprits recorded: %s" % status)
    check(status.get(WRONG) == "failed", "the planted wrong output failed its check: %s" % status.get(WRONG))
    after = [n for n in status if n not in (HANG, STICKY, WRONG)]
    check(after and all(status[n] == "ok" for n in after), "every other sm90 job passed: %s" % status)
    wrong_block = report[report.find("**" + WRONG + "**"):][:4000]
    check("GPU != emulator (model bug" in wrong_block, "the wrong output is compared with the emulator's")
    check("worst |err|" in wrong_block and "per 8 x 8 group" in wrong_block, "and located: worst element, group map")
    groups = json.load(open(os.path.join(tmp, "planted-work", "sm90.json")))
    diag = next(r for r in groups["results"] if r["name"] == WRONG)["result"]["diagnosis"]
    grid = diag["group_8x8_max"]
    check(grid[1][2] > 0.5 and all(grid[i][j] < 0.1 for i in range(8) for j in range(8) if (i, j) != (1, 2)),
          "the 8 x 8 group map points at the planted group (row group 1, column group 2)")
    check(any(n.startswith("run/npy/" + WRONG) for n in tgz_names(os.path.join(out, "run.tgz"))),
          "run.tgz holds the wrong case's arrays")
    check(HANG in r.stdout and STICKY in r.stdout, "both culprits are on stdout (one line each)")
    check("run/sm90.json" in tgz_names(os.path.join(out, "run.tgz")), "run.tgz holds the sm90 record")
    summary = open(os.path.join(out, "summary.txt")).read()
    check(HANG in summary and "HUNG" in summary, "summary.txt names the hung job")


def killed_run(bundle, tmp, seed):
    out = os.path.join(tmp, "killed")
    work = os.path.join(tmp, "killed-work")
    cmd, env = gpu_check(bundle, out, "--work", work)
    rng = random.Random(seed)
    after = rng.uniform(3.0, 45.0)
    print("killing the whole run after %.1f s (seed %d)" % (after, seed), flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(0.5)
    alive = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    check(not alive, "nothing of the run is left running: %s" % alive)
    report_path = os.path.join(out, "report.md")
    if not os.path.exists(report_path):
        check(after < 3.5, "report.md exists after the kill (killed at %.1f s)" % after)
        return
    report = open(report_path).read()
    check(report.startswith("# GPU check"), "report.md is readable")
    names = tgz_names(os.path.join(out, "run.tgz"))
    finished = [s for s, st in step_table(report).items() if st != "not run" and not st.startswith("skipped")]
    print("finished before the kill:", finished)
    for s in finished:
        check("run/%s.json" % s in names or s == "tests", "run.tgz holds the record of finished step %s" % s)


def main():
    bundle = sys.argv[1]
    seed = int(os.environ.get("ATTUNE_REHEARSAL_SEED", str(int(time.time()))))
    with tempfile.TemporaryDirectory(prefix="attune-rehearsal.") as tmp:
        planted_run(bundle, tmp)
        killed_run(bundle, tmp, seed)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
