#!/usr/bin/env python3
"""`attune tune --dtype e4m3` and `attune tune --kv-dtype e4m3 --op decode`
as a user runs them on the emulator: the rows are keyed by the storage name
("e4m3", "bf16-kv-e4m3") with variants compiled with the fp8 loads (.fp81),
an fp8 cache sweep runs through isolated workers too (--kv-dtype passed
on), `explain` dispatches the forward from the database, and bad fp8 flags
are refused in one line.

Usage: tune_fp8_test.py PATH_TO_ATTUNE
"""
import json

from cli_support import database_test


def tune_fp8_checks(check, run, db):
    small = ["--backend", "emu", "--db", db, "--head-dims", "32", "--max-variants", "2", "--repetitions", "1",
             "--quiet"]
    fwd = run("tune", *small, "--dtype", "e4m3", "--seqlens", "48", "--batch-heads", "1x2")
    check(fwd.returncode == 0 and "failed 0" in fwd.stdout,
          "tune --dtype e4m3: " + (fwd.stdout + fwd.stderr).strip()[-300:])
    decode = run("tune", *small, "--kv-dtype", "e4m3", "--op", "decode", "--seqlens", "300", "--batch-heads", "1x1",
                 "--gqa", "4", "--splits", "1,auto")
    check(decode.returncode == 0 and "failed 0" in decode.stdout,
          "tune --kv-dtype e4m3 --op decode: " + (decode.stdout + decode.stderr).strip()[-300:])
    # Through worker processes, which must get --kv-dtype to key and run the same problem.
    isolated = run("tune", *small, "--kv-dtype", "e5m2", "--op", "decode", "--seqlens", "300", "--batch-heads", "1x1",
                   "--gqa", "4", "--splits", "1", "--isolate", "yes")
    check(isolated.returncode == 0 and "failed 0" in isolated.stdout,
          "tune --kv-dtype e5m2 --isolate yes: " + (isolated.stdout + isolated.stderr).strip()[-300:])

    best = run("db", "--db", db, "best", "--format", "json")
    rows = json.loads(best.stdout) if best.returncode == 0 else []
    keys = {r["problem_key"].split("/dk")[0]: r["variant"] for r in rows}
    check(set(keys) == {"fwd/e4m3", "decode/bf16-kv-e4m3", "decode/bf16-kv-e5m2"},
          "db best keys by storage name: %s" % sorted(keys))
    check(all(".fp81" in v for v in keys.values()), "best variants carry the fp8 loads: %s" % keys)
    check(keys.get("fwd/e4m3", "").startswith("flash_fwd/"), "the fp8 forward is flash_fwd's: %s" % keys)
    problems = run("db", "--db", db, "problems")
    check(problems.returncode == 0 and "decode/bf16-kv-e4m3/dk32/dv32/none/" in problems.stdout,
          "db problems lists bf16-kv-e4m3: " + problems.stdout.strip())

    explain = run("explain", "--db", db, "--dtype", "e4m3", "--seqlen-q", "48", "--seqlen-k", "48", "--heads-q", "2",
                  "--heads-kv", "2", "--dk", "32", "--dv", "32")
    check(explain.returncode == 0 and "rule:        tuned" in explain.stdout
          and ("variant:     " + keys.get("fwd/e4m3", "?")) in explain.stdout,
          "explain --dtype e4m3 picks the tuned variant: " + explain.stdout.strip().replace("\n", " | "))

    for args, words in ((["--kv-dtype", "bf16"], ["kv_dtype", "'bf16'", "e4m3 or e5m2"]),
                        (["--dtype", "e4m3", "--op", "bwd"], ["e4m3", "op bwd", "no fp8 backward"]),
                        (["--dtype", "e4m3", "--kv-dtype", "e5m2"], ["e5m2", "e4m3"]),
                        (["--dtype", "e5m2", "--dropout", "0.1"], ["dropout", "fp8"])):
        bad = run("tune", "--backend", "emu", "--db", db, *args)
        lines = bad.stderr.strip().splitlines()
        check(bad.returncode != 0 and len(lines) == 1 and all(w in lines[0] for w in words),
              "tune %s refused in one line: %s" % (" ".join(args), bad.stderr.strip()))


if __name__ == "__main__":
    database_test(tune_fp8_checks, prefix="attune_tune_fp8_", timeout=300)
