"""fp8 inputs from Python on CPU tensors (the emulator): FlashAttention-3's
flash_attn_func and flash_attn_varlen_func with q, k and v in
float8_e4m3fn (and float8_e5m2) and (batch, kv_heads) descales, every
descale layout FlashAttention-3, vLLM and FlashInfer pass (one layout per
call: mixed ones are widened), flash_attn_with_kvcache over fp8 caches
(contiguous and paged, under bf16/fp16 queries and under fp8 ones),
FlashInfer's paged wrappers with kv_data_type and k_scale/v_scale, and the
refusals (gradients, dropout, the backward, appending into an fp8 cache).

Oracle: the fp64 attention of the dequantized inputs (stored value x its
descale at [b, kv head]); FlashAttention's rule, with the same attention
computed in bf16 on the dequantized inputs as the yardstick."""
import pytest
import torch

import attune
import attune.flashinfer as flashinfer
from conftest import assert_accurate, attention_one, max_error, naive, randn, reference

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def descales(batch, heads_kv, seed):
    """FlashAttention-3's (batch, kv_heads) float32 descales, in [0.25, 1.75)."""
    return torch.rand(batch, heads_kv, generator=torch.Generator().manual_seed(seed)) * 1.5 + 0.25


def per_head(descale, batch, heads, heads_kv):
    """descale (any layout broadcasting to (batch, heads_kv)) as [B, 1, heads, 1]
    factors: head h reads kv head h // (heads / heads_kv)'s."""
    d = torch.as_tensor(descale, dtype=torch.float32).expand(batch, heads_kv)
    return d.repeat_interleave(heads // heads_kv, dim=1)[:, None, :, None]


def quantize(x, descale, fmt, heads_kv):
    """x [B, S, H, D] -> (stored in fmt, its value: stored x descale, float64)."""
    f = per_head(descale, x.shape[0], x.shape[2], heads_kv)
    stored = (x.float() / f).to(fmt)
    return stored, stored.double() * f.double()


def check(out, q, k, v, what, **kw):
    """out against the fp64 attention of the dequantized inputs, with the
    bf16 attention of the same values as the yardstick."""
    want, _ = reference(q, k, v, **kw)
    assert_accurate(out, want, naive(*(x.to(torch.bfloat16) for x in (q, k, v)), **kw), what)


@pytest.mark.parametrize("d, causal, sq, sk, fmt", [
    (64, False, 24, 40, E4M3),
    (64, True, 24, 40, E4M3),
    (128, True, 17, 33, E4M3),
    (256, False, 5, 19, E4M3),  # few rows: d256 is the emulator's slowest
    (64, True, 20, 20, E5M2),
])
def test_flash_attn_func_fp8_with_batch_and_head_descales(d, causal, sq, sk, fmt):
    b, hq, hkv = 2, 4, 2  # GQA: q heads 0, 1 read kv head 0's descale
    dq, dk, dv = descales(b, hkv, 1), descales(b, hkv, 2), descales(b, hkv, 3)
    q8, q = quantize(randn(b, sq, hq, d, seed=4), dq, fmt, hkv)
    k8, k = quantize(randn(b, sk, hkv, d, seed=5), dk, fmt, hkv)
    v8, v = quantize(randn(b, sk, hkv, d, seed=6), dv, fmt, hkv)
    out, lse, _ = attune.flash_attn_func(q8, k8, v8, causal=causal, q_descale=dq, k_descale=dk, v_descale=dv,
                                         return_attn_probs=True)
    assert out.dtype == torch.bfloat16 and out.shape == (b, sq, hq, d), "fp8 inputs write O in bf16"
    assert lse.dtype == torch.float32 and lse.shape == (b, hq, sq)
    check(out, q, k, v, f"d{d} causal={causal} {fmt}", causal=causal)
    want_lse = reference(q, k, v, causal=causal)[1]
    assert max_error(lse, want_lse) < 2e-2


def test_varlen_fp8_descales_per_sequence():
    cu = torch.tensor([0, 9, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 15, 40], dtype=torch.int32)
    hq, hkv, d = 4, 2, 64
    dq, dk, dv = descales(2, hkv, 7), descales(2, hkv, 8), descales(2, hkv, 9)
    # Each sequence's rows quantized with its own descale row.
    seq_of_q = torch.repeat_interleave(torch.arange(2), cu.diff().long())
    seq_of_k = torch.repeat_interleave(torch.arange(2), cu_k.diff().long())

    def packed(x, descale, seq_of, heads):
        f = per_head(descale, 2, heads, hkv)[seq_of, 0]  # [T, heads, 1]
        stored = (x / f).to(E4M3)
        return stored, stored.double() * f.double()

    q8, q = packed(randn(30, hq, d, seed=10, dtype=torch.float32), dq, seq_of_q, hq)
    k8, k = packed(randn(40, hkv, d, seed=11, dtype=torch.float32), dk, seq_of_k, hkv)
    v8, v = packed(randn(40, hkv, d, seed=12, dtype=torch.float32), dv, seq_of_k, hkv)
    out = attune.flash_attn_varlen_func(q8, k8, v8, cu, cu_k, 21, 25, causal=True, q_descale=dq, k_descale=dk,
                                        v_descale=dv)
    assert out.dtype == torch.bfloat16 and out.shape == (30, hq, d)
    check(out, q, k, v, "varlen e4m3", causal=True, cu_seqlens_q=cu, cu_seqlens_k=cu_k)


def test_every_descale_layout_reads_the_same_factors():
    # Per tensor (a float, a 1-element tensor), per kv head, an expanded view
    # (stride 0), a transposed view, and three different layouts in one call
    # (widened to one): each is the same factors as the (B, Hkv) tensor of
    # their values, so the outputs are equal bit for bit.
    b, hq, hkv, d = 2, 4, 2, 64
    per_kv_head = torch.tensor([0.5, 1.25])
    q8, q = quantize(randn(b, 12, hq, d, seed=13), 0.75, E4M3, hkv)
    k8, k = quantize(randn(b, 20, hkv, d, seed=14), per_kv_head, E4M3, hkv)
    v8, v = quantize(randn(b, 20, hkv, d, seed=15), 1.5, E4M3, hkv)
    full = dict(q_descale=torch.full((b, hkv), 0.75), k_descale=per_kv_head.repeat(b, 1),
                v_descale=torch.full((b, hkv), 1.5))
    want = attune.flash_attn_func(q8, k8, v8, causal=True, **full)
    check(want, q, k, v, "per-tensor and per-head descales", causal=True)
    layouts = {
        "floats and (Hkv,)": dict(q_descale=0.75, k_descale=per_kv_head, v_descale=1.5),
        "1-element tensors": dict(q_descale=torch.tensor([0.75]), k_descale=per_kv_head,
                                  v_descale=torch.tensor(1.5)),
        "expanded views": dict(q_descale=torch.tensor(0.75).expand(b, hkv), k_descale=per_kv_head.expand(b, hkv),
                               v_descale=torch.tensor([1.5]).expand(b, hkv)),
        "a transposed view": dict(q_descale=full["q_descale"], k_descale=per_kv_head.repeat(b, 1).t().contiguous().t(),
                                  v_descale=full["v_descale"]),
    }
    for name, kw in layouts.items():
        got = attune.flash_attn_func(q8, k8, v8, causal=True, **kw)
        assert torch.equal(got, want), name
    # None is a factor of 1.
    k1, _ = quantize(randn(b, 20, hkv, d, seed=14), 1.0, E4M3, hkv)
    assert torch.equal(attune.flash_attn_func(q8, k1, v8, causal=True, q_descale=0.75, v_descale=1.5),
                       attune.flash_attn_func(q8, k1, v8, causal=True, q_descale=0.75, k_descale=1.0, v_descale=1.5))


def test_compile_fullgraph_traces_fp8_and_its_descales():
    # The fake implementation says bf16 out; a float descale becomes a tensor in the graph.
    q8 = randn(1, 16, 4, 64, seed=44).to(E4M3)
    k8, v8 = randn(1, 16, 2, 64, seed=45).to(E4M3), randn(1, 16, 2, 64, seed=46).to(E4M3)
    d = descales(1, 2, 47)

    def fn(q, k, v, d):
        return attune.flash_attn_func(q, k, v, causal=True, q_descale=0.5, k_descale=d, v_descale=d[0])

    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(q8, k8, v8, d)
    assert out.dtype == torch.bfloat16 and torch.equal(out, fn(q8, k8, v8, d))


def test_descales_of_16_bit_inputs_are_ignored_as_in_flash_attention_3():
    q, k, v = randn(1, 8, 2, 32, seed=16), randn(1, 8, 2, 32, seed=17), randn(1, 8, 2, 32, seed=18)
    assert torch.equal(attune.flash_attn_func(q, k, v, k_descale=torch.tensor([2.0])),
                       attune.flash_attn_func(q, k, v))


def paged(k, page, seed):
    """A contiguous cache [B, Smax, H, D] as shuffled pages of a pool and its
    block table."""
    b, smax = k.shape[:2]
    pages = smax // page
    table = torch.randperm(b * pages, generator=torch.Generator().manual_seed(seed)).reshape(b, pages).int()
    pool = torch.empty(b * pages, page, *k.shape[2:], dtype=k.dtype)
    pool[table.long().flatten()] = k.reshape(b * pages, page, *k.shape[2:])
    return pool, table


@pytest.mark.parametrize("q_dtype", [torch.bfloat16, torch.float16])
def test_kvcache_fp8_paged_and_contiguous_under_16_bit_queries(q_dtype):
    b, smax, hq, hkv, d = 2, 64, 4, 2, 64
    q = randn(b, 2, hq, d, seed=19, dtype=q_dtype)
    dk, dv = descales(b, hkv, 20), descales(b, hkv, 21)
    k8, k = quantize(randn(b, smax, hkv, d, seed=22), dk, E4M3, hkv)
    v8, v = quantize(randn(b, smax, hkv, d, seed=23), dv, E4M3, hkv)
    lens = torch.tensor([64, 27], dtype=torch.int32)
    kw = dict(causal=True, seqlens_k=lens)
    want, _ = reference(q.double(), k, v, **kw)
    base = naive(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), **kw)
    k_pool, table = paged(k8, 16, 24)
    v_pool = torch.empty_like(k_pool)
    v_pool[table.long().flatten()] = v8.reshape(-1, 16, hkv, d)
    runs = {
        "paged, 3 splits": attune.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=lens, block_table=table,
                                                          causal=True, num_splits=3, k_descale=dk, v_descale=dv),
        "paged, attune's choice": attune.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=lens,
                                                                 block_table=table, causal=True, k_descale=dk,
                                                                 v_descale=dv),
        "contiguous, vLLM's names": attune.flash_attn_with_kvcache(q, k8, v8, cache_seqlens=lens, causal=True,
                                                                   k_scale=dk, v_scale=dv),
    }
    for name, out in runs.items():
        assert out.dtype == q_dtype, f"{name}: O in q's dtype under an fp8 cache"
        assert_accurate(out, want, base, f"{q_dtype} q, e4m3 cache, {name}")


