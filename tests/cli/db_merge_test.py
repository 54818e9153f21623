#!/usr/bin/env python3
"""`attune db merge` of many shard files as a user runs it: two shards of a
sweep and a third file; a corrupt file and one of another schema version are
refused by name, with the target byte for byte unchanged; the good shards
merge with a report per file (added, already present, conflicting), and a
second merge adds nothing.

Usage: db_merge_test.py PATH_TO_ATTUNE
"""
import hashlib
import os
import shutil
import sqlite3
import sys

from cli_support import cli_test, runner

SWEEP = ["--backend", "emu", "--head-dims", "32", "--seqlens", "48", "--max-variants", "4", "--repetitions", "1",
         "--quiet"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    with cli_test("attune_merge_") as ((attune,), checks, tmp):
        check = checks.check
        run = runner(attune, timeout=300)
        shards = [os.path.join(tmp, "shard-%d.db" % k) for k in range(2)]
        for k, shard in enumerate(shards):
            r = run("tune", "--db", shard, "--shard", "%d/2" % k, *SWEEP)
            check(r.returncode == 0, "shard %d tuned: %s" % (k, (r.stdout + r.stderr).strip()[-200:]))
        target = os.path.join(tmp, "tuning.db")
        shutil.copy(shards[0], target)  # the target already holds shard 0's rows
        before = digest(target)

        corrupt = os.path.join(tmp, "corrupt.db")
        with open(corrupt, "wb") as f:
            f.write(b"SQLite format 3\0" + os.urandom(8192))
        foreign = os.path.join(tmp, "foreign.db")
        shutil.copy(shards[1], foreign)
        con = sqlite3.connect(foreign)
        con.execute("PRAGMA user_version = 99")
        con.close()
        for bad, what in ((corrupt, "corrupt"), (foreign, "schema version 99")):
            r = run("db", "--db", target, "merge", shards[1], bad)
            check(r.returncode != 0 and bad in r.stderr and (what != "corrupt" or "expected" in r.stderr
                                                             or "damage" in r.stderr or "not a database" in r.stderr),
                  "a %s file is refused by name: %s" % (what, r.stderr.strip()))
            check(what == "corrupt" or what in r.stderr, "the message says %s" % what)
            check(digest(target) == before, "the target is unchanged after refusing the %s file" % what)

        r = run("db", "--db", target, "merge", shards[0], shards[1])
        lines = r.stdout.strip().splitlines()
        check(r.returncode == 0 and len(lines) == 3, "merge of 2 files: %s" % r.stdout.strip())
        check("0 measurements added" in lines[0] and "already present" in lines[0] and
              not lines[0].split("added, ")[1].startswith("0 "), "shard 0: all already present: " + lines[0])
        check(not lines[1].split(": ", 1)[1].startswith("0 "), "shard 1: rows added: " + lines[1])
        verify = run("db", "--db", target, "verify")
        check(verify.returncode == 0, "verify: " + (verify.stdout + verify.stderr).strip())
        again = run("db", "--db", target, "merge", shards[0], shards[1])
        check(again.returncode == 0 and "merged 2 files: 0 measurements added" in again.stdout,
              "merging again adds nothing: " + again.stdout.strip().splitlines()[-1])
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
