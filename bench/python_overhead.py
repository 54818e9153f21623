#!/usr/bin/env python3
"""Host time of one attune.flash_attn_func call on the planned path, without
a GPU: CPU tensors sent to the cuda backend (ATTUNE_CPU_BACKEND=cuda) over
the recording fake driver (ATTUNE_LIBCUDA), which takes host memory as
device memory and runs nothing. What is timed is what a GPU call costs the
host: the op's dispatch through torch.library and autograd, attune's Python
layer (views, plan-cache lookup, output allocation), the C run and the
fake's launch. Goal: at most 15 us per call (issue 18).

Usage: ATTUNE_LIBCUDA=build/dev/tests/fake_driver/libattune_fake_libcuda.so \
       PYTHONPATH=python python3 bench/python_overhead.py [--calls N]
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("ATTUNE_CPU_BACKEND", "cuda")
if "ATTUNE_LIBCUDA" not in os.environ:
    sys.exit("python_overhead: set ATTUNE_LIBCUDA to the fake driver (tests/fake_driver)")

import torch  # noqa: E402

import attune  # noqa: E402
from attune import _calls, _engine, _torch  # noqa: E402


def per_call_us(fn, calls, rounds=7):
    """Median over rounds of the mean time of `calls` calls, in us."""
    for _ in range(50):
        fn()
    means = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(means)


@torch.library.custom_op("attune_bench::empty_op", mutates_args=())
def empty_op(q: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(q)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    # Small CPU tensors: nothing runs, and on the CPU a large allocation
    # costs page faults a GPU's caching allocator never pays.
    q = torch.zeros(1, 128, 32, 128, dtype=torch.bfloat16)
    k = torch.zeros(1, 128, 8, 128, dtype=torch.bfloat16)
    spec = _engine.Spec(scale=128 ** -0.5, mask=1)
    rows = [
        ("attune.flash_attn_func(q, k, v, causal=True)", lambda: attune.flash_attn_func(q, k, k, causal=True)),
        ("  the op alone (torch.ops.attune.fwd)", lambda: _torch.fwd(q, k, k, None, None, None, None, 0, 0,
                                                                      spec.scale, 1, -1, -1, 0.0, None, 0, False)),
        ("  attune's Python layer and the C run (no torch op)",
         lambda: _calls.forward(_torch.ARRAYS, q, k, k, spec)),
        ("  torch.library dispatch of an empty custom op", lambda: empty_op(q)),
        ("  two torch.empty (O and LSE)", lambda: (torch.empty(1, 128, 32, 128, dtype=torch.bfloat16),
                                                   torch.empty(1, 32, 128))),
    ]
    with torch.no_grad():
        for name, fn in rows:
            print(f"{per_call_us(fn, args.calls):8.2f} us  {name}")
    q.requires_grad_(True)
    print(f"{per_call_us(lambda: attune.flash_attn_func(q, k, k, causal=True), args.calls):8.2f} us  "
          "attune.flash_attn_func with q.requires_grad (autograd records the node)")


if __name__ == "__main__":
    main()
