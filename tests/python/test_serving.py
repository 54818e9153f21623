"""The serving pair (BatchDecode: plan once, run per layer) against the fp64
reference on the emulator, and the CUDA path's host side on the recording
fake driver (ATTUNE_LIBCUDA): CPU tensors sent to the cuda backend
(ATTUNE_CPU_BACKEND=cuda) run through plans whose repeated runs make
launches only, and an injected sticky error comes back as
attune.CudaError with .sticky."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import attune
from conftest import assert_accurate, naive, randn, reference, rope, tables

FAKE = os.environ.get("ATTUNE_FAKE_LIBCUDA", "")
needs_fake = pytest.mark.skipif(not FAKE, reason="ATTUNE_FAKE_LIBCUDA names no fake driver")


def paged_cache(k, v, page, seed=0):
    b, smax, h, d = k.shape
    pages = smax // page
    perm = torch.randperm(b * pages, generator=torch.Generator().manual_seed(seed))
    table = perm.reshape(b, pages).to(torch.int32)
    kc = torch.zeros(b * pages + 2, page, h, d, dtype=k.dtype)  # two spare pages nobody reads
    vc = torch.zeros(b * pages + 2, page, h, v.shape[-1], dtype=v.dtype)
    kc[table.long().flatten()] = k.reshape(b * pages, page, h, d)
    vc[table.long().flatten()] = v.reshape(b * pages, page, h, v.shape[-1])
    return kc, vc, table


@pytest.mark.parametrize("splits", [0, 3])
def test_batch_decode_plans_once_and_runs_steps(splits):
    b, smax, hq, hkv, d, page = 3, 64, 8, 2, 64, 16
    k, v = randn(b, smax, hkv, d, seed=1), randn(b, smax, hkv, d, seed=2)
    kc, vc, table = paged_cache(k, v, page)
    dec = attune.BatchDecode().plan(batch_size=b, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                    max_pages=smax // page, num_pages=kc.shape[0], num_splits=splits)
    assert "decode" in dec.description
    for step, lens in enumerate(([64, 17, 5], [33, 64, 1])):  # one plan, lengths that change between steps
        q = randn(b, 1, hq, d, seed=10 + step)
        cache_seqlens = torch.tensor(lens, dtype=torch.int32)
        out = dec.run(q, kc, vc, table, cache_seqlens)
        kw = dict(causal=True, seqlens_k=lens)
        assert_accurate(out, reference(q, k, v, **kw)[0], naive(q, k, v, **kw), f"step {step}")
    with pytest.raises(attune.InvalidArgument, match="as planned"):
        dec.run(randn(b, 2, hq, d), kc, vc, table, cache_seqlens)


def test_batch_decode_packed_queries_with_a_chunk():
    b, smax, hq, hkv, d, page = 2, 64, 4, 1, 32, 16
    k, v = randn(b, smax, hkv, d, seed=3), randn(b, smax, hkv, d, seed=4)
    kc, vc, table = paged_cache(k, v, page)
    cu = torch.tensor([0, 1, 21], dtype=torch.int32)  # a decode step and a 20-row chunk
    dec = attune.BatchDecode().plan(batch_size=b, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                    max_pages=4, num_pages=kc.shape[0], total_q=21, max_seqlen_q=20)
    q = randn(21, hq, d, seed=5)
    lens = [40, 64]
    out = dec.run(q, kc, vc, table, torch.tensor(lens, dtype=torch.int32), cu_seqlens_q=cu)
    kw = dict(causal=True, cu_seqlens_q=cu, seqlens_k=lens)
    assert_accurate(out, reference(q, k, v, **kw)[0], naive(q, k, v, **kw), "packed")


def test_batch_decode_appends_and_rotates_each_step():
    b, smax, hq, hkv, d, page = 2, 64, 4, 2, 64, 16
    k, v = randn(b, smax, hkv, d, seed=6), randn(b, smax, hkv, d, seed=7)
    kc, vc, table = paged_cache(k, v, page)
    cos, sin = tables(smax, 32)
    dec = attune.BatchDecode().plan(batch_size=b, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                    max_pages=smax // page, num_pages=kc.shape[0], append_kv=True, rotary_dim=32,
                                    rotary_interleaved=False, num_splits=2)
    lens = torch.tensor([15, 40], dtype=torch.int32)
    for step in range(2):  # the first step crosses a page boundary for sequence 0
        q, k_new, v_new = randn(b, 1, hq, d, seed=20 + step), randn(b, 1, hkv, d, seed=30 + step), randn(
            b, 1, hkv, d, seed=40 + step)
        out = dec.run(q, kc, vc, table, lens, k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin)
        pos = lens[:, None].long()
        k_ro = rope(k_new, cos, sin, pos, False).to(torch.bfloat16)
        q_ro = rope(q, cos, sin, pos, False).to(torch.bfloat16)
        for i in range(b):  # the oracle's own cache, appended the same way
            k[i, lens[i]], v[i, lens[i]] = k_ro[i, 0], v_new[i, 0]
        lens = lens + 1
        kw = dict(causal=True, seqlens_k=lens.tolist())
        assert_accurate(out, reference(q_ro, k, v, **kw)[0], naive(q_ro, k, v, **kw), f"append step {step}")
    with pytest.raises(attune.InvalidArgument, match="rotary_cos: got None"):
        dec.run(q, kc, vc, table, lens, k=k_new, v=v_new)
    with pytest.raises(attune.InvalidArgument, match="cache_seqlens \\+ new keys"):
        dec.run(q, kc, vc, table, torch.tensor([5, 64], dtype=torch.int32), k=k_new, v=v_new, rotary_cos=cos,
                rotary_sin=sin)


def _run_on_fake(code, extra_env=None):
    env = dict(os.environ, ATTUNE_LIBCUDA=FAKE, ATTUNE_CPU_BACKEND="cuda", **(extra_env or {}))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=600)


def _count_on_fake(code):
    """_run_on_fake with `fake`, the fake driver's library (its call counts
    as longs), and ctypes, os, torch and attune imported before `code`."""
    return _run_on_fake(textwrap.dedent("""
        import ctypes, os, torch, attune
        fake = ctypes.CDLL(os.environ["ATTUNE_LIBCUDA"])
        fake.attune_fake_count.restype = ctypes.c_long
    """) + textwrap.dedent(code))


@needs_fake
def test_repeated_calls_on_the_cuda_path_only_launch():
    r = _count_on_fake("""
        q = torch.zeros(2, 64, 8, 64, dtype=torch.bfloat16)
        k = torch.zeros(2, 64, 2, 64, dtype=torch.bfloat16)
        attune.flash_attn_func(q, k, k, causal=True)  # plans: compiles and loads
        total = fake.attune_fake_total(); launches = fake.attune_fake_count(b"cuLaunchKernel")
        encodes = fake.attune_fake_count(b"cuTensorMapEncodeTiled")
        memsets = fake.attune_fake_count(b"cuMemsetD32Async")
        for _ in range(5):
            attune.flash_attn_func(q, k, k, causal=True)
        print(fake.attune_fake_total() - total, fake.attune_fake_count(b"cuLaunchKernel") - launches,
              fake.attune_fake_count(b"cuTensorMapEncodeTiled") - encodes,
              fake.attune_fake_count(b"cuMemsetD32Async") - memsets)
    """)
    assert r.returncode == 0, r.stderr
    calls, launches, encodes, memsets = map(int, r.stdout.split())
    # The fake device is an sm_90 part: the Hopper forward encodes a tensor
    # map for an output pointer it has not seen (new outputs cycle through a
    # few allocations), and its dynamic tile scheduler (causal) has its
    # counter zeroed by a memset node before each launch; nothing else but
    # the launch.
    assert encodes <= 5, f"{encodes} tensor maps encoded for 5 calls on the same inputs"
    assert memsets in (0, 5), f"{memsets} memsets for 5 launches"
    assert launches == 5 and calls - encodes - memsets == 5 + 5, (
        f"{calls} driver calls ({encodes} encodes, {memsets} memsets) for 5 launches (null stream: + one context "
        "query)")


@needs_fake
def test_a_sticky_cuda_error_is_a_cuda_error_with_sticky():
    r = _run_on_fake("""
        import torch, attune
        q = torch.zeros(1, 16, 2, 64, dtype=torch.bfloat16)
        try:
            attune.flash_attn_func(q, q, q)
        except attune.CudaError as e:
            print(e.sticky, "|", e)
        try:
            attune.flash_attn_func(q, q, q)
        except attune.CudaError as e:
            print(e.sticky, "|", e)
    """, {"ATTUNE_FAKE_CUDA_FAIL": "cuLaunchKernel:1:700"})
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()
    assert first.startswith("True |") and "CUDA_ERROR_ILLEGAL_ADDRESS" in first
    assert second == first, "every later call fails with the first sticky error"


@needs_fake
def test_a_call_past_its_block_table_launches_nothing():
    # Host lengths are checked before any launch, on every paged path:
    # flash_attn_with_kvcache (attending, appending), varlen over pages,
    # BatchDecode (attending, appending).
    r = _count_on_fake("""
        q = torch.zeros(2, 1, 2, 64, dtype=torch.bfloat16)
        kc = torch.zeros(8, 16, 1, 64, dtype=torch.bfloat16)
        table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
        lens = torch.tensor([40, 20], dtype=torch.int32)
        attune.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=lens, block_table=table)
        dec = attune.BatchDecode().plan(batch_size=2, num_qo_heads=2, num_kv_heads=1, head_dim=64, page_size=16,
                                        max_pages=3, num_pages=8)
        dec.run(q, kc, kc, table, lens)
        new = torch.zeros(2, 1, 1, 64, dtype=torch.bfloat16)
        appending = attune.BatchDecode().plan(batch_size=2, num_qo_heads=2, num_kv_heads=1, head_dim=64,
                                              page_size=16, max_pages=3, num_pages=8, append_kv=True)
        cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
        launches = fake.attune_fake_count(b"cuLaunchKernel")
        refused = 0
        for bad_lens, bad_table in ((torch.tensor([40, 49], dtype=torch.int32), table),
                                    (lens, torch.tensor([[0, 1, 9], [3, 4, 5]], dtype=torch.int32))):
            cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), bad_lens.cumsum(0, dtype=torch.int32)])
            for call in (lambda: attune.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=bad_lens,
                                                                block_table=bad_table),
                         lambda: attune.flash_attn_with_kvcache(q, kc, kc, k=new, v=new, cache_seqlens=bad_lens,
                                                                block_table=bad_table),
                         lambda: attune.flash_attn_varlen_func(q[:, 0], kc, kc, cu_q, cu_k, 1, 48,
                                                               block_table=bad_table),
                         lambda: dec.run(q, kc, kc, bad_table, bad_lens),
                         lambda: appending.run(q, kc, kc, bad_table, bad_lens, k=new, v=new)):
                try:
                    call()
                except attune.InvalidArgument as e:
                    refused += 1
                    print(e)
        print(refused, fake.attune_fake_count(b"cuLaunchKernel") - launches)
    """)
    assert r.returncode == 0, r.stderr
    *messages, last = r.stdout.strip().splitlines()
    refused, launched = map(int, last.split())
    assert refused == 10 and launched == 0, r.stdout
    assert all("block_table" in m for m in messages), messages


@needs_fake
def test_an_appending_step_is_two_launches_and_nothing_else():
    # flash-attn appends inside its attention kernel; attune launches the
    # small kv_append kernel first: two launches per step, no allocation, copy
    # or synchronization in a planned run, the first one included (plan()
    # loads both kernels).
    r = _count_on_fake("""
        fake.attune_fake_total.restype = ctypes.c_long
        count = lambda name: fake.attune_fake_count(name.encode())
        q = torch.zeros(2, 1, 4, 64, dtype=torch.bfloat16)
        kc = torch.zeros(8, 16, 2, 64, dtype=torch.bfloat16)
        new = torch.zeros(2, 1, 2, 64, dtype=torch.bfloat16)
        cos = torch.ones(48, 16, dtype=torch.bfloat16)
        dec = attune.BatchDecode().plan(batch_size=2, num_qo_heads=4, num_kv_heads=2, head_dim=64, page_size=16,
                                        max_pages=3, num_pages=8, num_splits=1, append_kv=True, rotary_dim=32)
        table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
        lens = torch.tensor([20, 7], dtype=torch.int32)
        total, launches, queries = fake.attune_fake_total(), count("cuLaunchKernel"), count("cuCtxGetCurrent")
        for _ in range(5):
            dec.run(q, kc, kc, table, lens, k=new, v=new, rotary_cos=cos, rotary_sin=cos)
        runs = (fake.attune_fake_total() - total, count("cuLaunchKernel") - launches,
                count("cuCtxGetCurrent") - queries)
        attune.flash_attn_with_kvcache(q, kc, kc, k=new, v=new, cache_seqlens=lens, block_table=table,
                                       rotary_cos=cos, rotary_sin=cos, num_splits=1)
        launches = count("cuLaunchKernel")
        attune.flash_attn_with_kvcache(q, kc, kc, k=new, v=new, cache_seqlens=lens, block_table=table,
                                       rotary_cos=cos, rotary_sin=cos, num_splits=1)
        print(*runs, count("cuLaunchKernel") - launches)
    """)
    assert r.returncode == 0, r.stderr
    calls, launches, queries, call_launches = map(int, r.stdout.split())
    assert launches == 10 and calls == launches + queries, (
        f"5 planned steps: {launches} launches, {calls} driver calls ({queries} context queries of the null stream)")
    assert call_launches == 2, f"flash_attn_with_kvcache with k and v: {call_launches} launches; expected 2"
