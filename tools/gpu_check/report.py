"""The run's outputs, rewritten atomically after every step (and while a long
step runs): DIR/report.md, DIR/summary.txt and DIR/run.tgz (every raw record,
capped logs, and the arrays of failing small cases), so a run cut at any
point returns what it measured.
"""
import io
import json
import math
import os
import tarfile
import time

from records import atomic_write, load

TGZ_BUDGET = 12 << 20  # bytes of files in run.tgz (the device tool returns 16 MiB per file)
LOG_CAP = 256 << 10    # the tail of each log


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _f(x, fmt="%.0f"):
    return fmt % x if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def summary_lines(run):
    """One screen: the device, the ceilings, every step's status, the Hopper
    table first, then decode, backward and python."""
    work = run["work"]
    out = []
    facts = (load(work, "facts") or {}).get("facts", {})
    out.append("device:   %s, cc %s, %s SMs, SM clock %s (max %s), driver %s, torch %s" % (
        facts.get("device_name", "?"), facts.get("compute_capability", "?"), facts.get("sm_count", "?"),
        facts.get("sm_clock", "?"), facts.get("max_sm_clock", "?"), facts.get("driver", "?"), facts.get("torch", "?")))
    c = load(work, "ceilings") or {}
    if c.get("copy_bytes_per_s"):
        out.append("ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s" % (c["copy_bytes_per_s"] / 1e9,
                                                                        c["gemm_bf16_tflops"]))
    for s in run["steps"]:
        out.append("step %-10s %s" % (s["name"], s.get("status", "not run")))
    for name, label in (("smoke", "smoke"), ("sm90", "sm90 check"), ("sweep", "sweep check")):
        rec = load(work, name)
        if not rec:
            continue
        rows = rec.get("rows", [])
        bad = [r for r in rows if r.get("status") != "ok"]
        out.append("%-11s %d of %d passed" % (label, len(rows) - len(bad), len(rows)))
        results = {r["name"]: r for r in rec.get("results", [])}
        for r in bad[:12]:
            verdict = results.get(r["name"], {}).get("result", {}).get("verdict", "")
            out.append("  %s %s: %s%s" % (r["name"], r["status"].upper(), (r.get("detail") or "")[:110],
                                          (" [" + verdict.split(" (")[0] + "]") if verdict else ""))
        if len(bad) > 12:
            out.append("  ... and %d more (report.md)" % (len(bad) - 12))
    prim = load(work, "primitives")
    if prim:
        for r in prim.get("rows", []):
            out.append("primitive  %s %s" % (r.get("name", r.get("check", "?")), r.get("status", "?")))
    fwd = load(work, "forward")
    if fwd:
        for r in fwd.get("rows", []):
            if "best_tflops" in r:
                out.append("forward d%-3d %-4s %-6s heur %4s, best sm90 %4s TFLOP/s (%s), FA2 %s ms, %sx SDPA, "
                           "%s%% GEMM" % (r["d"], r["dtype"], r["mask"], _f(r["heuristic_tflops"]),
                                          _f(r["best_tflops"]), (r["best_variant"] or "-").split("/")[-1],
                                          _f(r.get("fa2_ms"), "%.3f"), _f(r["best_over_sdpa"], "%.2f"),
                                          _f(r["gemm_share"])))
            elif r.get("status"):
                out.append("forward %s %s" % (r["name"], r["status"].upper()))
    dec = load(work, "decode")
    if dec:
        for r in dec.get("rows", []):
            if r.get("kind") == "correctness":
                out.append("decode   correct: %s" % r["ok"])
            elif "ms" in r and r.get("splits") == 0:
                out.append("decode   built-in splits: %.4f ms, %.0f GB/s, %s%% of copy" % (
                    r["ms"], r["bytes_per_s"] / 1e9, _f(r.get("copy_share"))))
    bwd = load(work, "backward")
    if bwd:
        for r in bwd.get("rows", []):
            if "errors" in r:
                out.append("backward %s %s" % (r["name"], "ok" if r["ok"] else "FAIL"))
            elif "tflops" in r:
                out.append("backward %s %s TFLOP/s, SDPA/attune %s" % (r["name"], _f(r["tflops"]),
                                                                       _f(r["sdpa_flash_ms"] / r["ms"], "%.2f")))
    py = load(work, "python")
    if py:
        for r in py.get("rows", []):
            out.append("python   %s: %s" % (r["check"], "ok" if r["ok"] else "FAIL"))
    tests = load(work, "tests")
    if tests:
        for r in tests.get("rows", []):
            out.append("tests    %s: %s" % (r.get("program"), r.get("status")))
    return out


