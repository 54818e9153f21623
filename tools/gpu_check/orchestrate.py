"""The GPU check's order, deadline and isolation.

Steps run in order of what they teach (facts, compile ahead, smoke, the
Hopper primitives, flash_fwd_sm90 correctness, the variants to time,
ceilings, forward speed, decode, backward, dropout, fp8, python, the gtest
programs), each
in its own process group under its own limit, cut to what is left of the
overall deadline; a step that no longer fits is skipped and says so. A step
that outlives its limit is killed with its whole group (its workers and
programs too), so nothing keeps the GPU busy while the next step measures.
After every step, and every 15 s inside a long one, report.py rewrites the
outputs atomically. Each measured row is printed on stdout as it comes.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import report

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (limit on a GPU, limit in the rehearsal, fewest seconds worth starting)
STEPS = [
    ("facts", 30, 30, 5),
    ("compile", 90, 120, 10),
    ("smoke", 45, 60, 15),
    ("primitives", 45, 60, 10),
    ("sm90", 90, 120, 20),
    ("sweep", 60, 60, 15),
    ("ceilings", 20, 30, 8),
    ("forward", 100, 90, 20),
    ("decode", 35, 60, 10),
    ("backward", 60, 90, 15),
    ("dropout", 45, 60, 15),
    ("fp8", 30, 60, 10),
    ("python", 40, 60, 15),
    ("tests", 60, 30, 15),
]
RESERVE = 4  # seconds kept for the last rewrite of the outputs


def run(args):
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    try:
        with open(os.path.join(args.bundle, "BUNDLE")) as f:
            bundle_text = f.read()
    except OSError:
        bundle_text = "(no BUNDLE file)"
    chosen = [s for s in STEPS if (not args.only or s[0] in args.only) and s[0] not in (args.skip or [])]
    state = {"out": args.out, "work": args.work, "dry_run": args.dry_run, "deadline": args.deadline,
             "started": started, "started_text": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
             "bundle_text": bundle_text,
             "steps": [{"name": name, "limit": (dry if args.dry_run else real)} for name, real, dry, _ in chosen]}
    deadline = started + args.deadline
    current = {"proc": None}

    def on_term(signum, frame):  # the device tool's limit, or a user's Ctrl-C: keep what was measured
        if current["proc"] is not None:
            _kill_group(current["proc"])
        report.write(state, final=True)
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print("gpu_check: deadline %d s; steps (limit s): %s" % (args.deadline, ", ".join(
        "%s %d" % (s["name"], s["limit"]) for s in state["steps"])), flush=True)
    report.write(state)
    for (name, _, _, least), s in zip(chosen, state["steps"]):
        left = deadline - time.time() - RESERVE
        if left < least:
            s["status"] = "skipped: %.0f s left of the deadline, needs %d" % (max(left, 0), least)
            print("gpu_check: step %s %s" % (name, s["status"]), flush=True)
            report.write(state)
            continue
        limit = min(s["limit"], left)
        s["limit"] = round(limit, 1)
        print("gpu_check: step %s (limit %.0f s)" % (name, limit), flush=True)
        t0 = time.time()
        rc, timed_out, tail = _run_step(args, name, limit, state, current)
        s["seconds"] = round(time.time() - t0, 1)
        s["status"] = ("TIMED OUT after %.0f s (killed with its process group)" % limit if timed_out else
                       "ok" if rc == 0 else "FAILED (exit %s)" % rc)
        if s["status"] != "ok":
            s["log_tail"] = tail
        print("gpu_check: step %s: %s in %.0f s" % (name, s["status"], s["seconds"]), flush=True)
        report.write(state)
    report.write(state, final=True)
    summary = report.summary_lines(state)
    print("\n".join(summary), flush=True)
    print("gpu_check: report in %s (report.md, summary.txt, run.tgz)" % args.out, flush=True)
    return 0 if all(s.get("status") == "ok" for s in state["steps"]) else 1


def _run_step(args, name, limit, state, current):
    log_path = os.path.join(args.work, name + ".log")
    cmd = [sys.executable, os.path.join(HERE, "main.py"), "step", name, "--bundle", args.bundle, "--work", args.work,
           "--step-deadline", "%.3f" % (time.time() + limit), "--wait-bound-ms", str(args.wait_bound_ms),
           "--job-limit", str(args.job_limit), "--time-limit", str(args.time_limit), "--sweep", str(args.sweep)]
    if args.dry_run:
        cmd.append("--dry-run")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True, text=True,
                                bufsize=1)
        current["proc"] = proc
        relay = threading.Thread(target=_relay, args=(proc.stdout, log), daemon=True)
        relay.start()
        timed_out = False
        last_write = time.time()
        end = time.time() + limit
        while proc.poll() is None:
            if time.time() >= end:
                timed_out = True
                _kill_group(proc)
                break
            time.sleep(0.1)
            if time.time() - last_write > 15:
                report.write(state)
                last_write = time.time()
        proc.wait()
        _kill_group(proc)  # whatever it left behind in its group
        relay.join(timeout=2)
        current["proc"] = None
    tail = ""
    try:
        with open(log_path, errors="replace") as f:
            tail = "".join(f.readlines()[-15:])[-2000:]
    except OSError:
        pass
    return proc.returncode, timed_out, tail


def _relay(stream, log):
    """The step's stdout into its log; measured rows ("@row ") also to ours."""
    for line in stream:
        log.write(line)
        log.flush()
        if line.startswith("@row "):
            sys.stdout.write(line[len("@row "):])
            sys.stdout.flush()


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
