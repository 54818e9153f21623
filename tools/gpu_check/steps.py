"""The steps of a GPU check, each run in its own process group by
orchestrate.py. A step writes WORK/NAME.json (its record: rows, status) and
WORK/NAME.md (its report section) after every row, and prints each row as
one line to stdout (marked "@row "), which the orchestrator relays.
"""
import json
import math
import os
import subprocess
import sys
import time

import isolate
import plan
from records import atomic_write, load

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


class Step:
    def __init__(self, args, name, title):
        self.args, self.name = args, name
        self.record = {"step": name, "title": title, "ok": True, "rows": [], "notes": []}
        self.lines = ["## " + title, ""]
        self.flush()

    def text(self, *lines):
        self.lines += list(lines)
        self.flush()

    def row(self, line, short=None, **values):
        """A measured row: a report line, its values, and one stdout line."""
        self.lines.append(line)
        self.record["rows"].append(values)
        print("@row %s: %s" % (self.name, short or line.strip("| ").replace(" | ", "  ")), flush=True)
        self.flush()

    def fail(self, why=None):
        self.record["ok"] = False
        if why:
            self.record["notes"].append(why)

    def flush(self):
        atomic_write(os.path.join(self.args.work, self.name + ".json"), json.dumps(self.record, indent=1,
                                                                                      default=str))
        atomic_write(os.path.join(self.args.work, self.name + ".md"), "\n".join(self.lines) + "\n")

    def done(self):
        return 0 if self.record["ok"] else 1


def worker_env(args, bounded):
    env = dict(os.environ)
    if bounded and not args.dry_run:
        env["ATTUNE_WAIT_BOUND_MS"] = str(args.wait_bound_ms)
    else:
        env.pop("ATTUNE_WAIT_BOUND_MS", None)
    return env


def program_env(args, **extra):
    """The environment of a test program: in the rehearsal without the fake
    driver, so its GPU halves skip (the fake runs nothing) and its emulator
    halves run."""
    env = dict(os.environ, **extra)
    if args.dry_run:
        env.pop("ATTUNE_LIBCUDA", None)
    return env


def jobs_in_worker(args, st, jobs, name, job_limit, bounded=False):
    """Runs jobs isolated (isolate.run_jobs) within the step's deadline,
    printing each partial measurement as it comes."""

    def on_event(i, rec):
        if rec["event"] in ("hung", "crashed"):
            print("@row %s: %s %s: %s" % (st.name, jobs[i]["name"], rec["event"].upper(), rec["message"]), flush=True)
        elif rec["event"] == "error":
            print("@row %s: %s ERROR: %s" % (st.name, jobs[i]["name"], rec.get("message", "")[:300]), flush=True)

    return isolate.run_jobs(jobs, args.work, name, job_limit, args.step_deadline - 2, args.dry_run, on_event,
                            worker_env(args, bounded))


def finished(st, results):
    """The results of jobs that ran to the end (passed or failed their check);
    a job that hung, died or raised fails the step with its lines."""
    for r in results:
        if r["status"] in ("ok", "failed"):
            yield r
        else:
            st.fail(r["name"])
            st.text(*failure_lines(r))


def failure_lines(r):
    """Report lines for a job that did not pass: what, where, and why."""
    job = r.get("job", {})
    lines = ["", "**%s** (%s): %s" % (r["name"], r["status"], (r.get("message") or
                                                               r.get("result", {}).get("text", "")))]
    if r.get("wait_report"):
        lines.append("- wait report: " + r["wait_report"])
    res = r.get("result", {})
    if res.get("variant"):
        lines.append("- variant `%s`, %s" % (res["variant"], res.get("shape", "")))
    elif job.get("variant"):
        lines.append("- variant `%s`" % job["variant"])
    if job.get("case"):
        lines.append("- case " + json.dumps(job["case"]))
    if res.get("verdict"):
        lines.append("- **" + res["verdict"] + "**")
    if res.get("emulator"):
        lines.append("- emulator: " + res["emulator"].get("text", ""))
    if res.get("npy"):
        lines.append("- arrays in run.tgz: npy/" + res["npy"])
    if res.get("diagnosis_lines"):
        lines += ["", "```"] + res["diagnosis_lines"] + ["```"]
    if r.get("log_tail"):
        lines += ["", "```", r["log_tail"].rstrip()[-1500:], "```"]
    if r.get("partials"):
        lines.append("- last words: " + json.dumps(r["partials"][-1])[:300])
    return lines


# ------------------------------------------------------------------ facts

