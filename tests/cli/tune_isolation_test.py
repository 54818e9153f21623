#!/usr/bin/env python3
"""`attune tune --isolate yes`: a candidate whose worker crashes or hangs is
recorded as failed, never becomes best, and the sweep goes on; one stopped
from outside (SIGTERM of a cancelled job) stops the sweep and is not recorded. Faults are
injected with a wrapper (ATTUNE_TUNE_WORKER) that crashes for variants with
pipeline depth `st1` and hangs for `st3` or a pingpong Hopper variant
(`pp1`: the sampled Hopper variants need not include a 3-stage one), and
runs the real worker otherwise. Also:
export to JSON and import into a fresh database round-trips.

Usage: tune_isolation_test.py PATH_TO_ATTUNE
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

WRAPPER = """#!/bin/bash
for a in "$@"; do
  case "$a" in
    *.st1 | *.st1.*) kill -SEGV $$ ;;
    *.st3 | *.st3.* | *.pp1.*) sleep 1000 ;;
  esac
done
exec "%s" "$@"
"""


def main():
    attune = os.path.abspath(sys.argv[1])
    failures = []
    with tempfile.TemporaryDirectory(prefix="attune_isolation_") as tmp:
        wrapper = os.path.join(tmp, "worker.sh")
        with open(wrapper, "w") as f:
            f.write(WRAPPER % attune)
        os.chmod(wrapper, 0o755)
        db = os.path.join(tmp, "t.db")
        env = dict(os.environ, ATTUNE_TUNE_WORKER=wrapper)
        run = subprocess.run([attune, "tune", "--backend", "emu", "--db", db, "--head-dims", "32", "--seqlens", "48",
                              "--max-variants", "8", "--repetitions", "1", "--isolate", "yes", "--time-limit", "3",
                              "--quiet"], env=env, capture_output=True, text=True, timeout=120)
        print(run.stdout.strip())
        if run.returncode != 0:
            failures.append("tune exited %d: %s" % (run.returncode, run.stderr.strip()[-300:]))
        con = sqlite3.connect(db)
        rows = con.execute("select v.variant_id, m.ok from measurements m join variants v on v.id = m.variant").fetchall()
        best = {r[0] for r in con.execute("select v.variant_id from best b join variants v on v.id = b.variant")}
        con.close()
        def fault(v):  # what the wrapper does to a candidate: "crash", "hang" or None
            parts = v.split("/")[1].split(".")
            return "crash" if "st1" in parts else "hang" if "st3" in parts or "pp1" in parts else None
        faulty = [v for v, ok in rows if fault(v)]
        if not any(fault(v) == "crash" for v in faulty) or not any(fault(v) == "hang" for v in faulty):
            failures.append("the sweep did not include both a crashing and a hanging candidate: %s" % rows)
        for variant, ok in rows:
            should_fail = fault(variant) is not None
            if bool(ok) == should_fail:
                failures.append("%s recorded ok=%d" % (variant, ok))
        if best & set(faulty):
            failures.append("a failed candidate became best: %s" % (best & set(faulty)))
        if not any(ok for _, ok in rows):
            failures.append("no candidate was measured")

        # A worker stopped from outside (a cancelled job's SIGTERM) is not a
        # failed candidate: the sweep stops, records nothing for it, and a
        # resumed sweep measures it.
        stopped = os.path.join(tmp, "stopped.sh")
        with open(stopped, "w") as f:
            f.write("#!/bin/bash\n[ -e %s/resume ] || kill -TERM $$\nexec \"%s\" \"$@\"\n" % (tmp, attune))
        os.chmod(stopped, 0o755)
        sdb = os.path.join(tmp, "stopped.db")
        sweep = [attune, "tune", "--backend", "emu", "--db", sdb, "--head-dims", "32", "--seqlens", "48",
                 "--max-variants", "2", "--repetitions", "1", "--isolate", "yes", "--quiet"]
        first = subprocess.run(sweep, env=dict(os.environ, ATTUNE_TUNE_WORKER=stopped), capture_output=True,
                               text=True, timeout=120)
        con = sqlite3.connect(sdb)
        recorded = con.execute("select count(*) from measurements").fetchone()[0]
        con.close()
        if first.returncode == 0 or "stopped by" not in first.stderr or recorded != 0:
            failures.append("a worker stopped by SIGTERM: exit %d, %d recorded, %s" % (
                first.returncode, recorded, first.stderr.strip()[-200:]))
        open(os.path.join(tmp, "resume"), "w").close()
        resumed = subprocess.run(sweep, env=dict(os.environ, ATTUNE_TUNE_WORKER=stopped), capture_output=True,
                                 text=True, timeout=120)
        if resumed.returncode != 0 or "tuned 2, failed 0, already measured 0" not in resumed.stdout:
            failures.append("resumed after SIGTERM: %s %s" % (resumed.stdout.strip(), resumed.stderr.strip()[-200:]))

        exported = os.path.join(tmp, "e.json")
        subprocess.run([attune, "db", "--db", db, "export", "--format", "json", "--out", exported], check=True)
        copy = os.path.join(tmp, "copy.db")
        imported = subprocess.run([attune, "db", "--db", copy, "import", exported], capture_output=True, text=True)
        again = subprocess.run([attune, "db", "--db", copy, "import", exported], capture_output=True, text=True)
        best_a = subprocess.run([attune, "db", "--db", db, "best"], capture_output=True, text=True).stdout
        best_b = subprocess.run([attune, "db", "--db", copy, "best"], capture_output=True, text=True).stdout
        n = len(json.load(open(exported))["measurements"])
        if "imported %d new" % n not in imported.stdout or "imported 0 new" not in again.stdout or best_a != best_b:
            failures.append("export/import round trip: %s / %s / best equal: %s" % (
                imported.stdout.strip(), again.stdout.strip(), best_a == best_b))
    for f in failures:
        print("FAIL", f)
    print("%d passed, %d failed" % (0 if failures else 1, 1 if failures else 0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