def test_kvcache_fp8_queries_and_cache_per_tensor_scales():
    # FlashAttention-3's decode: q in the cache's fp8 format, floats as
    # vLLM's per-tensor scales; out in bf16.
    b, smax, hq, hkv, d = 2, 48, 4, 1, 128
    q8, q = quantize(randn(b, 1, hq, d, seed=25), 0.5, E4M3, hkv)
    k8, k = quantize(randn(b, smax, hkv, d, seed=26), 1.25, E4M3, hkv)
    v8, v = quantize(randn(b, smax, hkv, d, seed=27), 0.75, E4M3, hkv)
    k_pool, table = paged(k8, 16, 28)
    v_pool, _ = paged(v8, 16, 28)
    lens = torch.tensor([40, 48], dtype=torch.int32)
    out = attune.flash_attn_with_kvcache(q8, k_pool, v_pool, cache_seqlens=lens, block_table=table, causal=True,
                                         num_splits=3, q_descale=0.5, k_scale=1.25, v_scale=0.75)
    assert out.dtype == torch.bfloat16
    check(out, q, k, v, "e4m3 q and cache", causal=True, seqlens_k=lens)


class Pages:
    """An fp8 paged cache as FlashInfer names it (CSR page table)."""

    def __init__(self, lengths, page_size, heads_kv, d, k_scale, v_scale, seed):
        self.lengths, self.page_size = lengths, page_size
        counts = [(n + page_size - 1) // page_size for n in lengths]
        self.indptr = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)
        used = int(self.indptr[-1])
        self.indices = torch.randperm(used + 2, generator=torch.Generator().manual_seed(seed))[:used].int()
        self.last_page_len = torch.tensor([(n - 1) % page_size + 1 for n in lengths], dtype=torch.int32)
        shape = (used + 2, page_size, heads_kv, d)
        self.k8 = (randn(*shape, seed=seed + 1, dtype=torch.float32) / k_scale).to(E4M3)
        self.v8 = (randn(*shape, seed=seed + 2, dtype=torch.float32) / v_scale).to(E4M3)
        self.scales = (k_scale, v_scale)

    def keys(self, b):
        """Request b's dequantized keys and values [n, Hkv, D] (float64)."""
        pages = self.indices[int(self.indptr[b]):int(self.indptr[b + 1])].long()
        n = self.lengths[b]
        # torch does not index fp8 tensors on the CPU: widen first (exact).
        return tuple((x.double()[pages] * s).reshape(-1, *x.shape[2:])[:n] for x, s in zip((self.k8, self.v8),
                                                                                           self.scales))