def step_facts(args):
    st = Step(args, "facts", "Device and software")
    facts = {"dry_run": args.dry_run}
    if not args.dry_run:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,"
                              "clocks.sm,memory.total,power.limit,temperature.gpu", "--format=csv,noheader"],
                             capture_output=True, text=True)
        keys = ["name", "driver", "max_sm_clock", "max_memory_clock", "sm_clock", "memory", "power_limit",
                "temperature"]
        if smi.returncode == 0 and smi.stdout.strip():
            facts.update(dict(zip(keys, [x.strip() for x in smi.stdout.splitlines()[0].split(",")])))
        import torch
        props = torch.cuda.get_device_properties(0)
        facts.update({"torch": torch.__version__, "torch_cuda": torch.version.cuda,
                      "sm_count": props.multi_processor_count, "compute_capability": "%d.%d" % (props.major,
                                                                                               props.minor),
                      "device_name": props.name, "total_memory_gib": round(props.total_memory / 2**30, 1),
                      "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1)})
    else:
        import torch
        facts.update({"torch": torch.__version__, "device_name": "none (rehearsal: emulator and fake driver)"})
    doctor = subprocess.run([args.attune, "doctor"], capture_output=True, text=True)
    facts["doctor"] = doctor.stdout
    with open(os.path.join(args.bundle, "BUNDLE")) as f:
        facts["bundle"] = f.read()
    st.record["facts"] = facts
    st.text("| fact | value |", "|---|---|")
    for k in ["device_name", "compute_capability", "sm_count", "max_sm_clock", "sm_clock", "max_memory_clock",
              "memory", "total_memory_gib", "l2_mib", "power_limit", "temperature", "driver", "torch", "torch_cuda"]:
        if k in facts:
            st.row("| %s | %s |" % (k, facts[k]), "%s = %s" % (k, facts[k]), fact=k, value=facts[k])
    st.text("", "`attune doctor`:", "", "```", doctor.stdout.rstrip(), "```")
    if doctor.returncode != 0 or (not args.dry_run and "gpu use:         ready" not in doctor.stdout):
        st.fail("attune doctor does not say the GPU is ready")
    return st.done()


# ------------------------------------------------------------------ compile ahead

def step_compile(args):
    """Every kernel the run launches, compiled before the first launch: the
    carried cache answers when NVRTC matches; otherwise all cores compile."""
    st = Step(args, "compile", "Kernels compiled ahead of any launch")
    listing = os.path.join(args.bundle, "kernels.txt")
    if not os.path.exists(listing):
        st.text("No kernels.txt in the bundle: kernels compile at their first launch.")
        return st.done()
    jobs = str(os.cpu_count() or 2)
    for bounded in (False, True):
        env = worker_env(args, bounded)
        ids = os.path.join(args.bundle, "kernels.bounded.txt" if bounded else "kernels.txt")
        if not os.path.exists(ids):
            continue
        start = time.time()
        r = subprocess.run([args.attune, "variants", "compile", "--from", ids, "--arch", "sm_90a", "--jobs", jobs],
                           capture_output=True, text=True, env=env)
        summary = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        label = "bounded waits" if bounded else "production"
        st.row("| %s | %s | %.1f s |" % (label, summary, time.time() - start), "%s: %s" % (label, summary),
               build=label, summary=summary, seconds=time.time() - start, rc=r.returncode)
        with open(os.path.join(args.work, "compile.%s.log" % ("bounded" if bounded else "production")), "w") as f:
            f.write(r.stdout + r.stderr)
        if r.returncode != 0:
            st.fail("%s: %s" % (label, r.stderr.strip()[-500:]))
    return st.done()


# ------------------------------------------------------------------ smoke

def step_smoke(args):
    """One small flash_fwd (FlashAttention-2-style) launch and one dispatched
    (flash_fwd_sm90 on Hopper) launch, against the fp64 oracle."""
    st = Step(args, "smoke", "Smoke: compile, load, launch")
    d = 64
    fa2 = plan.fa2_style(plan.listed(args.attune, d, "sm_90a", "flash_fwd"), d)
    case = dict(b=1, sq=64, sk=64, hq=2, hkv=2, d=d, dtype="bf16", mask="causal")
    jobs = [{"name": "smoke.flash_fwd", "kind": "fwd_check", "case": case, "variant": fa2},
            {"name": "smoke.dispatched", "kind": "fwd_check", "case": case, "variant": None}]
    return report_checks(args, st, jobs, "smoke", args.job_limit)


def report_checks(args, st, jobs, name, limit, bounded=False):
    st.text("| job | variant | status | errors |", "|---|---|---|---|")
    results = jobs_in_worker(args, st, jobs, name, limit, bounded)
    failures = []
    for r in results:
        res = r.get("result", {})
        variant = res.get("variant") or r["job"].get("variant") or "dispatched"
        detail = res.get("text") or r.get("message", "")
        st.row("| %s | `%s` | %s | %s |" % (r["name"], variant, r["status"], detail[:160]),
               "%s %s %s" % (r["name"], r["status"].upper(), detail[:120]), name=r["name"], variant=variant,
               status=r["status"], detail=detail, seconds=r.get("seconds"))
        if r["status"] != "ok":
            failures.append(r)
    st.record["results"] = results
    if failures:
        st.fail("%d of %d jobs did not pass" % (len(failures), len(results)))
        st.text("", "### What did not pass")
        for r in failures:
            st.text(*failure_lines(r))
    return st.done()


# ------------------------------------------------------------------ Hopper primitives

def step_primitives(args):
    """Each Hopper primitive on the hardware next to the emulator on the same
    inputs (tests/runtime/hopper_gpu_test.cpp), then a wait that can never
    complete, built with the wait bound: it must trap and name its barrier."""
    st = Step(args, "primitives", "Hopper primitives: hardware against the emulator")
    program = os.path.join(args.bundle, "tests", "hopper_gpu_test")
    if not os.path.exists(program):
        st.fail("no tests/hopper_gpu_test in the bundle")
        return st.done()
    env = program_env(args, ATTUNE_SOURCE_DIR=ROOT)
    st.text("| check | result | message |", "|---|---|---|")
    runs = [("HopperGpuTest.*", {}), ("HopperWaitBoundGpuTest.*", {"ATTUNE_WAIT_BOUND_MS": "200"})]
    for filt, extra in runs:
        out = os.path.join(args.work, "primitives.%s.json" % filt.split(".")[0])
        try:
            r = subprocess.run([program, "--gtest_filter=" + filt, "--gtest_output=json:" + out],
                               capture_output=True, text=True, env=dict(env, **extra), timeout=args.job_limit)
            log, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            log, rc = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""), \
                "timeout"
        with open(os.path.join(args.work, "primitives.%s.log" % filt.split(".")[0]), "w") as f:
            f.write(log)
        tests = _gtest_results(out)
        if not tests:
            st.row("| %s | %s | %s |" % (filt, "FAILED (exit %s)" % rc, _last(log)), "%s exit %s" % (filt, rc),
                   check=filt, status="no results", rc=rc)
            st.fail("%s: exit %s" % (filt, rc))
        for t in tests:
            st.row("| %s | %s | %s |" % (t["name"], t["status"], t["message"][:300].replace("\n", " ")),
                   "%s %s %s" % (t["name"], t["status"], t["message"][:150].replace("\n", " ")), **t)
            if t["status"] == "FAILED":
                st.fail(t["name"])
    return st.done()


def _gtest_results(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    out = []
    for suite in data.get("testsuites", []):
        for t in suite.get("testsuite", []):
            failures = t.get("failures", [])
            status = "FAILED" if failures else ("SKIPPED" if t.get("result") == "SKIPPED" else "ok")
            msg = " / ".join(x.get("failure", "") for x in failures)
            if status == "SKIPPED":
                msg = t.get("skipped", {}).get("message", "") if isinstance(t.get("skipped"), dict) else msg
            out.append({"name": suite["name"] + "." + t["name"], "status": status, "message": msg,
                        "time": t.get("time", "")})
    return out


def _last(text, chars=200):
    return text.strip().replace("\n", " ")[-chars:]


# ------------------------------------------------------------------ flash_fwd_sm90 correctness

def step_sm90(args):
    st = Step(args, "sm90", "flash_fwd_sm90 correctness (dispatched variants; bounded waits)")
    return report_checks(args, st, plan.sm90_check_jobs(args.dry_run), "sm90", args.job_limit, bounded=True)


def step_sweep_check(args):
    st = Step(args, "sweep", "Variants to be timed, checked first (bounded waits)")
    ids = plan.sweep_ids(args.attune, args.dry_run, args.sweep)
    st.record["ids"] = ids
    return report_checks(args, st, plan.sweep_check_jobs(ids, args.dry_run), "sweep", args.job_limit, bounded=True)


# ------------------------------------------------------------------ ceilings

def step_ceilings(args):
    st = Step(args, "ceilings", "Ceilings measured in this run")
    import torch
    dev = "cpu" if args.dry_run else "cuda"
    nbytes = (1 << 20) if args.dry_run else (1 << 30)
    src = torch.empty(nbytes // 2, device=dev, dtype=torch.bfloat16).normal_()
    dst = torch.empty_like(src)
    ms, spread = _median_ms(lambda: dst.copy_(src), args.dry_run)
    copy = 2 * nbytes / (ms * 1e-3)
    del src, dst
    n = 256 if args.dry_run else 8192
    a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
    gms, gspread = _median_ms(lambda: a @ b, args.dry_run)
    gemm = 2.0 * n ** 3 / (gms * 1e-3) / 1e12
    st.record.update({"copy_bytes_per_s": copy, "gemm_bf16_tflops": gemm})
    st.text("| ceiling | value | median ms (spread) |", "|---|---|---|")
    st.row("| device copy, %d MiB (read + write) | %.0f GB/s | %.3f (%.3f) |" % (nbytes >> 20, copy / 1e9, ms, spread),
           "copy %.0f GB/s" % (copy / 1e9), ceiling="copy", value=copy, ms=ms, spread=spread)
    st.row("| bf16 GEMM %d^3 (torch.matmul, random inputs) | %.0f TFLOP/s | %.3f (%.3f) |" % (n, gemm, gms, gspread),
           "bf16 GEMM %.0f TFLOP/s" % gemm, ceiling="gemm", value=gemm, ms=gms, spread=gspread)
    return st.done()


def _median_ms(fn, dry, reps=20):
    import statistics
    import torch
    for _ in range(3):
        fn()
    times = []
    for _ in range(5 if dry else reps):
        if dry:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
            continue
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), max(times) - min(times)


# ------------------------------------------------------------------ forward speed

def step_forward(args):
    """flash_fwd_sm90's heuristic and the checked sweep, FlashAttention-2-style
    flash_fwd and SDPA (flash, cuDNN), same inputs, same process."""
    st = Step(args, "forward", "Forward speed (Hopper family first)")
    sweep = load(args.work, "sweep") or {}
    ids = {int(d): v for d, v in (sweep.get("ids") or {}).items()}
    rows = sweep.get("rows", [])
    passed = {r["variant"] for r in rows if r.get("status") == "ok"} - \
        {r["variant"] for r in rows if r.get("status") != "ok"}
    if not ids:
        ids = plan.sweep_ids(args.attune, args.dry_run, args.sweep)
        st.text("(no sweep check ran: timing the heuristic and SDPA only)", "")
    gemm = (load(args.work, "ceilings") or {}).get("gemm_bf16_tflops")
    jobs = []
    for d in sorted(ids):
        sm90_ids, fa2 = ids[d]
        chosen = [v for v in sm90_ids + ([fa2] if fa2 else []) if v in passed]
        for dtype in (("bf16",) if args.dry_run else plan.DTYPES):
            cases = [("causal" if causal else "full", plan.timing_case(d, dtype, causal, args.dry_run))
                     for causal in (False, True)]
            if (d in plan.SCHEDULER_TWINS or args.dry_run) and dtype == "bf16":
                cases.append(("varlen", plan.varlen_timing_case(d, dtype, args.dry_run)))
            for label, case in cases:
                jobs.append({"name": "time.d%d.%s.%s" % (d, dtype, label), "kind": "fwd_time", "case": case,
                             "variants": chosen, "fa2": fa2, "launches": 1 if args.dry_run else 8,
                             "reps": 1 if args.dry_run else 7, "sets": 1 if args.dry_run else 4})
    st.text("B %s, H %s, S %s; per-launch median ms of %s back-to-back launches between two events, %s times, "
            "inputs rotated among %s sets; only variants that passed the sweep check are timed. %% of GEMM: best "
            "attune against the bf16 GEMM ceiling (%s)." % (
                jobs[0]["case"]["b"], jobs[0]["case"]["hq"], jobs[0]["case"]["sq"], jobs[0]["launches"],
                jobs[0]["reps"], jobs[0]["sets"], "%.0f TFLOP/s" % gemm if gemm else "not measured"), "",
            "| d | dtype | mask | sm90 heuristic | TFLOP/s | best sm90 | TFLOP/s | flash_fwd (FA2) | SDPA flash | "
            "SDPA cuDNN | best sm90 / best SDPA | % of GEMM | SM MHz |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = jobs_in_worker(args, st, jobs, "forward", args.time_limit)
    for r in results:
        job = r["job"]
        case = job["case"]
        mask = case["mask"] + (" packed" if case.get("cu_q") else "")
        if r["status"] != "ok":
            st.row("| %d | %s | %s | %s: %s | | | | | | | | | |" % (case["d"], case["dtype"], mask, r["status"],
                                                                  (r.get("message") or "")[:200]),
                   "%s %s %s" % (r["name"], r["status"].upper(), (r.get("message") or "")[:150]), name=r["name"],
                   status=r["status"], message=r.get("message"), partials=r.get("partials"))
            st.fail(r["name"])
            continue
        res = r["result"]
        rows = res["rows"]
        heur = rows["heuristic"]
        sm90 = [(x["ms"], x["variant"]) for k, x in rows.items()
                if "ms" in x and x.get("variant", "").startswith("flash_fwd_sm90/")]
        best = min(sm90) if sm90 else (float("nan"), "-")
        fa2 = rows.get(job.get("fa2") or "", {})
        sdpa = [rows[k]["ms"] for k in ("sdpa_flash", "sdpa_cudnn") if "ms" in rows.get(k, {})]
        ratio = min(sdpa) / best[0] if sdpa and math.isfinite(best[0]) else float("nan")
        fl = res["flops"]
        share = 100 * _tf(fl, best[0]) / gemm if gemm else float("nan")
        line = "| %d | %s | %s | %s `%s` | %.0f | %s `%s` | %.0f | %s | %s | %s | %.2f | %.0f%% | %s |" % (
            case["d"], case["dtype"], mask, _ms(heur.get("ms")), heur.get("variant", "?"),
            _tf(fl, heur.get("ms")), _ms(best[0]), best[1], _tf(fl, best[0]), _ms(fa2.get("ms")),
            _ms(rows.get("sdpa_flash", {}).get("ms")), _ms(rows.get("sdpa_cudnn", {}).get("ms")), ratio, share,
            res.get("sm_clock_mhz"))
        short = "d%d %s %s: heuristic %.0f TFLOP/s, best sm90 %.0f (%s), FA2 %.0f, SDPA flash %.0f, cuDNN %.0f, " \
                "best/SDPA %.2f" % (case["d"], case["dtype"], mask, _tf(fl, heur.get("ms")), _tf(fl, best[0]),
                                    best[1].split("/")[-1], _tf(fl, fa2.get("ms")),
                                    _tf(fl, rows.get("sdpa_flash", {}).get("ms")),
                                    _tf(fl, rows.get("sdpa_cudnn", {}).get("ms")), ratio)
        st.row(line, short, name=r["name"], d=case["d"], dtype=case["dtype"], mask=mask,
               heuristic=heur.get("variant"), heuristic_ms=heur.get("ms"), heuristic_tflops=_tf(fl, heur.get("ms")),
               best_variant=best[1], best_ms=best[0], best_tflops=_tf(fl, best[0]), fa2_ms=fa2.get("ms"),
               sdpa_flash_ms=rows.get("sdpa_flash", {}).get("ms"), sdpa_cudnn_ms=rows.get("sdpa_cudnn", {}).get("ms"),
               best_over_sdpa=ratio, gemm_share=share, all=rows, sm_clock_mhz=res.get("sm_clock_mhz"))
    scheduler_table(st, results)
    return st.done()


def scheduler_table(st, results):
    """The tile schedulers side by side: each SCHEDULER_TWINS tile's TFLOP/s under each scheduler, per case."""
    lines = []
    for r in results:
        case = r["job"]["case"]
        if r["status"] != "ok" or case["d"] not in plan.SCHEDULER_TWINS:
            continue
        res, twins = r["result"], plan.SCHEDULER_TWINS[case["d"]]
        for tile in sorted({v.split(".bn")[1].split(".")[0] for v in twins}, key=int):
            cells = []
            for sc in range(len(plan.SCHEDULERS)):
                twin = next((v for v in twins if ".bn%s." % tile in v and v.endswith(".sc%d" % sc)), None)
                ms = res["rows"].get(twin, {}).get("ms")
                cells.append("%.0f" % _tf(res["flops"], ms) if ms else "-")
            lines.append("| %d | %s | %s | 128 x %s | %s |" % (case["d"], case["dtype"], r["name"].split(".")[-1],
                                                             tile, " | ".join(cells)))
    if lines:
        st.text("", "Tile schedulers: TFLOP/s of one tile under each (`varlen` case: packed causal sequences of "
                "unequal lengths).", "", "| d | dtype | case | tile | %s |" % " | ".join(plan.SCHEDULERS),
                "|---|---|---|---|" + "---|" * len(plan.SCHEDULERS), *lines)


def _tf(fl, ms):
    return fl / (ms * 1e-3) / 1e12 if ms and isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0 \
        else float("nan")


def _ms(ms):
    return "%.3f" % ms if isinstance(ms, (int, float)) and math.isfinite(ms) else "-"


# ------------------------------------------------------------------ decode, backward

def step_decode(args):
    st = Step(args, "decode", "Split-KV decode (plans, one workspace each)")
    case = plan.decode_case(args.dry_run)
    job = {"name": "decode.d%d" % case["d"], "kind": "decode", "case": case,
           "splits": [0, 1, 4, 16] if args.dry_run else [0, 1, 4, 16, 32, 64],
           "launches": 1 if args.dry_run else 20, "reps": 1 if args.dry_run else 10,
           "sets": 1 if args.dry_run else 2}
    peak = (load(args.work, "ceilings") or {}).get("copy_bytes_per_s")
    st.text("Batch %d, %d cached keys, %d query heads on %d KV heads, d %d, %s; K and V bytes per second against the "
            "copy ceiling (%s)." % (case["b"], case["sk"], case["hq"], case["hkv"], case["d"], case["dtype"],
                                    "%.0f GB/s" % (peak / 1e9) if peak else "not measured"), "",
            "| splits | plan | ms | GB/s of K and V | share of copy |", "|---|---|---|---|---|")
    for r in finished(st, jobs_in_worker(args, st, [job], "decode", args.time_limit)):
        res = r["result"]
        st.row("| correctness | %s | | %s | |" % (res["plan"], res["text"]), "correct=%s %s" % (res["ok"], res["text"]),
               kind="correctness", ok=res["ok"], text=res["text"])
        if not res["ok"]:
            st.fail("decode output wrong")
        for row in res["rows"]:
            if "ms" not in row:
                st.row("| %s | error | %s | | |" % (row["splits"], row.get("error", "")[:200]),
                       "splits %s error %s" % (row["splits"], row.get("error", "")[:120]), **row)
                continue
            share = 100 * row["bytes_per_s"] / peak if peak else float("nan")
            st.row("| %s | %s | %.4f | %.0f | %.0f%% |" % (row["splits"] or "built-in", row["plan"], row["ms"],
                                                         row["bytes_per_s"] / 1e9, share),
                   "splits %s: %.4f ms, %.0f GB/s, %.0f%% of copy" % (row["splits"] or "built-in", row["ms"],
                                                                      row["bytes_per_s"] / 1e9, share),
                   copy_share=share, **row)
    return st.done()


def step_backward(args):
    st = Step(args, "backward", "Backward (plans: flash_bwd_sm90 on sm_90a, flash_bwd elsewhere)")
    checks_, timing = plan.bwd_cases(args.dry_run)
    jobs = [{"name": "bwd.check.d%d.%s.%d" % (c["d"], c["mask"], c["sq"]), "kind": "bwd", "case": c, "check": True}
            for c in checks_]
    jobs += [{"name": "bwd.time.d%d.%s" % (c["d"], c["mask"]), "kind": "bwd", "case": c, "check": False,
              "time": True, "launches": 1 if args.dry_run else 5, "reps": 2 if args.dry_run else 7}
             for c in timing]
    st.text("Correctness: relative error of dQ, dK, dV against fp64 autograd. Timing: per-launch median ms of plans "
            "(O and LSE precomputed); TFLOP/s from 2.5x the forward's FLOPs; the deterministic plan's gradients "
            "compared bitwise between two runs.", "",
            "| job | plan | result | attune ms | TFLOP/s | deterministic ms | SDPA flash bwd ms | SDPA cuDNN bwd ms | "
            "SDPA flash / attune |",
            "|---|---|---|---|---|---|---|---|---|")
    for r in finished(st, jobs_in_worker(args, st, jobs, "backward", args.time_limit)):
        res = r["result"]
        if "errors" in res:
            e = res["errors"]
            st.row("| %s | %s | dQ %.2e, dK %.2e, dV %.2e %s | | | | | | |" % (
                r["name"], res["plan"], e["dq"], e["dk"], e["dv"], "ok" if res["ok"] else "FAIL"),
                "%s dQ %.2e dK %.2e dV %.2e %s" % (r["name"], e["dq"], e["dk"], e["dv"], "ok" if res["ok"] else "FAIL"),
                name=r["name"], **res)
            if not res["ok"]:
                st.fail(r["name"])
        if "ms" in res:
            bitwise = res.get("deterministic_bitwise", False)
            st.row("| %s | %s | deterministic runs %s | %.3f | %.0f | %.3f | %s | %s | %.2f |" % (
                r["name"], res["plan"], "bitwise equal" if bitwise else "DIFFER", res["ms"], res["tflops"],
                res["deterministic_ms"], _ms(res["sdpa_flash_ms"]),
                _ms(res.get("sdpa_cudnn_ms", float("nan"))), res["sdpa_flash_ms"] / res["ms"]),
                "%s %.0f TFLOP/s, SDPA/attune %.2f" % (r["name"], res["tflops"], res["sdpa_flash_ms"] / res["ms"]),
                name=r["name"], **{k: v for k, v in res.items() if k != "case"})
            if not bitwise:
                st.fail(r["name"] + " (deterministic runs differ)")
    return st.done()


def step_dropout(args):
    st = Step(args, "dropout", "Dropout (forward and backward with p = %g)" % plan.DROPOUT_P)
    checks_, timing = plan.dropout_cases(args.dry_run)
    jobs = [{"name": "dropout.check.d%d.%s" % (c["d"], c["mask"]), "kind": "dropout", "case": c, "check": True,
             "p": plan.DROPOUT_P} for c in checks_]
    jobs += [{"name": "dropout.time.d%d.%s" % (c["d"], c["mask"]), "kind": "dropout", "case": c, "p": plan.DROPOUT_P,
              "launches": 1 if args.dry_run else 5, "reps": 2 if args.dry_run else 7} for c in timing]
    st.text("Correctness: the dispatched forward against the fp64 oracle with the host's copy of the mask (the "
            "accuracy rule), the backward plan's dQ, dK, dV against float64 autograd of the same formula. Timing: "
            "per-launch median ms of plans with and without dropout on the same inputs, and SDPA flash's.", "",
            "| job | variant | result | plain fwd ms | dropout fwd ms | plain bwd ms | dropout bwd ms | "
            "SDPA flash fwd ms (plain / dropout) | SDPA flash bwd ms (plain / dropout) |",
            "|---|---|---|---|---|---|---|---|---|")
    for r in finished(st, jobs_in_worker(args, st, jobs, "dropout", args.time_limit)):
        res = r["result"]
        if "errors" in res:
            e = res["errors"]
            verdict = "%s; dQ %.2e, dK %.2e, dV %.2e %s" % (res["text"], e["dq"], e["dk"], e["dv"],
                                                             "ok" if res["ok"] else "FAIL")
            st.row("| %s | %s | %s | | | | | | |" % (r["name"], res["variant"], verdict),
                   "%s %s" % (r["name"], verdict), name=r["name"], **{k: v for k, v in res.items() if k != "case"})
            if not res["ok"]:
                st.fail(r["name"])
        if "plain" in res:
            a, b = res["plain"], res["dropout"]
            sp, sd = res.get("sdpa_flash_plain", {}), res.get("sdpa_flash_dropout", {})
            st.row("| %s | %s | | %.3f | %.3f | %.3f | %.3f | %s / %s | %s / %s |" % (
                r["name"], res["variant"], a["fwd_ms"], b["fwd_ms"], a["bwd_ms"], b["bwd_ms"],
                _ms(sp.get("fwd_ms", float("nan"))), _ms(sd.get("fwd_ms", float("nan"))),
                _ms(sp.get("bwd_ms", float("nan"))), _ms(sd.get("bwd_ms", float("nan")))),
                "%s dropout/plain fwd %.2f bwd %.2f" % (r["name"], b["fwd_ms"] / a["fwd_ms"], b["bwd_ms"] / a["bwd_ms"]),
                name=r["name"], **{k: v for k, v in res.items() if k != "case"})
    return st.done()


def step_fp8(args):
    st = Step(args, "fp8", "FP8 inputs (e4m3 forward, decode over an e4m3 paged cache)")
    checks_, timing = plan.fp8_cases(args.dry_run)

    def name(kind, c):
        return "fp8.%s.%s.d%d.%s" % (kind, c["op"], c["d"], c.get("mask", "paged"))
    jobs = [{"name": name("check", c), "kind": "fp8", "case": c} for c in checks_]
    jobs += [{"name": name("time", c), "kind": "fp8", "case": c, "time": True,
              "launches": 1 if args.dry_run else 10, "reps": 2 if args.dry_run else 7} for c in timing]
    peak = (load(args.work, "ceilings") or {}).get("copy_bytes_per_s")
    st.text("Correctness: the plan's O and LSE against the fp64 oracle on the dequantized inputs (descales 1; the "
            "accuracy rule with the naive bf16 attention). Timing: per-launch median ms of plans on the same values "
            "in e4m3 and in bf16; the forward beside SDPA's fastest bf16 backend, decode's K and V bytes per second "
            "(1 byte an e4m3 element) against the copy ceiling (%s)." % (
                "%.0f GB/s" % (peak / 1e9) if peak else "not measured"), "",
            "| job | plan | result | e4m3 ms | bf16 ms | bf16 / e4m3 | e4m3 TFLOP/s or GB/s (share of copy) | "
            "bf16 TFLOP/s or GB/s (share of copy) | best SDPA bf16 ms (backend) |",
            "|---|---|---|---|---|---|---|---|---|")
    for r in finished(st, jobs_in_worker(args, st, jobs, "fp8", args.time_limit)):
        res = r["result"]
        st.row("| %s | %s | %s %s | | | | | | |" % (r["name"], res["plan"], res["text"], "ok" if res["ok"] else "FAIL"),
               "%s %s %s" % (r["name"], "ok" if res["ok"] else "FAIL", res["text"]),
               name=r["name"], **{k: v for k, v in res.items() if k not in ("case", "rows")})
        if not res["ok"]:
            st.fail(r["name"])
        rows = res.get("rows")
        if not rows:
            continue
        a, b = rows["fp8"], rows["bf16"]

        def rate(row):
            if "tflops" in row:
                return "%.0f TFLOP/s" % row["tflops"]
            share = 100 * row["bytes_per_s"] / peak if peak else float("nan")
            return "%.0f GB/s (%.0f%%)" % (row["bytes_per_s"] / 1e9, share)
        sdpa = sorted((x["ms"], k) for k, x in rows.items() if k.startswith("sdpa_") and "ms" in x)
        best = "%s (%s)" % (_ms(sdpa[0][0]), sdpa[0][1][5:]) if sdpa else "-"
        st.row("| %s | %s | | %s | %s | %.2f | %s | %s | %s |" % (
            r["name"], a["plan"], _ms(a["ms"]), _ms(b["ms"]), b["ms"] / a["ms"], rate(a), rate(b), best),
            "%s e4m3 %s ms (%s), bf16 %s ms (%s), SDPA best %s" % (r["name"], _ms(a["ms"]), rate(a), _ms(b["ms"]),
                                                                   rate(b), best),
            name=r["name"], fp8=a, bf16=b, bf16_over_fp8=b["ms"] / a["ms"],
            sdpa_best_ms=sdpa[0][0] if sdpa else None, sdpa_best=sdpa[0][1] if sdpa else None,
            fp8_copy_share=a["bytes_per_s"] / peak if peak and "bytes_per_s" in a else None,
            sm_clock_mhz=res.get("sm_clock_mhz"))
    return st.done()


# ------------------------------------------------------------------ python, gtest programs

def step_python(args):
    st = Step(args, "python", "Python package (import attune)")
    r = subprocess.run([sys.executable, os.path.join(HERE, "python_check.py"), "--work", args.work] +
                       (["--dry-run"] if args.dry_run else []), capture_output=True, text=True,
                       timeout=max(5, args.step_deadline - time.time() - 2))
    with open(os.path.join(args.work, "python.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    rows = [json.loads(line[len("@check "):]) for line in r.stdout.splitlines() if line.startswith("@check ")]
    st.text("| check | result |", "|---|---|")
    for row in rows:
        st.row("| %s | %s %s |" % (row["check"], "ok" if row["ok"] else "FAIL", row.get("values", "")),
               "%s: %s %s" % (row["check"], "ok" if row["ok"] else "FAIL", row.get("values", "")), **row)
        if not row["ok"]:
            st.fail(row["check"])
    if r.returncode != 0 and not rows:
        st.fail("exit %s: %s" % (r.returncode, _last(r.stderr, 500)))
        st.text("", "```", r.stderr[-2000:], "```")
    return st.done()


def step_tests(args):
    """The GPU test programs, each under its own limit inside what is left."""
    st = Step(args, "tests", "GPU test programs (fp64 reference on the CPU)")
    listing = os.path.join(args.bundle, "tests", "gpu_tests.list")
    st.text("| program | filter | passed | failed | skipped | status |", "|---|---|---|---|---|---|")
    with open(listing) as f:
        entries = [line.split() for line in f if line.strip() and not line.startswith("#")]
    for program, filt, seconds in entries:
        left = args.step_deadline - time.time() - 3
        if left < 10:
            st.row("| %s | %s | | | | skipped: %.0f s left |" % (program, filt, left), "%s skipped" % program,
                   program=program, status="skipped")
            continue
        out = os.path.join(args.work, "tests.%s.json" % program)
        limit = min(float(seconds), left)
        try:
            r = subprocess.run([os.path.join(args.bundle, "tests", program), "--gtest_filter=" + filt,
                                "--gtest_output=json:" + out], capture_output=True, text=True, timeout=limit,
                               env=program_env(args))
            status, log = ("ok" if r.returncode == 0 else "FAILED (exit %d)" % r.returncode), r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            status, log = "TIMED OUT after %.0f s" % limit, _text(e.stdout)
        with open(os.path.join(args.work, "tests.%s.log" % program), "w") as f:
            f.write(log[-200000:])
        tests = _gtest_results(out)
        counts = {k: sum(1 for t in tests if t["status"] == k) for k in ("ok", "FAILED", "SKIPPED")}
        st.row("| %s | %s | %d | %d | %d | %s |" % (program, filt, counts["ok"], counts["FAILED"], counts["SKIPPED"],
                                                   status),
               "%s: %d passed, %d failed, %d skipped, %s" % (program, counts["ok"], counts["FAILED"],
                                                             counts["SKIPPED"], status),
               program=program, status=status, **counts)
        for t in tests:
            if t["status"] == "FAILED":
                st.text("", "**%s**: %s" % (t["name"], t["message"][:800]))
        if status != "ok":
            st.fail(program)
    return st.done()


def _text(x):
    if x is None:
        return ""
    return x.decode(errors="replace") if isinstance(x, bytes) else x


STEPS = {"facts": step_facts, "compile": step_compile, "smoke": step_smoke, "primitives": step_primitives,
         "sm90": step_sm90, "sweep": step_sweep_check, "ceilings": step_ceilings, "forward": step_forward,
         "decode": step_decode, "backward": step_backward, "dropout": step_dropout, "fp8": step_fp8,
         "python": step_python,
         "tests": step_tests}
