#!/usr/bin/env python3
"""Measures the registers flash_fwd_sm90's consumers use, and writes the
table its variant space is drawn from (templates/flash_fwd_sm90_registers.h:
FlashFwdSm90Tunables::valid admits a head dim, consumer count, key tile and
overlap only where the measured variant spilled nothing and its consumers
stayed within their setmaxnreg budget).

For each head dim, query tile (consumer count), key tile and overlap: the
variant with 2 stages, pingpong where two consumers allow it, no rescale
after, the TMA store (direct stores at d256 with one consumer, where the
store needs more), compiled for sm_90a in bf16 by `attune variants profile
--no-emulate --format json`, once per tile scheduler (one CTA per tile,
static and dynamic persistent, varlen), the worst of the four kept. From its SASS
audit, the consumers' region (after `setmaxnreg` 160 or 240; with one
consumer the entry, which moves no registers) gives the highest register;
every region its spills.

  tools/sm90_registers.py ATTUNE [--out FILE] [--jobs N]

A variant outside the current table does not compile (the template's
static_assert): to refresh, build ATTUNE with FlashFwdSm90Tunables::
kMeasuring set to true, run this with --out templates/flash_fwd_sm90_registers.h,
set kMeasuring back, rebuild (docs/kernels.md). Takes about ten minutes
on two cores. Without kMeasuring it measures the table's own entries
again (the rest do not compile), which is how a new schedule is checked
against it.
"""
import argparse
import concurrent.futures
import json
import subprocess
import sys

HEAD_DIMS = (64, 128, 256)
BLOCK_M = (64, 128, 192)
BLOCK_N = (64, 80, 128, 176)
HEADER = """// The registers flash_fwd_sm90's consumers use, measured on the compiled
// variants (sm_90a, bf16; SASS audit per setmaxnreg region) by
// tools/sm90_registers.py, which writes this file: do not edit by hand.
// FlashFwdSm90Tunables::valid draws the variant space from it.
#pragma once

namespace attune {

struct Sm90RegisterMeasurement {
  int head_dim;
  int consumers;
  int block_n;
  int overlap;
  int highest_register;  // in the consumers' region
  int spills;            // STL and LDL instructions, every region
};

// {head dim, consumers, key tile, overlap, highest register, spills}: the variant
inline constexpr Sm90RegisterMeasurement kSm90Registers[] = {
"""
FOOTER = """};

}  // namespace attune
"""


SCHEDULERS = (0, 1, 2, 3, 4)


def variant_id(d, bm, bn, ov, sc):
    pp = 1 if bm == 128 else 0
    ts = 0 if d == 256 and bm == 64 else 1
    return f"flash_fwd_sm90/d{d}.bm{bm}.bn{bn}.st2.pp{pp}.ov{ov}.ra0.ts{ts}.sc{sc}"


def measure(attune, vid):
    """(highest consumer register, spills) of one variant; None outside the space."""
    r = subprocess.run([attune, "variants", "profile", vid, "--no-emulate", "--format", "json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None  # not in the variant space (shared memory, or the model)
    p = json.loads(r.stdout)
    regions = p["sass_audit"]["regions"]
    # The consumers' region is the one setmaxnreg raises most (with one
    # consumer nothing moves: the entry, limit 0); the budgets themselves
    # live in FlashFwdSm90Tunables alone.
    want = max(x["register_limit"] for x in regions)
    consumer = [x for x in regions if x["register_limit"] == want]
    highest = max(x["highest_register"] for x in consumer) if consumer else -1
    spills = sum(x["spill_stores"] + x["spill_loads"] for x in regions)
    return highest, spills


def row(attune, d, bm, bn, ov):
    """The table's row: the worst scheduler's registers and spills."""
    found = [(m, variant_id(d, bm, bn, ov, sc)) for sc in SCHEDULERS
             for m in [measure(attune, variant_id(d, bm, bn, ov, sc))] if m is not None]
    if not found:
        return None
    (highest, spills), vid = max(found, key=lambda f: (f[0][1], f[0][0]))
    return f"    {{{d}, {bm // 64}, {bn}, {ov}, {highest}, {spills}}},  // {vid.split('/')[1]}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("attune")
    ap.add_argument("--out", default="-")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    ids = [(d, bm, bn, ov) for d in HEAD_DIMS for bm in BLOCK_M for bn in BLOCK_N for ov in (0, 1)]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(lambda v: row(a.attune, *v), ids))
    text = HEADER + "".join(r for r in rows if r is not None) + FOOTER
    if a.out == "-":
        sys.stdout.write(text)
    else:
        with open(a.out, "w") as f:
            f.write(text)
    print(f"sm90_registers: {sum(r is not None for r in rows)} of {len(ids)} variants measured", file=sys.stderr)


if __name__ == "__main__":
    main()
