"""Runs kernel jobs in isolated workers (worker.py) and names the culprit
when one hangs or dies.

A worker runs the jobs in order and writes "start" before each launch. This
side reads its results file while it runs: a job that outlasts its limit is
a hang (the worker is killed, SIGKILL), a worker that exits before "done" is
a crash (a sticky CUDA error exits on purpose); either way the job in flight
is recorded with what it printed last, and a fresh worker continues with the
next job. Workers stay in the caller's process group, so a step killed at
its own limit takes its worker with it.
"""
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STICKY_EXIT = 3  # worker.py: a CUDA error recorded, the worker leaves on purpose


def run_jobs(jobs, work, name, job_limit, deadline, dry_run=False, on_event=None, env=None):
    """Results per job, in order: {"status": "ok"|"failed"|"error"|"hung"|"crashed"|"skipped", ...}.

    job_limit: seconds one job may take (a number, or a function of the job);
    deadline: time.time() by which everything must end (later jobs are skipped).
    on_event(i, record): called for every record the worker writes (rows to print)."""
    os.makedirs(work, exist_ok=True)
    jobs_path = os.path.join(work, name + ".jobs.json")
    with open(jobs_path, "w") as f:
        json.dump(jobs, f, indent=1)
    results = [None] * len(jobs)
    partials = [[] for _ in jobs]
    first = 0
    attempt = 0
    while first < len(jobs):
        if time.time() >= deadline:
            break
        attempt += 1
        res_path = os.path.join(work, "%s.results.%d.jsonl" % (name, attempt))
        log_path = os.path.join(work, "%s.worker.%d.log" % (name, attempt))
        cmd = [sys.executable, os.path.join(HERE, "main.py"), "worker", "--jobs", jobs_path, "--results", res_path,
               "--first", str(first), "--work", work] + (["--dry-run"] if dry_run else [])
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        started_at = {}
        current = None
        offset = 0
        killed = None
        while True:
            time.sleep(0.05)
            offset, records = _read_new(res_path, offset)
            for rec in records:
                i = rec["job"]
                if rec["event"] == "start":
                    current, started_at[i] = i, time.time()
                elif rec["event"] == "partial":
                    partials[i].append(rec)
                elif rec["event"] in ("done", "error"):
                    results[i] = _finish(jobs[i], rec, partials[i], time.time() - started_at.get(i, time.time()))
                    current = None
                if on_event:
                    on_event(i, rec)
            rc = proc.poll()
            if rc is not None:
                offset, records = _read_new(res_path, offset)
                for rec in records:  # what it wrote just before exiting
                    i = rec["job"]
                    if rec["event"] in ("done", "error"):
                        results[i] = _finish(jobs[i], rec, partials[i], time.time() - started_at.get(i, time.time()))
                        current = None
                    elif rec["event"] == "start":
                        current, started_at[i] = i, time.time()
                    if on_event:
                        on_event(i, rec)
                break
            now = time.time()
            if current is not None:
                limit = job_limit(jobs[current]) if callable(job_limit) else job_limit
                if now - started_at[current] > limit:
                    killed = "hung: no answer after %.0f s (limit %.0f s); worker killed" % (
                        now - started_at[current], limit)
            if killed is None and now >= deadline:
                killed = "the step's time ran out; worker killed"
            if killed:
                _kill(proc)
                rc = proc.wait()
                break
        # Where did this worker stop?
        done_through = max([i for i in range(len(jobs)) if results[i] is not None] + [first - 1])
        if current is not None and results[current] is None:
            tail = _tail(log_path)
            status = "hung" if killed and "hung" in killed else ("skipped" if killed else "crashed")
            why = killed or "the worker died (exit %s) during this job" % rc
            results[current] = {"name": jobs[current]["name"], "status": status, "message": why, "log_tail": tail,
                                "partials": _strip(partials[current]), "job": _public(jobs[current])}
            if on_event:
                on_event(current, {"job": current, "event": status, "message": why})
            first = current + 1
        elif rc not in (0, None, STICKY_EXIT) and done_through + 1 < len(jobs) and results[done_through + 1] is None \
                and not killed:
            # Died between jobs (at start-up, say): count it against the next one.
            nxt = done_through + 1
            results[nxt] = {"name": jobs[nxt]["name"], "status": "crashed", "job": _public(jobs[nxt]),
                            "message": "the worker exited with %s before finishing this job" % rc,
                            "log_tail": _tail(log_path)}
            first = nxt + 1
        else:
            first = done_through + 1
        if killed and "time ran out" in killed:
            break
    for i, r in enumerate(results):
        if r is None:
            results[i] = {"name": jobs[i]["name"], "status": "skipped", "message": "not run: the step's time ran out",
                          "job": _public(jobs[i])}
    return results


def _finish(job, rec, partials, seconds):
    out = {"name": job["name"], "seconds": round(seconds, 3), "job": _public(job), "partials": _strip(partials)}
    if rec["event"] == "done":
        result = rec["result"]
        out.update(result=result, status="ok" if result.get("ok", True) else "failed")
    else:
        out.update(status="error", message=rec.get("message", ""), sticky=rec.get("sticky", False),
                   wait_report=rec.get("wait_report", ""), error_type=rec.get("type", ""),
                   traceback=rec.get("traceback", ""))
    return out


def _strip(partials):
    return [{k: v for k, v in p.items() if k not in ("job", "event")} for p in partials]


def _public(job):
    return {k: v for k, v in job.items() if k != "save_limit"}


def _read_new(path, offset):
    try:
        with open(path) as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return offset, []
    # Only whole lines: a line being written is read next time.
    end = data.rfind("\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pass
    return offset + end, records


def _tail(path, lines=20, chars=3000):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])[-chars:]
    except OSError:
        return ""


def _kill(proc):
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
