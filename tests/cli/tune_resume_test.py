#!/usr/bin/env python3
"""`attune tune` killed with SIGKILL at random moments, then resumed: no
measurement lost, none taken twice, and the database verifies. Then two
tuners (two shards) writing one database at once: nothing lost.

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

SWEEP = ["--backend", "emu", "--head-dims", "32", "--masks", "none,causal", "--seqlens", "64,96,128",
         "--batch-heads", "1x2", "--max-variants", "5", "--repetitions", "2", "--quiet"]


def main():
    attune = os.path.abspath(sys.argv[1])
    rng = random.Random(1234)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="attune_resume_") as tmp:
        for round_ in range(3):
            db = os.path.join(tmp, "round%d.db" % round_)
            kills = 0
            for _ in range(6):  # interrupted runs, each killed mid-sweep
                proc = subprocess.Popen([attune, "tune", "--db", db] + SWEEP,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(rng.uniform(0.05, 0.5))
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                    kills += 1
                proc.wait()
            done = subprocess.run([attune, "tune", "--db", db] + SWEEP, capture_output=True, text=True, timeout=600)
            con = sqlite3.connect(db)
            rows = con.execute("select count(*) from measurements").fetchone()[0]
            distinct = con.execute(
                "select count(*) from (select distinct device, problem, variant from measurements)").fetchone()[0]
            con.close()
            expected = 2 * 3 * 5  # masks x seqlens x variants
            verify = subprocess.run([attune, "db", "--db", db, "verify"], capture_output=True, text=True)
            ok = kills >= 2 and done.returncode == 0 and rows == expected and distinct == rows and verify.returncode == 0
            print("%s round %d: %d kills, %d measurements (expected %d, distinct %d), final run: %s, verify: %s" % (
                "ok" if ok else "FAIL", round_, kills, rows, expected, distinct, done.stdout.strip(),
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
        ok = all(p.returncode == 0 for p in procs) and rows == 2 * 3 * 5 and verify.returncode == 0
        print("%s two concurrent tuners: %d measurements (expected %d); %s" % (
            "ok" if ok else "FAIL", rows, 2 * 3 * 5, " | ".join(outputs)))
        failures += 0 if ok else 1
    print("%d passed, %d failed" % (4 - failures, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
