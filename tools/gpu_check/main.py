#!/usr/bin/env python3
"""tools/gpu_check: one bounded GPU run that cannot be wasted (docs/gpu-run.md).

  main.py run --bundle B --out DIR [--deadline 420] [--dry-run] [--only a,b] [--skip a,b]
  main.py step NAME ...            (one step; run by `run` in its own process group)
  main.py worker ...               (isolated kernel jobs; run by the steps)
  main.py kernels --bundle B       (kernels.txt / kernels.bounded.txt: what the run launches, to compile ahead)
  main.py hash ROOT                (the source hash BUNDLE records: templates/, tools/, python/attune/)
  main.py selftest-emu --lib L     (the C API binding on the emulator, no GPU)

tools/gpu_check.sh is the command people run; it checks the bundle and calls `run`.
"""
import argparse
import hashlib
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

DEFAULT_WAIT_BOUND_MS = 2000


def source_hash(root):
    """sha256 over the paths and bytes of templates/, tools/ and python/attune/ (no caches)."""
    h = hashlib.sha256()
    for top in ("templates", "tools", os.path.join("python", "attune")):
        base = os.path.join(root, top)
        paths = []
        for d, dirs, names in os.walk(base):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            paths += [os.path.join(d, n) for n in names if not n.endswith((".pyc", ".tmp"))]
        for p in sorted(paths):
            rel = os.path.relpath(p, root)
            h.update(rel.encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
    return h.hexdigest()[:16]


def common(ap):
    ap.add_argument("--bundle", required=True, help="the unpacked bundle (bin/attune, lib/libattune.so)")
    ap.add_argument("--work", help="raw records and logs (default: a new temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="the rehearsal: emulator and fake driver, tiny shapes")
    ap.add_argument("--wait-bound-ms", type=int, default=DEFAULT_WAIT_BOUND_MS,
                    help="mbarrier waits of checked sm90 kernels give up after this (ATTUNE_WAIT_BOUND_MS)")
    ap.add_argument("--job-limit", type=float, default=None, help="seconds one correctness job may take")
    ap.add_argument("--time-limit", type=float, default=None, help="seconds one timing job may take")
    ap.add_argument("--sweep", type=int, default=8, help="flash_fwd_sm90 variants timed per head dim")


def setup_env(args):
    """Where the library, the CLI and the kernel cache are, for every child."""
    b = os.path.abspath(args.bundle)
    args.bundle = b
    args.attune = os.path.join(b, "bin", "attune")
    os.environ["ATTUNE_LIBRARY"] = os.path.join(b, "lib", "libattune.so")
    os.environ["ATTUNE_CLI"] = args.attune
    os.environ.setdefault("ATTUNE_CACHE_DIR", os.path.join(b, "cache"))
    os.environ.setdefault("ATTUNE_TUNING_DB", os.path.join(args.work, "no-tuning.db"))
    os.environ["PYTHONUNBUFFERED"] = "1"
    if "ATTUNE_PYTHON_SITE" not in os.environ:
        import site
        os.environ["ATTUNE_PYTHON_SITE"] = ":".join(site.getsitepackages() + sys.path)
    if args.job_limit is None:
        args.job_limit = 120.0 if args.dry_run else 20.0
    if args.time_limit is None:
        args.time_limit = 120.0 if args.dry_run else 60.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    common(r)
    r.add_argument("--out", required=True, help="report.md, summary.txt, run.tgz (rewritten after every step)")
    r.add_argument("--deadline", type=int, default=420, help="seconds for the whole run (default 420)")
    r.add_argument("--only", type=lambda s: s.split(","), help="run only these steps (comma-separated)")
    r.add_argument("--skip", type=lambda s: s.split(","), help="leave these steps out")
    s = sub.add_parser("step")
    s.add_argument("name")
    common(s)
    s.add_argument("--step-deadline", type=float, required=True)
    w = sub.add_parser("worker")
    w.add_argument("--jobs", required=True)
    w.add_argument("--results", required=True)
    w.add_argument("--first", type=int, default=0)
    w.add_argument("--work", required=True)
    w.add_argument("--dry-run", action="store_true")
    k = sub.add_parser("kernels")
    common(k)
    h = sub.add_parser("hash")
    h.add_argument("root")
    t = sub.add_parser("selftest-emu")
    t.add_argument("--lib", required=True)
    args = ap.parse_args()

    if args.command == "hash":
        print(source_hash(os.path.abspath(args.root)))
        return 0
    if args.command == "selftest-emu":
        os.environ["ATTUNE_LIBRARY"] = os.path.abspath(args.lib)
        import selftest
        return selftest.run()
    if args.command == "worker":
        import worker
        return worker.main(args)
    if not args.work:
        args.work = tempfile.mkdtemp(prefix="attune-gpu-check.")
    os.makedirs(args.work, exist_ok=True)
    args.work = os.path.abspath(args.work)
    setup_env(args)
    if args.command == "run":
        args.out = os.path.abspath(args.out)
        import orchestrate
        return orchestrate.run(args)
    if args.command == "step":
        import steps
        return steps.STEPS[args.name](args)
    if args.command == "kernels":
        import kernels
        return kernels.write(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
