#!/usr/bin/env python3
"""`attune tune --modifiers` as a user runs it on the emulator: each score
modifier set is tuned under its own problem key (problems and best rows in
the database), `explain` dispatches each set to its own tuned variant, the
isolated worker rebuilds the same problem (modifiers, c and p), `--softcap` and
`--dropout` alone tune softcap and dropout,
and a JSON export imported elsewhere keeps the modifiers (an export written
before them reads as none).

Usage: tune_modifiers_test.py PATH_TO_ATTUNE
"""
import json
import os
import sqlite3
import sys
import tempfile

from cli_support import Checks, runner


def rows(db, sql):
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def best_by_modifiers(db):
    """{modifiers: [variant ids]} of the best rows."""
    out = {}
    for modifiers, variant in rows(db, "select b.modifiers, v.variant_id from best b join variants v on v.id = b.variant"):
        out.setdefault(modifiers, []).append(variant)
    return out


def explain_fields(stdout):
    """The 'name: value' lines of attune explain."""
    fields = {}
    for line in stdout.splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


def main():
    attune = os.path.abspath(sys.argv[1])
    checks = Checks()
    check = checks.check
    run = runner(attune, timeout=300)
    quick = ["--head-dims", "32", "--max-variants", "2", "--repetitions", "1", "--quiet", "--backend", "emu"]

    with tempfile.TemporaryDirectory(prefix="attune_tune_modifiers_") as tmp:
        db = os.path.join(tmp, "t.db")
        fwd = run("tune", "--db", db, "--modifiers", "none,softcap+sinks", "--seqlens", "64", "--op", "fwd", *quick)
        check(fwd.returncode == 0 and "failed 0" in fwd.stdout,
              "tune --modifiers none,softcap+sinks: " + (fwd.stdout + fwd.stderr).strip()[-300:])
        problems = {r[0] for r in rows(db, "select modifiers from problems where op = 'fwd'")}
        check(problems == {"none", "softcap+sinks"}, "a problem row per modifier set: %s" % sorted(problems))
        best = best_by_modifiers(db)
        check(set(best) == {"none", "softcap+sinks"}, "a best row per modifier set: %s" % best)
        measured = rows(db, "select p.modifiers, v.variant_id from measurements m join problems p on p.id = m.problem "
                            "join variants v on v.id = m.variant")
        check(measured and all((".softcap1.sinks1" in v) == (mods == "softcap+sinks") for mods, v in measured),
              "the variants of each set compile exactly its modifiers in: %s" % measured)

        explain = ["explain", "--backend", "emu", "--db", db, "--seqlen-q", "64", "--seqlen-k", "64", "--heads-q", "2",
                   "--heads-kv", "2", "--dk", "32", "--dv", "32"]
        with_mods = run(*explain, "--modifiers", "softcap+sinks")
        f = explain_fields(with_mods.stdout)
        check(with_mods.returncode == 0 and f.get("rule", "").startswith("tuned")
              and ".softcap1.sinks1" in f.get("variant", "") and f.get("problem key", "").endswith("/softcap+sinks")
              and f.get("variant") in best.get("softcap+sinks", []),
              "explain --modifiers softcap+sinks: its tuned variant: " + with_mods.stdout.strip().replace("\n", " | "))
        plain = run(*explain)
        f = explain_fields(plain.stdout)
        check(plain.returncode == 0 and f.get("rule", "").startswith("tuned") and ".softcap1" not in f.get("variant", "")
              and f.get("variant") in best.get("none", []),
              "explain without modifiers: the plain tuned variant: " + plain.stdout.strip().replace("\n", " | "))

        # Decode: the set spelled in another order is the same set.
        decode = run("tune", "--db", db, "--op", "decode", "--modifiers", "none,alibi+sinks", "--seqlens", "200",
                     "--batch-heads", "1x1", "--gqa", "4", "--splits", "2", *quick)
        check(decode.returncode == 0 and "failed 0" in decode.stdout,
              "tune --op decode --modifiers none,alibi+sinks: " + (decode.stdout + decode.stderr).strip()[-300:])
        problems = {r[0] for r in rows(db, "select modifiers from problems where op = 'decode'")}
        check(problems == {"none", "sinks+alibi"}, "decode problems keyed as modifier_names spells them: %s" % problems)
        dx = run("explain", "--backend", "emu", "--db", db, "--op", "decode", "--seqlen-q", "1", "--seqlen-k", "200",
                 "--heads-q", "4", "--heads-kv", "1", "--dk", "32", "--dv", "32", "--modifiers", "sinks+alibi")
        f = explain_fields(dx.stdout)
        check(dx.returncode == 0 and f.get("rule", "").startswith("tuned") and ".sinks1.alibi1" in f.get("variant", ""),
              "explain --op decode --modifiers sinks+alibi: tuned: " + dx.stdout.strip().replace("\n", " | "))

        # --softcap alone: the sweep is of softcap, in an isolated worker that
        # must rebuild the same problem (c included) to pass the gate.
        bwd = run("tune", "--db", db, "--op", "bwd", "--softcap", "7.5", "--seqlens", "40", "--batch-heads", "1x2",
                  "--masks", "causal", "--isolate", "yes", *quick)
        check(bwd.returncode == 0 and "failed 0" in bwd.stdout and "tuned 2" in bwd.stdout,
              "tune --op bwd --softcap 7.5 --isolate yes: " + (bwd.stdout + bwd.stderr).strip()[-300:])
        problems = {r[0] for r in rows(db, "select modifiers from problems where op = 'bwd'")}
        check(problems == {"softcap"}, "--softcap alone sweeps softcap: %s" % problems)
        isolated = run("tune", "--db", db, "--modifiers", "softcap+sinks+alibi", "--softcap", "3", "--seqlens", "48",
                       "--isolate", "yes", *quick)
        check(isolated.returncode == 0 and "failed 0" in isolated.stdout and "tuned 2" in isolated.stdout,
              "tune --isolate yes with every modifier: " + (isolated.stdout + isolated.stderr).strip()[-300:])

        # --dropout alone: the sweep is of dropout, in isolated workers that
        # must rebuild p to pass the gate; decode has no dropout.
        drop = run("tune", "--db", db, "--dropout", "0.2", "--seqlens", "40", "--batch-heads", "1x2", "--masks",
                   "causal", "--isolate", "yes", *quick)
        check(drop.returncode == 0 and "failed 0" in drop.stdout and "tuned 2" in drop.stdout,
              "tune --dropout 0.2 --isolate yes: " + (drop.stdout + drop.stderr).strip()[-300:])
        dropped = rows(db, "select v.variant_id from measurements m join problems p on p.id = m.problem "
                           "join variants v on v.id = m.variant where p.modifiers = 'dropout'")
        check(dropped and all(v.endswith(".dropout1") for (v,) in dropped),
              "--dropout alone sweeps dropout variants: %s" % dropped)
        bad = run("tune", "--db", db, "--modifiers", "sinks", "--dropout", "0.2", *quick)
        check(bad.returncode != 0 and "--dropout" in bad.stderr, "--dropout with no set to drop refused: " +
              bad.stderr.strip())
        bad = run("tune", "--db", db, "--op", "decode", "--modifiers", "dropout", "--seqlens", "200", "--gqa", "4",
                  *quick)
        check(bad.returncode != 0 and "without dropout" in bad.stderr, "decode with dropout refused: " +
              bad.stderr.strip())

        # The worker builds its problem with the modifiers it is given: a
        # variant compiled without them is refused, one with them measured.
        worker = ["tune-worker", "--backend", "emu", "--seqlen", "40", "--heads", "2", "--dk", "32", "--dv", "32",
                  "--repetitions", "1", "--modifiers", "softcap+alibi", "--softcap", "7.5"]
        plain_id = best["none"][0]
        for variant, want_ok in ((plain_id, False), (plain_id + ".softcap1.alibi1", True)):
            w = run(*worker, "--variant", variant)
            result = [json.loads(line) for line in w.stdout.splitlines() if line.startswith("{")]
            ok = bool(result) and result[-1]["ok"] == want_ok
            if not want_ok:
                ok = ok and "softcap" in result[-1]["error"]
            check(ok, "tune-worker --modifiers softcap+alibi with %s: %s" % (variant, w.stdout.strip()))
        w = run(*worker[:-4], "--modifiers", "tanh", "--variant", plain_id)
        check('"ok":false' in w.stdout.replace(" ", "") and "--modifiers" in w.stdout,
              "tune-worker refuses an unknown modifier: " + w.stdout.strip())

        bad = run("tune", "--db", db, "--modifiers", "sinks", "--softcap", "20", *quick)
        check(bad.returncode != 0 and "--softcap" in bad.stderr, "--softcap with no set to cap refused: " +
              bad.stderr.strip())
        bad = run("tune", "--db", db, "--modifiers", "none,tanh", *quick)
        check(bad.returncode != 0 and "modifiers: got 'tanh'" in bad.stderr, "an unknown modifier refused: " +
              bad.stderr.strip())
        bad = run("tune", "--db", db, "--softcap", "-1", *quick)
        check(bad.returncode != 0 and "softcap: got '-1'" in bad.stderr, "a negative softcap refused: " +
              bad.stderr.strip())

        # Export and import: the modifiers travel with each measurement.
        exported = os.path.join(tmp, "t.json")
        ex = run("db", "--db", db, "export", "--format", "json", "--out", exported)
        check(ex.returncode == 0, "db export --format json: " + ex.stderr.strip())
        with open(exported) as f:
            document = json.load(f)
        exported_mods = {m.get("modifiers") for m in document["measurements"]}
        check(exported_mods == {"none", "softcap+sinks", "sinks+alibi", "softcap", "softcap+sinks+alibi", "dropout"},
              "the export names each measurement's modifiers: %s" % sorted(map(str, exported_mods)))
        csv = run("db", "--db", db, "export", "--format", "csv")
        header = csv.stdout.splitlines()[0].split(",") if csv.stdout else []
        check(csv.returncode == 0 and "modifiers" in header and "softcap+sinks" in csv.stdout,
              "the CSV export has a modifiers column: %s" % header)
        copy = os.path.join(tmp, "copy.db")
        im = run("db", "--db", copy, "import", exported)
        count = len(document["measurements"])
        check(im.returncode == 0 and ("imported %d new" % count) in im.stdout, "db import: " + (im.stdout + im.stderr).strip())
        same = lambda d: sorted(rows(d, "select p.op, p.modifiers, v.variant_id from measurements m "
                                        "join problems p on p.id = m.problem join variants v on v.id = m.variant"))
        check(same(copy) == same(db), "the imported measurements keep their problems' modifiers")
        check(best_by_modifiers(copy) == best_by_modifiers(db), "and the best rows follow per modifier set")
        verify = run("db", "--db", copy, "verify")
        check(verify.returncode == 0, "db verify of the copy: " + (verify.stdout + verify.stderr).strip())

        # An export from before modifiers (no field) imports as none.
        old = dict(document, measurements=[{k: v for k, v in m.items() if k != "modifiers"}
                                           for m in document["measurements"] if m["modifiers"] == "none"])
        old_path = os.path.join(tmp, "old.json")
        with open(old_path, "w") as f:
            json.dump(old, f)
        old_db = os.path.join(tmp, "old.db")
        im = run("db", "--db", old_db, "import", old_path)
        check(im.returncode == 0 and {r[0] for r in rows(old_db, "select modifiers from problems")} == {"none"},
              "an export without modifiers imports as none: " + (im.stdout + im.stderr).strip())
        document["measurements"][0]["modifiers"] = "softcap+softcap"
        with open(old_path, "w") as f:
            json.dump(document, f)
        im = run("db", "--db", os.path.join(tmp, "bad.db"), "import", old_path)
        check(im.returncode != 0 and "modifiers 'softcap+softcap'" in im.stderr,
              "a malformed modifiers field refused: " + im.stderr.strip())
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
