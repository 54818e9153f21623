#!/usr/bin/env python3
"""`attune tune` killed with SIGKILL at 20 random moments of one sweep
(seeded), each kill followed by a resume that is killed in turn, then a
last resume to the end: after every kill the count of measurements equals
the count of distinct (device, problem, variant) triples, none was lost
since the kill before, and `attune db verify` passes; at the end every task
is measured exactly once. Then two tuners (two shards) writing one
database at once: nothing lost.

Can fail: each round prints FAIL with the counts it saw. The round checker
is also run on planted outcomes (a duplicated measurement, a lost one, a
failed verify) and must report each.

Usage: tune_resume_test.py PATH_TO_ATTUNE
"""
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

SWEEP = ["--backend", "emu", "--head-dims", "32", "--masks", "none,causal", "--seqlens", "64,96,128,160",
         "--batch-heads", "1x2", "--max-variants", "10", "--repetitions", "2", "--quiet"]
TASKS = 2 * 4 * 10  # masks x seqlens x variants: enough work to outlast KILLS kills
KILLS = 20


def counts(db):
    """(measurements, distinct (device, problem, variant) triples)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("select count(*) from measurements").fetchone()[0]
        distinct = con.execute(
            "select count(*) from (select distinct device, problem, variant from measurements)").fetchone()[0]
        return rows, distinct
    finally:
        con.close()


def judge(rows, distinct, previous, verify_rc):
    """None when a killed sweep left a sound database, else what is wrong."""
    if rows != distinct:
        return "%d measurements of %d distinct triples: some measured twice" % (rows, distinct)
    if rows < previous:
        return "%d measurements, %d before the kill: some lost" % (rows, previous)
    if verify_rc != 0:
        return "db verify failed"
    return None


def main():
    attune = os.path.abspath(sys.argv[1])
    rng = random.Random(1234)
    failures = 0
    for planted, args in (("duplicated", (5, 4, 3, 0)), ("lost", (3, 3, 4, 0)), ("verify", (3, 3, 3, 1))):
        caught = judge(*args) is not None
        print("%s planted %s measurement is reported" % ("ok  " if caught else "FAIL", planted))
        failures += 0 if caught else 1
    with tempfile.TemporaryDirectory(prefix="attune_resume_") as tmp:
        db = os.path.join(tmp, "killed.db")
        kills = attempts = previous = 0
        while kills < KILLS and attempts < 3 * KILLS:
            attempts += 1
            proc = subprocess.Popen([attune, "tune", "--db", db] + SWEEP,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.02, 0.6))
            if proc.poll() is not None:
                proc.wait()
                break  # the sweep finished before this kill: too few tasks for KILLS kills
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            if not os.path.exists(db):
                continue  # killed before the database was created
            rows, distinct = counts(db)
            verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
            why = judge(rows, distinct, previous, verify.returncode)
            print("%s kill %d: %d measurements (distinct %d)%s" % (
                "ok  " if why is None else "FAIL", kills, rows, distinct,
                "" if why is None else ": %s; %s" % (why, (verify.stdout + verify.stderr).strip()[-300:])))
            failures += 0 if why is None else 1
            previous = rows
        done = subprocess.run([attune, "tune", "--db", db] + SWEEP, capture_output=True, text=True, timeout=600)
        rows, distinct = counts(db)
        verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
        ok = (kills == KILLS and done.returncode == 0 and rows == TASKS and distinct == rows and
              verify.returncode == 0 and previous < TASKS)
        print("%s %d kills (of %d), then resumed: %d measurements (expected %d, distinct %d), %d before the last "
              "resume; final run: %s, verify: %s" % (
                  "ok  " if ok else "FAIL", kills, KILLS, rows, TASKS, distinct, previous, done.stdout.strip(),
                  verify.stdout.strip() or verify.stderr.strip()))
        failures += 0 if ok else 1
        # Two tuners writing one database at once (two shards): nothing lost.
        db = os.path.join(tmp, "shared.db")
        # The file does not exist yet: both tuners create it at the same moment.
        procs = [subprocess.Popen([attune, "tune", "--db", db, "--shard", "%d/2" % k] + SWEEP,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for k in range(2)]
        outputs = [p.communicate(timeout=600)[0].strip() for p in procs]
        con = sqlite3.connect(db)
        rows = con.execute("select count(*) from measurements").fetchone()[0]
        con.close()
        verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
        ok = all(p.returncode == 0 for p in procs) and rows == TASKS and verify.returncode == 0
        print("%s two concurrent tuners: %d measurements (expected %d); %s" % (
            "ok" if ok else "FAIL", rows, TASKS, " | ".join(outputs)))
        failures += 0 if ok else 1
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
