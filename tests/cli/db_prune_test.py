#!/usr/bin/env python3
"""`attune db prune`: measurements of stale template versions and of attune
versions before this one (or --keep-from) are deleted, newer ones are kept,
the best rows follow, and bad flags are refused with a message.

Usage: db_prune_test.py PATH_TO_ATTUNE
"""
import sqlite3

from cli_support import database_test


def prune_checks(check, run, db):
    tune = run("tune", "--backend", "emu", "--db", db, "--head-dims", "32", "--seqlens", "48",
               "--max-variants", "4", "--repetitions", "1", "--quiet")
    check(tune.returncode == 0, "tune: " + tune.stderr.strip()[-200:])
    version = run("--version").stdout.strip()
    con = sqlite3.connect(db)
    ids = [r[0] for r in con.execute("select id from measurements order by id")]
    check(len(ids) == 4, "4 measurements (%d)" % len(ids))
    check(all(v == version for (v,) in con.execute("select attune_version from measurements")),
          "measurements carry this attune's version " + version)
    con.execute("update measurements set attune_version = '0.0.9' where id = ?", (ids[0],))
    con.execute("update measurements set attune_version = NULL where id = ?", (ids[1],))
    con.execute("update measurements set attune_version = '99.0' where id = ?", (ids[2],))
    # A measurement of an older template version of the same kernel, fastest of all.
    con.execute("insert into templates(kernel, hash) values ('flash_fwd', 'an-older-template')")
    tmpl = con.execute("select id from templates where hash = 'an-older-template'").fetchone()[0]
    con.execute("insert into variants(template, variant_id) values (?, 'flash_fwd/d32.bm64.bn32.wm2.wn1.st1')",
                (tmpl,))
    variant = con.execute("select id from variants where template = ?", (tmpl,)).fetchone()[0]
    con.execute("insert into measurements(device, problem, variant, ok, median_ms, repetitions, measured_at, "
                "driver_version, nvrtc_version, attune_version) select device, problem, ?, 1, 1e-6, 1, "
                "measured_at, driver_version, nvrtc_version, attune_version from measurements where id = ?",
                (variant, ids[3]))
    con.commit()
    con.close()

    out = run("db", "--db", db, "prune", "--templates-only")
    check(out.returncode == 0 and "pruned 1 measurements of stale template versions" in out.stdout
          and "attune versions" not in out.stdout, "--templates-only: " + out.stdout.strip())
    out = run("db", "--db", db, "prune")
    check(out.returncode == 0 and ("pruned 2 measurements of attune versions before %s" % version) in out.stdout
          and "no version: 1" in out.stdout and "0.0.9: 1" in out.stdout, "prune: " + out.stdout.strip())
    con = sqlite3.connect(db)
    left = sorted(r[0] for r in con.execute("select attune_version from measurements"))
    best = con.execute("select count(*) from best b join measurements m on m.id = b.measurement "
                       "where m.id in (?, ?)", (ids[2], ids[3])).fetchone()[0]
    con.close()
    check(left == sorted([version, "99.0"]), "current and newer kept: %s" % left)
    check(best == 1, "the best row points at a kept measurement")
    verify = run("db", "--db", db, "verify")
    check(verify.returncode == 0, "verify after prune: " + (verify.stdout + verify.stderr).strip())
    out = run("db", "--db", db, "prune", "--keep-from", "100")
    check(out.returncode == 0 and "pruned 2 measurements" in out.stdout, "--keep-from 100: " + out.stdout.strip())
    out = run("db", "--db", db, "best")
    check(out.returncode == 0 and "no tuned problems" in out.stdout, "empty best: " + out.stdout.strip())

    bad = run("db", "--db", db, "prune", "--keep-from", "latest")
    check(bad.returncode != 0 and "--keep-from: got 'latest'; expected an attune version" in bad.stderr,
          "bad --keep-from: " + bad.stderr.strip())
    both = run("db", "--db", db, "prune", "--keep-from", "1.0", "--templates-only")
    check(both.returncode != 0 and "excludes" in both.stderr, "conflicting flags: " + both.stderr.strip())


if __name__ == "__main__":
    database_test(prune_checks, prefix="attune_prune_", timeout=300)
