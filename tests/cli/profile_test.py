#!/usr/bin/env python3
"""`attune variants profile` and `attune variants dump` as a user runs them,
without a GPU: for listed ids of every op (picked across the list), the JSON
has every field with a sane value, the main loop's shared traffic is at its
ideal, and the SASS counts equal what nvdisasm prints for the cubin that
`dump` writes; the text form, sm_80, and refused inputs.

Usage: profile_test.py PATH_TO_ATTUNE
"""
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

from cli_support import Checks, runner


def nvdisasm():
    for path in [os.environ.get("ATTUNE_NVDISASM", ""),
                 os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                              "attune", "tools", "bin", "nvdisasm"),
                 "/usr/local/cuda/bin/nvdisasm"]:
        if path and os.access(path, os.X_OK):
            return path
    return None


LINE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[0-9T]+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?")


def count_sass(text):
    """An independent count of nvdisasm's output: opcode before its first dot."""
    counts = collections.Counter()
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            counts[m.group(1)] += 1
            if m.group(1) == "MUFU" and (m.group(2) or "").startswith(".EX2"):
                counts["MUFU.EX2"] += 1
            if m.group(1) == "UTMALDG" and ".MULTICAST" in (m.group(2) or ""):
                counts["UTMALDG.MULTICAST"] += 1
    return counts


