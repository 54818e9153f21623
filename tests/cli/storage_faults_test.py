#!/usr/bin/env python3
"""Storage faults as a user meets them:

- the tuning database on a full disk (RLIMIT_FSIZE, SIGXFSZ ignored so a
  write fails with EFBIG as it would with ENOSPC): `attune tune` stops with
  an error naming the file, what was recorded is intact (verify passes, no
  measurement twice), and the next run on a healthy disk finishes the sweep;
- the tuning database in a read-only directory (a read-only bind mount in a
  private mount namespace when root, else mode 0500): a clear error naming
  the file and the directory, the file untouched;
- a database file truncated, or overwritten mid-way with random bytes: refused
  by `attune db verify` and by every command that opens it (tune, db
  best/devices/problems/show/export/report/merge/prune/import, attention --db),
  each with an error naming the file, and the file left byte for byte as it was;
- the kernel cache (ATTUNE_CACHE_DIR) on a full disk: the call still runs
  (a cache that cannot be written costs a recompile), no entry or temporary
  file is left behind, and the next healthy run stores the entry; in a
  read-only directory: a clear error naming the directory.

Can fail: each check prints FAIL with what it saw. The refusal checker is
also run on planted outcomes (a command that accepts the damaged file, one
that modifies it, one whose error does not name it) and must report each.

Usage: storage_faults_test.py PATH_TO_ATTUNE PATH_TO_FAKE_LIBCUDA
"""
import hashlib
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys

import numpy as np

from cli_support import cli_test

SWEEP = ["--backend", "emu", "--head-dims", "32", "--seqlens", "48,64,80,96", "--max-variants", "4", "--repetitions",
         "1", "--quiet"]


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def limited(max_bytes):
    """preexec_fn: files may grow to max_bytes; a write past it fails (EFBIG) instead of killing the process."""
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return apply


def read_only(directory, argv):
    """argv run with `directory` read-only, or None where that cannot be arranged."""
    if os.geteuid() != 0:
        return ["bash", "-c", 'chmod 0500 "$0" && "${@}"; rc=$?; chmod 0700 "$0"; exit $rc', directory] + argv
    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        return None
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "${@}"', directory] + argv


def measurements(db):
    con = sqlite3.connect(db)
    try:
        return con.execute("select device, problem, variant, ok, median_ms, measured_at from measurements "
                           "order by id").fetchall()
    finally:
        con.close()


def judge_refusal(result, path, before, after):
    """None when a command refused a damaged file properly, else why not."""
    if result.returncode == 0:
        return "accepted the damaged file"
    if os.path.basename(path) not in result.stderr:
        return "the error does not name the file: " + result.stderr.strip()
    if before != after:
        return "the file was modified"
    return None