def write(run, final=False):
    """Rewrites run.tgz, report.md and summary.txt in run["out"], in that order: a kill between two
    writes leaves a report that names no step whose record the tarball lacks."""
    work, out = run["work"], run["out"]
    with open(os.path.join(work, "run.json"), "w") as f:
        json.dump({k: v for k, v in run.items() if k != "procs"}, f, indent=1, default=str)
    atomic_write(os.path.join(out, "run.tgz"), _tgz(work))
    summary = summary_lines(run)
    state = "finished" if final else "in progress (rewritten after every step)"
    lines = ["# GPU check%s" % (" (rehearsal: emulator and fake driver)" if run.get("dry_run") else ""), "",
             "Bundle:", ""] + ["    " + x for x in run.get("bundle_text", "").strip().splitlines()] + [
        "", "Started %s, deadline %d s, %s; elapsed %.0f s." % (
            run["started_text"], run["deadline"], state, time.time() - run["started"]), "",
        "| step | status | seconds | limit |", "|---|---|---|---|"]
    for s in run["steps"]:
        lines.append("| %s | %s | %s | %s |" % (s["name"], s.get("status", "not run"), _f(s.get("seconds")),
                                               _f(s.get("limit"))))
    lines += ["", "## Summary", "", "```"] + summary + ["```"]
    for s in run["steps"]:
        section = _read(os.path.join(work, s["name"] + ".md")).rstrip()
        if not section and "status" not in s:
            continue
        lines += ["", section or "## " + s["name"]]
        if s.get("log_tail") and s.get("status") not in ("ok", None):
            lines += ["", "Last lines of its log:", "", "```", s["log_tail"].rstrip(), "```"]
        if "status" in s:
            lines += ["", "_Step %s: %s in %s s (limit %s s)._" % (s["name"], s["status"], _f(s.get("seconds")),
                                                                   _f(s.get("limit")))]
    atomic_write(os.path.join(out, "report.md"), "\n".join(lines) + "\n")
    atomic_write(os.path.join(out, "summary.txt"), "\n".join(summary) + "\n")


def _tgz(work):
    """The work folder: records and reports first, then logs (tails), then arrays, within the budget."""
    files = []
    for root, _, names in os.walk(work):
        for n in names:
            if n.endswith(".tmp"):
                continue
            path = os.path.join(root, n)
            rel = os.path.relpath(path, work)
            order = 0 if n.endswith((".json", ".md", ".jsonl", ".txt")) else 1 if n.endswith(".log") else 2
            files.append((order, rel, path))
    files.sort()
    buf = io.BytesIO()
    used = 0
    left_out = []
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for order, rel, path in files:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if order == 1 and len(data) > LOG_CAP:
                data = b"[... cut: the last %d bytes ...]\n" % LOG_CAP + data[-LOG_CAP:]
            if used + len(data) > TGZ_BUDGET:
                left_out.append(rel)
                continue
            used += len(data)
            info = tarfile.TarInfo("run/" + rel)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
        if left_out:
            note = ("left out (over the %d MiB budget):\n" % (TGZ_BUDGET >> 20) + "\n".join(left_out) + "\n").encode()
            info = tarfile.TarInfo("run/LEFT_OUT.txt")
            info.size = len(note)
            tar.addfile(info, io.BytesIO(note))
    return buf.getvalue()