def listed(run, op, d, arch="sm_90a"):
    out = run("variants", "list", "--op", op, "--dk", str(d), "--dv", str(d), "--arch", arch).stdout
    ids = [line.split()[0] for line in out.splitlines() if line.startswith("flash_")]
    return [ids[0], ids[len(ids) // 2], ids[-1]] if len(ids) > 2 else ids


def main():
    attune = os.path.abspath(sys.argv[1])
    run = runner(attune, timeout=600)
    checks = Checks()
    tool = nvdisasm()
    checks.check(tool is not None, "nvdisasm is installed (tools/setup.sh)")
    ids = listed(run, "fwd", 64) + listed(run, "fwd", 128)[:1] + listed(run, "decode", 64)[:2] + \
        listed(run, "bwd", 64)[:2]
    with tempfile.TemporaryDirectory(prefix="attune_profile_") as tmp:
        for vid in ids:
            r = run("variants", "profile", vid, "--arch", "sm_90a", "--format", "json")
            if not checks.check(r.returncode == 0, "profile %s: exit 0 (%s)" % (vid, r.stderr.strip()[:200])):
                continue
            p = json.loads(r.stdout)
            fields = ["variant", "arch", "registers", "spill_bytes", "shared_bytes", "ctas_per_sm", "sass",
                      "per_key_tile", "bound"]
            checks.check(all(f in p for f in fields) and p["variant"] == vid and p["arch"] == "sm_90a",
                         "profile %s: every field" % vid)
            tile = p["per_key_tile"]
            checks.check(all(k in tile for k in ("mma", "smem_wavefronts", "smem_wavefronts_ideal", "ex2", "barriers",
                                                 "global_bytes")) and (tile["mma"] > 0 or tile.get("wgmma", 0) > 0)
                         and tile["ex2"] > 0,
                         "profile %s: per key tile mma %s, wgmma %s, ex2 %s" % (
                             vid, tile.get("mma"), tile.get("wgmma"), tile.get("ex2")))
            checks.check(tile["smem_wavefronts"] <= 1.05 * tile["smem_wavefronts_ideal"],
                         "profile %s: main-loop shared wavefronts %s for an ideal of %s" % (
                             vid, tile["smem_wavefronts"], tile["smem_wavefronts_ideal"]))
            b = p["bound"]
            checks.check(b["limiter"] in ("tensor", "shared", "mufu", "issue") and b["tflops"] > 0,
                         "profile %s: bound %s TFLOP/s, %s-limited" % (vid, round(b["tflops"]), b["limiter"]))
            checks.check(p["registers"] > 0 and p["ctas_per_sm"] >= 1, "profile %s: %d registers, %d CTAs per SM" % (
                vid, p["registers"], p["ctas_per_sm"]))
            if tool is None:
                continue
            out = os.path.join(tmp, vid.replace("/", "_"))
            d = run("variants", "dump", vid, "--arch", "sm_90a", "--out", out)
            files = ["source.cu", "kernel.ptx", "kernel.cubin", "ptxas.log"]
            checks.check(d.returncode == 0 and all(os.path.getsize(os.path.join(out, f)) > 0 for f in files),
                         "dump %s: %s" % (vid, ", ".join(files)))
            sass = subprocess.run([tool, "-c", os.path.join(out, "kernel.cubin")], capture_output=True, text=True).stdout
            want = count_sass(sass)
            got = p["sass"]
            same = all(got.get(op, 0) == want.get(op, 0) for op in set(want) | set(got))
            # mma.sync (HMMA), or wgmma (HGMMA) for the Hopper family.
            checks.check(same and (want["HMMA"] > 0 or want["HGMMA"] > 0),
                         "profile %s: SASS counts equal nvdisasm's (HMMA %d, HGMMA %d, LDSM %d, MUFU.EX2 %d)" % (
                             vid, want["HMMA"], want["HGMMA"], want["LDSM"], want["MUFU.EX2"]))
            checks.check("sm_90a" in open(os.path.join(out, "kernel.ptx")).read(), "dump %s: PTX for sm_90a" % vid)
        text = run("variants", "profile", ids[0], "--arch", "sm_90a")
        checks.check(text.returncode == 0 and "bound:" in text.stdout and "per key tile" in text.stdout,
                     "profile text format")
        # The audit per setmaxnreg region and MMA loop (issue 33): the Hopper
        # consumers' raised budget, the producer's lowered one, the main loop.
        hopper = "flash_fwd_sm90/d128.bm128.bn128.st2.pp1.ov1.ra0.ts1.sc0"
        r = run("variants", "profile", hopper, "--arch", "sm_90a", "--format", "json")
        if tool is not None and checks.check(r.returncode == 0, "profile %s" % hopper):
            audit = json.loads(r.stdout)["sass_audit"]
            limits = {g["register_limit"]: g for g in audit["regions"]}
            checks.check(set(limits) == {0, 240, 24} and limits[240]["highest_register"] < 240 and
                         limits[24]["highest_register"] < 24 and
                         all(g["spill_stores"] + g["spill_loads"] == 0 for g in audit["regions"]),
                         "audit %s: regions %s" % (hopper, [(g["register_limit"], g["highest_register"])
                                                            for g in audit["regions"]]))
            loops = audit["mma_loops"]
            checks.check(len(loops) >= 1 and all(any(k.startswith("HGMMA.64x128x16") for k in l["mma_shapes"]) and
                                                 l["instructions"] == round(l["instructions_per_mma"] * l["mma"])
                                                 for l in loops) and
                         all(l["classes"].get("MUFU.EX2", 0) > 0 for l in loops),
                         "audit %s: MMA loops %s" % (hopper, [(l["instructions"], l["mma"]) for l in loops]))
            text = run("variants", "profile", hopper, "--arch", "sm_90a").stdout
            checks.check("after setmaxnreg 240" in text and "mma loop:" in text, "audit in the text format")
        a100 = run("variants", "profile", ids[0], "--arch", "sm_80", "--format", "json", "--sm-count", "108")
        checks.check(a100.returncode == 0 and json.loads(a100.stdout)["bound"]["sm_count"] == 108, "profile on sm_80")
        for args, words in [(["flash_fwd/d64.bm99"], "bm99"), ([ids[0], "--arch", "sm_75"], "sm_75"),
                            ([ids[0], "--format", "xml"], "--format")]:
            r = run("variants", "profile", *args)
            checks.check(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and words in r.stderr,
                         "refused: profile %s (%s)" % (" ".join(args), r.stderr.strip()[:120]))
    return checks.finish()


if __name__ == "__main__":
    sys.exit(main())
