#!/usr/bin/env python3
"""`attune tune --op decode` and `--op bwd` as a user runs them on the
emulator: the sweep records every (variant, split count) once, `db best`
lists the keys, `explain` dispatches from the database, and decode-only
flags are refused for other ops.

Usage: tune_ops_test.py PATH_TO_ATTUNE
"""
import sqlite3

from cli_support import database_test


def tune_ops_checks(check, run, db):
    decode = ["tune", "--backend", "emu", "--db", db, "--op", "decode", "--head-dims", "32", "--seqlens", "400",
              "--batch-heads", "1x1", "--gqa", "8", "--queries", "1", "--splits", "1,3,auto", "--max-variants", "2",
              "--repetitions", "1", "--quiet"]
    first = run(*decode)
    check(first.returncode == 0, "tune --op decode: " + (first.stdout + first.stderr).strip()[-200:])
    again = run(*decode)
    check(again.returncode == 0 and "tuned 0" in again.stdout, "a second run measures nothing: " + again.stdout.strip())
    con = sqlite3.connect(db)
    ids = [r[0] for r in con.execute("select v.variant_id from measurements m join variants v on v.id = m.variant")]
    con.close()
    check(ids and all("/splits" in i for i in ids) and len(ids) == len(set(ids)),
          "each (variant, split count) recorded once with its count: %s" % ids)
    best = run("db", "--db", db, "best")
    check(best.returncode == 0 and "decode/bf16/dk32/dv32/none/sq2^3/sk2^9/bh2^0" in best.stdout
          and "/splits" in best.stdout, "db best lists the decode key: " + best.stdout.strip())
    explain = run("explain", "--op", "decode", "--db", db, "--seqlen-q", "1", "--seqlen-k", "400", "--heads-q", "8",
                  "--heads-kv", "1", "--dk", "32", "--dv", "32")
    check(explain.returncode == 0 and "rule:        tuned" in explain.stdout, "explain --op decode: tuned: " +
          explain.stdout.strip().replace("\n", " | "))

    bwd = run("tune", "--backend", "emu", "--db", db, "--op", "bwd", "--head-dims", "32", "--seqlens", "48",
              "--batch-heads", "1x2", "--masks", "causal", "--max-variants", "2", "--repetitions", "1", "--quiet")
    check(bwd.returncode == 0 and "failed 0" in bwd.stdout, "tune --op bwd: " + (bwd.stdout + bwd.stderr).strip()[-200:])
    explain = run("explain", "--op", "bwd", "--db", db, "--seqlen-q", "48", "--seqlen-k", "48", "--heads-q", "2",
                  "--heads-kv", "2", "--dk", "32", "--dv", "32", "--causal", "bottom-right")
    # The emulator's times are CPU times: either family may win; explain
    # names the one the database measured fastest.
    con = sqlite3.connect(db)
    fastest = con.execute("select v.variant_id from measurements m join variants v on v.id = m.variant "
                          "join problems p on p.id = m.problem where p.op = 'bwd' and m.ok = 1 "
                          "order by m.median_ms limit 1").fetchone()
    con.close()
    check(explain.returncode == 0 and fastest is not None and fastest[0].startswith("flash_bwd")
          and "variant:     %s\n" % fastest[0] in explain.stdout and "rule:        tuned" in explain.stdout,
          "explain --op bwd: tuned, the fastest measured (%s): " % (fastest and fastest[0]) +
          explain.stdout.strip().replace("\n", " | "))
    verify = run("db", "--db", db, "verify")
    check(verify.returncode == 0, "db verify: " + (verify.stdout + verify.stderr).strip())

    bad = run("tune", "--backend", "emu", "--db", db, "--splits", "4")
    check(bad.returncode != 0 and "--splits" in bad.stderr and "--op decode" in bad.stderr,
          "--splits without --op decode refused: " + bad.stderr.strip())
    bad = run("tune", "--backend", "emu", "--db", db, "--op", "backward")
    check(bad.returncode != 0 and "expected fwd, bwd or decode" in bad.stderr,
          "unknown op refused: " + bad.stderr.strip())


if __name__ == "__main__":
    database_test(tune_ops_checks, prefix="attune_tune_ops_", timeout=600)
