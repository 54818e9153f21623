"""The Python package as a user calls it (docs/python.md), one "@check JSON"
line per check: flash_attn_func against fp32 SDPA, the current device left
alone, a call on a side stream, BatchDecode.run captured in a CUDA graph and
replayed with new lengths, and host time per call next to SDPA's. In the
rehearsal (--dry-run) CPU tensors run the same calls on the emulator.
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def check(name, ok, **values):
    print("@check " + json.dumps({"check": name, "ok": bool(ok),
                                  "values": " ".join("%s=%s" % kv for kv in values.items())}), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    import attune
    dev = torch.device("cpu" if args.dry_run else "cuda")

    def rel(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    def value(fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - the check says what failed
            print("error: " + repr(e)[:300], file=sys.stderr)
            return None

    b, s, hq, hkv, d = (1, 70, 4, 2, 64) if args.dry_run else (2, 1000, 16, 4, 128)
    q = torch.randn(b, s, hq, d, device=dev, dtype=torch.bfloat16)
    k, v = (torch.randn(b, s, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    out = value(lambda: attune.flash_attn_func(q, k, v, causal=True))
    ref = F.scaled_dot_product_attention(*(x.transpose(1, 2).float() for x in (q, k, v)), is_causal=True,
                                         enable_gqa=True).transpose(1, 2)
    err = rel(out, ref) if out is not None else float("nan")
    check("flash_attn_func causal GQA d%d vs fp32 SDPA" % d, out is not None and err < 2e-2, rel_error="%.2e" % err)
    if args.dry_run:
        return 0
    device_before = torch.cuda.current_device()
    check("current device unchanged", torch.cuda.current_device() == device_before)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out2 = value(lambda: attune.flash_attn_func(q, k, v, causal=True))
    side.synchronize()
    check("a call on a side stream", out2 is not None and out is not None and torch.equal(out, out2))
    pages, page = 64, 16
    kc, vc = (torch.randn(pages, page, hkv, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
    table = torch.randperm(pages, device=dev, dtype=torch.int32)[:2 * 16].reshape(2, 16).contiguous()
    lens = torch.tensor([200, 37], device=dev, dtype=torch.int32)
    qd = torch.randn(2, 1, hq, d, device=dev, dtype=torch.bfloat16)
    try:
        dec = attune.BatchDecode().plan(batch_size=2, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                        max_pages=16, num_pages=pages)
        outd = torch.empty(2, 1, hq, d, device=dev, dtype=torch.bfloat16)
        dec.run(qd, kc, vc, table, lens, out=outd)  # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            dec.run(qd, kc, vc, table, lens, out=outd)
        lens.copy_(torch.tensor([64, 250], device=dev, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want = attune.flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=lens, block_table=table, causal=True)
        err = rel(outd, want)
        ok, desc = err < 1e-2, dec.description
    except Exception as e:  # noqa: BLE001 - reported in the check
        err, ok, desc = repr(e)[:160], False, ""
    check("BatchDecode.run captured in a CUDA graph, replayed with new lengths", ok, rel_error=err, plan=desc)
    qs, ks = (torch.randn(1, 128, 8, 64, device=dev, dtype=torch.bfloat16) for _ in range(2))

    def host_us(fn, n=300):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = (time.perf_counter() - start) / n * 1e6
        torch.cuda.synchronize()
        return took

    mine = host_us(lambda: attune.flash_attn_func(qs, ks, ks, causal=True))
    sdpa = host_us(lambda: F.scaled_dot_product_attention(qs.transpose(1, 2), ks.transpose(1, 2), ks.transpose(1, 2),
                                                          is_causal=True))
    check("host time per flash_attn_func call (goal 15 us)", mine <= 15, attune_us="%.1f" % mine,
          sdpa_us="%.1f" % sdpa)
    return 0


if __name__ == "__main__":
    sys.exit(main())