def main():
    with cli_test("attune_storage_") as ((attune, fake), checks, tmp):
        check = checks.check
        os.chmod(tmp, 0o700)
        env = dict(os.environ, ATTUNE_CACHE_DIR=os.path.join(tmp, "cache"))
        env.pop("ATTUNE_TUNING_DB", None)

        def run(args, preexec=None, wrap=None, e=None):
            argv = [attune] + args
            return subprocess.run(wrap(argv) if wrap else argv, env=e or env, capture_output=True, text=True,
                                  timeout=300, preexec_fn=preexec)

        # -- the tuning database on a full disk --------------------------------
        db = os.path.join(tmp, "full.db")
        r = run(["tune", "--db", db] + SWEEP[:5] + ["48"] + SWEEP[6:])  # the first problem only
        first = measurements(db)
        check(r.returncode == 0 and len(first) == 4, "a first sweep on a healthy disk: %s" % r.stdout.strip())
        # Room for a little WAL (each file may grow to the limit), not for the
        # next sweep's twelve measurements.
        limit = os.path.getsize(db) + 4096
        r = run(["tune", "--db", db] + SWEEP, preexec=limited(limit))
        check(r.returncode != 0 and db in r.stderr, "full disk: tune fails naming the database: rc %d %s" % (
            r.returncode, r.stderr.strip()[-300:]))
        rows = measurements(db)
        keys = [x[:3] for x in rows]
        verify = run(["db", "--db", db, "verify"])
        check(rows[:4] == first and len(keys) == len(set(keys)) and verify.returncode == 0,
              "full disk: what was recorded is intact (%d rows, verify: %s)" % (
                  len(rows), (verify.stdout + verify.stderr).strip()))
        r = run(["tune", "--db", db] + SWEEP)
        rows = measurements(db)
        check(r.returncode == 0 and len(rows) == 4 * len(SWEEP[5].split(",")) and rows[:4] == first,
              "full disk: the next run on a healthy disk finishes the sweep: %s" % r.stdout.strip())

        # -- the tuning database in a read-only directory ----------------------
        rodir = os.path.join(tmp, "ro")
        os.mkdir(rodir, 0o700)
        shutil.copy(db, os.path.join(rodir, "t.db"))
        before = digest(os.path.join(rodir, "t.db"))
        for name, args in (("an existing database", ["tune", "--db", os.path.join(rodir, "t.db")] + SWEEP),
                           ("a new database", ["tune", "--db", os.path.join(rodir, "new.db")] + SWEEP),
                           ("db verify", ["db", "--db", os.path.join(rodir, "t.db"), "verify"])):
            wrap = lambda argv: read_only(rodir, argv)
            if wrap([]) is None:
                print("skip read-only directory: no way to make one here")
                break
            r = run(args, wrap=wrap)
            check(r.returncode != 0 and rodir in r.stderr and "cannot be written" in r.stderr,
                  "read-only directory, %s: a clear error naming it: %s" % (name, r.stderr.strip()))
        check(digest(os.path.join(rodir, "t.db")) == before and not os.path.exists(os.path.join(rodir, "new.db")),
              "read-only directory: the database untouched, none created")

        # -- damaged database files, refused by every command ------------------
        rng = np.random.default_rng(3)
        for name in ("q", "k", "v"):
            np.save(os.path.join(tmp, name + ".npy"), rng.standard_normal((1, 16, 1, 32)).astype(np.float32))
        good = os.path.join(tmp, "good.db")
        shutil.copy(db, good)
        exported = os.path.join(tmp, "good.json")
        run(["db", "--db", good, "export", "--format", "json", "--out", exported])
        variant = sqlite3.connect(good).execute("select variant_id from variants limit 1").fetchone()[0]
        data = open(db, "rb").read()
        damaged = {"truncated": data[:len(data) // 2],
                   "overwritten": data[:len(data) // 2 // 4096 * 4096] + os.urandom(4096) +
                   data[len(data) // 2 // 4096 * 4096 + 4096:]}
        for kind, content in damaged.items():
            path = os.path.join(tmp, kind + ".db")
            with open(path, "wb") as f:
                f.write(content)
            before = digest(path)
            commands = [["db", "--db", path, "verify"], ["db", "--db", path, "best"], ["db", "--db", path, "devices"],
                        ["db", "--db", path, "problems"], ["db", "--db", path, "show", variant],
                        ["db", "--db", path, "export", "--format", "csv"],
                        ["db", "--db", path, "report", "--html", os.path.join(tmp, "r.html")],
                        ["db", "--db", path, "merge", good], ["db", "--db", path, "prune"],
                        ["db", "--db", path, "import", exported], ["tune", "--db", path] + SWEEP,
                        ["attention", "--backend", "emu", "--db", path, "--q", os.path.join(tmp, "q.npy"), "--k",
                         os.path.join(tmp, "k.npy"), "--v", os.path.join(tmp, "v.npy"), "--out",
                         os.path.join(tmp, "o.npy")]]
            for args in commands:
                r = run(args)
                what = "%s file: %s" % (kind, " ".join(a for a in args if a != path)[:60])
                checks.result(what, judge_refusal(r, path, before, digest(path)))
                check(len(r.stderr.strip().splitlines()) == 1, "%s: the error is one line" % what)
        # The checker catches planted mishandlings.
        accepted = subprocess.CompletedProcess([], 0, "", "")
        unnamed = subprocess.CompletedProcess([], 1, "", "attune: error: database disk image is malformed")
        named = subprocess.CompletedProcess([], 1, "", "attune: error: tuning database /x/bad.db: malformed")
        for planted, why in (("accepts", judge_refusal(accepted, "/x/bad.db", "a", "a")),
                             ("does not name the file", judge_refusal(unnamed, "/x/bad.db", "a", "a")),
                             ("modifies the file", judge_refusal(named, "/x/bad.db", "a", "b"))):
            check(why is not None, "planted: a command that %s is reported (%s)" % (planted, why))

        # -- the kernel cache on a full disk and read-only ---------------------
        cache = os.path.join(tmp, "kcache")
        cenv = dict(env, ATTUNE_CACHE_DIR=cache, ATTUNE_LIBCUDA=fake)
        out = os.path.join(tmp, "o_cuda.npy")
        attention = ["attention", "--backend", "cuda", "--q", os.path.join(tmp, "q.npy"), "--k",
                     os.path.join(tmp, "k.npy"), "--v", os.path.join(tmp, "v.npy"), "--out", out]
        r = run(attention, preexec=limited(16384), e=cenv)  # a cubin is larger; the output smaller
        left = os.listdir(cache) if os.path.isdir(cache) else []
        check(r.returncode == 0 and os.path.exists(out), "full disk: the call still runs without the cache: %s" %
              r.stderr.strip())
        check(left == [], "full disk: no cache entry nor temporary file left: %s" % left)
        r = run(attention, e=cenv)
        left = os.listdir(cache)
        check(r.returncode == 0 and len(left) == 1 and not left[0].startswith("."),
              "healthy disk again: the entry is stored: %s %s" % (left, r.stderr.strip()))
        rocache = os.path.join(tmp, "rocache")
        os.mkdir(rocache, 0o700)
        wrap = lambda argv: read_only(rocache, argv)
        if wrap([]) is not None:
            r = run(attention, wrap=wrap, e=dict(cenv, ATTUNE_CACHE_DIR=rocache))
            check(r.returncode != 0 and rocache in r.stderr and "cannot be written" in r.stderr and
                  "ATTUNE_CACHE_DIR" in r.stderr, "read-only cache directory: a clear error: %s" % r.stderr.strip())
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
