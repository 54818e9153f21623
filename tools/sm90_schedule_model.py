#!/usr/bin/env python3
"""Predicts the tail loss of flash_fwd_sm90's tile schedulers from tile
counts alone: each tile's work is the key tiles it runs (a causal m-block i
of a square problem with equal query and key tiles runs i + 1), numbered as
templates/sm90_scheduler.cuh's TileOrder numbers them (L2 sections of the
(batch, head) pairs whose K and V fit in 32 MiB, heaviest m-block first in
each), and the tail loss is the makespan over the ideal (all work spread
evenly over the SMs), minus one.

  grid     one CTA per tile, launched in number order; the hardware gives
           the next CTA to the first SM that frees (greedy list scheduling)
  static   CTA c runs tiles c, c + G, c + 2G, ... (G = min(tiles, SMs))
  dynamic  CTA c runs tile c, then the next number any free CTA claims

(grid and dynamic schedule the same order; what persistence adds there,
the next tile's prologue under the current epilogue, is not in this model.)

With --lengths (packed causal sequences, each with as many keys as
queries), the dynamic scheduler's numbers (m-blocks of the longest
sequence for every sequence: a shorter one's are empty, each costing
--empty-cost key tiles to hand out) against the varlen scheduler's
(templates/sm90_varlen_tiles.cuh: only tiles that exist, sequences by the
keys of their heaviest m-block, longest first).

  tools/sm90_schedule_model.py [--sms 132] [--batch 4] [--heads 16] [--dk 128] [--block 128]
  tools/sm90_schedule_model.py --lengths 8192,512,4096,128,2048,1024,300,6000 [--heads 16]
"""
import argparse
import heapq

L2_SECTION_BYTES = 32 << 20  # runtime/launch/flash_fwd_sm90_params.h: kL2SectionBytes


def order(m_blocks, pairs, section):
    """[(pair, m_block)] in TileOrder's numbering."""
    out = []
    for first in range(0, pairs, section):
        width = min(section, pairs - first)
        for step in range(m_blocks):
            for p in range(first, first + width):
                out.append((p, m_blocks - 1 - step))
    return out


def greedy(works, sms):
    free = [0.0] * min(sms, len(works))
    heapq.heapify(free)
    for w in works:
        heapq.heappush(free, heapq.heappop(free) + w)
    return max(free)


def strided(works, sms):
    g = min(sms, len(works))
    return max(sum(works[c::g]) for c in range(g))


def varlen(a):
    lengths = [int(x) for x in a.lengths.split(",")]
    blocks = [-(-n // a.block) for n in lengths]
    longest = max(blocks)
    section = max(1, min(L2_SECTION_BYTES // (max(lengths) * 2 * a.dk * 2), a.heads * len(lengths)))
    # dynamic: TileOrder over (batch, head) pairs with the longest's m-blocks
    dyn = [(m + 1 if m < blocks[p // a.heads] else a.empty_cost)
           for p, m in order(longest, a.heads * len(lengths), section)]
    # varlen: slots longest first (ties by index), each its own TileOrder of one batch
    slots = sorted(range(len(lengths)), key=lambda b: (-lengths[b], b))
    var = [m + 1 for b in slots for _, m in order(blocks[b], a.heads, min(section, a.heads))]
    ideal = sum(var) / a.sms
    loss = lambda span: "%.2f %%" % (100 * (span / ideal - 1))
    print("| sequences | tiles (dynamic) | empty | tiles (varlen) | dynamic | varlen |")
    print("|---|---|---|---|---|---|")
    print("| %s | %d | %d | %d | %s | %s |" % (a.lengths, len(dyn), len(dyn) - len(var), len(var),
                                             loss(greedy(dyn, a.sms)), loss(greedy(var, a.sms))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sms", type=int, default=132)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--block", type=int, default=128, help="query and key tile")
    ap.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--lengths", help="packed causal sequences' lengths, comma-separated: dynamic against varlen")
    ap.add_argument("--empty-cost", type=float, default=0.5, help="key tiles' time to hand out an empty tile")
    a = ap.parse_args()
    if a.lengths:
        return varlen(a)
    print("| N | tiles | section (pairs) | grid | static | dynamic |")
    print("|---|---|---|---|---|---|")
    for n in (4096, 8192, 16384, 32768):
        m_blocks = n // a.block
        pairs = a.batch * a.heads
        section = max(1, min(L2_SECTION_BYTES // (n * 2 * a.dk * 2), pairs))
        tiles = order(m_blocks, pairs, section)
        works = [(m + 1) if a.causal else m_blocks for _, m in tiles]
        ideal = sum(works) / a.sms
        loss = lambda span: "%.2f %%" % (100 * (span / ideal - 1))
        in_order = loss(greedy(works, a.sms))  # grid and dynamic: the same order, greedily
        print("| %dk | %d | %d | %s | %s | %s |" % (n // 1024, len(tiles), section, in_order,
                                                   loss(strided(works, a.sms)), in_order))


if __name__ == "__main__":
    main()