def check_requests(out, q, pages, qo_indptr, what, causal=True):
    for b in range(len(pages.lengths)):
        rows = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        k, v = pages.keys(b)
        want, _ = attention_one(q[rows], k, v, scale=q.shape[-1] ** -0.5, causal=causal)
        base, _ = attention_one(q[rows], k.to(torch.bfloat16), v.to(torch.bfloat16), scale=q.shape[-1] ** -0.5,
                                causal=causal, dtype=torch.bfloat16)
        assert_accurate(out[rows], want, base, f"{what}: request {b}")


def test_flashinfer_decode_wrapper_over_an_fp8_cache():
    hq, hkv, d = 4, 2, 64
    pages = Pages([21, 5, 40], 8, hkv, d, 0.5, 2.0, seed=30)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(torch.empty(1 << 20, dtype=torch.uint8), "NHD")
    wrapper.plan(pages.indptr, pages.indices, pages.last_page_len, hq, hkv, d, 8, q_data_type=torch.bfloat16,
                 kv_data_type=torch.float8_e4m3fn)
    q = randn(3, hq, d, seed=31)
    one = torch.arange(4, dtype=torch.int32)
    out, lse = wrapper.run(q, (pages.k8, pages.v8), k_scale=0.5, v_scale=2.0, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == (3, hq, d) and lse.shape == (3, hq)
    check_requests(out, q, pages, one, "decode, float scales")
    # Tensor scales read where they are; a float that changes is rewritten.
    again = wrapper.run(q, (pages.k8, pages.v8), k_scale=torch.tensor([0.5]), v_scale=torch.tensor(2.0))
    assert torch.equal(again, out)
    halved = wrapper.run(q, (pages.k8, pages.v8), k_scale=0.5, v_scale=1.0)
    assert max_error(halved.double() * 2, out.double()) < 0.05, "v_scale scales the output"
    with pytest.raises(NotImplementedError, match="q_scale"):  # bf16 queries take no scale
        wrapper.run(q, (pages.k8, pages.v8), q_scale=0.5)
    with pytest.raises(attune.InvalidArgument, match="k_scale: got shape"):
        wrapper.run(q, (pages.k8, pages.v8), k_scale=torch.ones(2))
    with pytest.raises(attune.InvalidArgument, match="k_cache: got .* torch.bfloat16"):
        wrapper.run(q, (pages.k8.to(torch.bfloat16), pages.v8.to(torch.bfloat16)))


def test_flashinfer_prefill_wrapper_over_an_fp8_cache():
    hq, hkv, d = 4, 2, 64
    pages = Pages([20, 9], 8, hkv, d, 1.5, 0.5, seed=32)
    qo = torch.tensor([0, 6, 9], dtype=torch.int32)
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(torch.empty(1 << 20, dtype=torch.uint8))
    wrapper.plan(qo, pages.indptr, pages.indices, pages.last_page_len, hq, hkv, d, 8, causal=True,
                 q_data_type="bfloat16", kv_data_type="float8_e4m3fn")
    q = randn(9, hq, d, seed=33)
    out = wrapper.run(q, (pages.k8, pages.v8), k_scale=1.5, v_scale=0.5)
    check_requests(out, q, pages, qo, "prefill")


def test_batch_decode_plans_fa3_descales_and_runs_only_take_their_addresses():
    b, hq, hkv, d, page = 2, 4, 2, 64, 16
    dk, dv = descales(b, hkv, 35), descales(b, hkv, 37)
    k8, k = quantize(randn(b, 32, hkv, d, seed=34), dk, E4M3, hkv)
    v8, v = quantize(randn(b, 32, hkv, d, seed=36), dv, E4M3, hkv)
    k_pool, table = paged(k8, page, 38)
    v_pool = torch.empty_like(k_pool)
    v_pool[table.long().flatten()] = v8.reshape(-1, page, hkv, d)
    lens = torch.tensor([32, 11], dtype=torch.int32)
    q = randn(b, 1, hq, d, seed=39)
    dec = attune.BatchDecode().plan(batch_size=b, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                    max_pages=2, num_pages=k_pool.shape[0], dtype=torch.bfloat16,
                                    kv_dtype=torch.float8_e4m3fn, descale_strides=(hkv, 1))
    out = dec.run(q, k_pool, v_pool, table, lens, k_descale=dk, v_descale=dv)
    kw = dict(causal=True, seqlens_k=lens)
    assert_accurate(out, reference(q.double(), k, v, **kw)[0],
                    naive(q, k.to(torch.bfloat16), v.to(torch.bfloat16), **kw), "BatchDecode e4m3")
    with pytest.raises(attune.InvalidArgument, match="k_descale: got .* 2 elements"):
        dec.run(q, k_pool, v_pool, table, lens, k_descale=dk[0], v_descale=dv)
    with pytest.raises(attune.InvalidArgument, match="q_descale"):
        dec.run(q, k_pool, v_pool, table, lens, q_descale=dk, k_descale=dk, v_descale=dv)
    with pytest.raises(attune.InvalidArgument, match="append_kv"):
        attune.BatchDecode().plan(batch_size=b, num_qo_heads=hq, num_kv_heads=hkv, head_dim=d, page_size=page,
                                  max_pages=2, num_pages=k_pool.shape[0], kv_dtype=torch.float8_e4m3fn,
                                  append_kv=True)


def test_fp8_is_refused_where_it_has_no_meaning():
    q8 = randn(1, 8, 2, 32, seed=40).to(E4M3)
    k8, v8 = randn(1, 8, 2, 32, seed=41).to(E4M3), randn(1, 8, 2, 32, seed=42).to(E4M3)
    with pytest.raises(attune.InvalidArgument, match=r"q: got a torch.float8_e4m3fn tensor with requires_grad=True"):
        attune.flash_attn_func(q8.clone().requires_grad_(), k8, v8)
    with pytest.raises(attune.InvalidArgument, match=r"dropout_p: got 0.1 with q in torch.float8_e4m3fn"):
        attune.flash_attn_func(q8, k8, v8, dropout_p=0.1)
    with pytest.raises(attune.InvalidArgument, match="dtypes: got q e4m3, k e5m2"):
        attune.flash_attn_func(q8, k8.to(torch.float32).to(E5M2), v8.to(torch.float32).to(E5M2))
    with pytest.raises(attune.InvalidArgument, match=r"k_descale: got shape \[3\]"):
        attune.flash_attn_func(q8, k8, v8, k_descale=torch.ones(3))
    with pytest.raises(attune.InvalidArgument, match="k_descale: got torch.int32; expected float32"):
        attune.flash_attn_func(q8, k8, v8, k_descale=torch.ones(1, dtype=torch.int32))
    # The backward op on fp8 inputs (autograd never reaches it: see above).
    out = torch.zeros(1, 8, 2, 32, dtype=torch.bfloat16)
    lse = torch.zeros(1, 2, 8)
    with pytest.raises(attune.InvalidArgument, match="backward: got q in e4m3"):
        torch.ops.attune.bwd(out, q8, k8, v8, out, lse, None, None, None, 0, 0, 0.125, 0, -1, -1, 0.0, None, False)
    # New keys cannot be appended to an fp8 cache (kv_append writes 16-bit ones).
    q = randn(1, 1, 2, 32, seed=43)
    with pytest.raises(attune.InvalidArgument, match=r"k, v: got new keys and values for a torch.float8_e4m3fn "
                                                     r"cache; expected None"):
        attune.flash_attn_with_kvcache(q, k8, v8, k=randn(1, 1, 2, 32), v=randn(1, 1, 2, 32),
                                       cache_seqlens=torch.tensor([4], dtype=torch.int32))
    with pytest.raises(attune.InvalidArgument, match="k_descale and k_scale: got both"):
        attune.flash_attn_with_kvcache(q, k8, v8, k_descale=1.0, k_scale=1.0)
    import numpy as np
    a = np.zeros((1, 4, 2, 32), dtype=np.float32)
    with pytest.raises(attune.InvalidArgument, match="NumPy has no fp8 dtype"):
        attune.flash_attn_func(a, a, a, k_descale=1.0)
