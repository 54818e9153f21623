"""flash-attn's functions (and SDPA's) on CPU tensors: bfloat16/float16
run attune's kernels on the emulator and must meet FlashAttention's accuracy
rule against an independent fp64 attention; float32/float64 run the fp64
reference. The families follow the CLI tests': causal and not, GQA,
Dk != Dv, windows, Sq > Sk (empty rows), varlen with empty sequences, KV
caches contiguous and paged, softcap and ALiBi; then flash-attn's packed
functions and its conventions (LSE +inf for a row without keys, an empty
tensor for the probabilities, strided last dimensions copied)."""
import math

import numpy as np
import pytest
import torch

import attune
from conftest import assert_accurate, max_error, naive, randn, reference


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", [
    dict(b=2, sq=37, sk=50, hq=4, hkv=2, d=64, dv=64, causal=True),
    dict(b=1, sq=50, sk=37, hq=2, hkv=2, d=64, dv=48, causal=True),  # Sq > Sk: rows without keys
    dict(b=1, sq=33, sk=33, hq=4, hkv=1, d=32, dv=32, causal=False),  # MQA
    dict(b=1, sq=40, sk=70, hq=2, hkv=2, d=96, dv=96, causal=False, window=(16, 8)),
    dict(b=1, sq=40, sk=40, hq=2, hkv=1, d=64, dv=64, causal=True, window=(10, -1)),
])
def test_flash_attn_func_matches_the_reference(dtype, case):
    q = randn(case["b"], case["sq"], case["hq"], case["d"], dtype=dtype, seed=1)
    k = randn(case["b"], case["sk"], case["hkv"], case["d"], dtype=dtype, seed=2)
    v = randn(case["b"], case["sk"], case["hkv"], case["dv"], dtype=dtype, seed=3)
    window = case.get("window", (-1, -1))
    out, lse, probs = attune.flash_attn_func(q, k, v, causal=case["causal"], window_size=window,
                                             return_attn_probs=True)
    assert probs.shape == (0,) and probs.device == q.device, "flash-attn's S_dmask without dropout: empty"
    assert out.shape == (case["b"], case["sq"], case["hq"], case["dv"]) and out.dtype == dtype
    assert lse.shape == (case["b"], case["hq"], case["sq"]) and lse.dtype == torch.float32
    want, want_lse = reference(q, k, v, causal=case["causal"], window=window)
    assert_accurate(out, want, naive(q, k, v, causal=case["causal"], window=window), str(case))
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite), "rows without keys: LSE = +inf exactly there"
    assert (lse[~finite] == math.inf).all(), "flash-attn's LSE of a row without keys"
    assert max_error(lse[finite], want_lse[finite]) < 2e-2
    assert (out[~finite.transpose(1, 2)] == 0).all(), "rows without keys are 0"


def test_a_flash_attn_script_runs_unchanged():
    # What a flash-attn user's code looks like, positional arguments included.
    from attune import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

    q, k, v = (randn(2, 24, 4, 64, seed=s) for s in (4, 5, 6))
    out = flash_attn_func(q, k, v, 0.0, None, True)  # dropout_p, softmax_scale, causal
    assert_accurate(out, reference(q, k, v, causal=True)[0], naive(q, k, v, causal=True), "positional")
    cu = torch.tensor([0, 10, 24, 48], dtype=torch.int32)
    qp, kp, vp = (x.reshape(48, 4, 64) for x in (q, k, v))
    out = flash_attn_varlen_func(qp, kp, vp, cu, cu, 24, 24, 0.0, 0.125, True)
    assert_accurate(out, reference(qp, kp, vp, causal=True, scale=0.125, cu_seqlens_q=cu, cu_seqlens_k=cu)[0],
                    naive(qp, kp, vp, causal=True, scale=0.125, cu_seqlens_q=cu, cu_seqlens_k=cu), "varlen")
    out = flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=torch.tensor([24, 9], dtype=torch.int32),
                                  causal=True)
    lens = [24, 9]
    assert_accurate(out, reference(q[:, :1], k, v, causal=True, seqlens_k=lens)[0],
                    naive(q[:, :1], k, v, causal=True, seqlens_k=lens), "kvcache")


def test_varlen_with_empty_sequences_and_softmax_lse_layout():
    cu_q = torch.tensor([0, 7, 7, 30, 31], dtype=torch.int32)  # an empty query sequence
    cu_k = torch.tensor([0, 12, 20, 20, 45], dtype=torch.int32)  # ... and an empty key sequence
    q, k, v = randn(31, 4, 64, seed=7), randn(45, 2, 64, seed=8), randn(45, 2, 64, seed=9)
    out, lse, _ = attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 23, 25, causal=True, return_attn_probs=True)
    assert out.shape == (31, 4, 64) and lse.shape == (4, 31)
    kw = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    want, want_lse = reference(q, k, v, **kw)
    assert_accurate(out, want, naive(q, k, v, **kw), "varlen")
    assert (out[7:30] == 0).all() and (lse[:, 7:30] == math.inf).all(), "the sequence without keys"


def test_sdpa_takes_bhsd_with_top_left_causal():
    q, k, v = randn(1, 2, 20, 32, seed=10), randn(1, 2, 30, 32, seed=11), randn(1, 2, 30, 32, seed=12)
    out = attune.sdpa(q, k, v, is_causal=True)
    assert out.shape == (1, 2, 20, 32)
    t = [x.transpose(1, 2) for x in (q, k, v)]
    want = reference(*t, causal=True, top_left=True)[0].transpose(1, 2)
    assert_accurate(out, want, naive(*t, causal=True, top_left=True).transpose(1, 2), "sdpa")
    with pytest.raises(attune.InvalidArgument, match="enable_gqa"):
        attune.sdpa(q, k[:, :1], v[:, :1])
    gqa = attune.sdpa(q, k[:, :1], v[:, :1], enable_gqa=True)
    assert gqa.shape == (1, 2, 20, 32)


@pytest.mark.parametrize("paged", [False, True])
def test_kvcache_contiguous_and_paged_with_splits(paged):
    b, smax, hkv, d = 2, 96, 2, 64
    q = randn(b, 2, 8, d, seed=13)
    k, v = randn(b, smax, hkv, d, seed=14), randn(b, smax, hkv, d, seed=15)
    lens = torch.tensor([96, 41], dtype=torch.int32)
    want = reference(q, k, v, causal=True, seqlens_k=lens)[0]
    base = naive(q, k, v, causal=True, seqlens_k=lens)
    kc, vc, table = k, v, None
    if paged:  # pages of 16 in a shuffled pool
        pages = smax // 16
        perm = torch.randperm(b * pages, generator=torch.Generator().manual_seed(0))
        table = perm.reshape(b, pages).to(torch.int32)
        kc = torch.empty(b * pages, 16, hkv, d, dtype=k.dtype)
        vc = torch.empty_like(kc)
        kc[table.long().flatten()] = k.reshape(b * pages, 16, hkv, d)
        vc[table.long().flatten()] = v.reshape(b * pages, 16, hkv, d)
    for splits in (0, 1, 3):
        out, lse = attune.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=True,
                                                  num_splits=splits, return_softmax_lse=True)
        assert_accurate(out, want, base, f"paged={paged} splits={splits}")
    with pytest.raises(attune.InvalidArgument, match="cache_seqlens: got None with k and v"):
        attune.flash_attn_with_kvcache(q, kc, vc, k=q, v=q, block_table=table)


def test_chunked_prefill_over_a_paged_cache_runs_the_forward_kernel():
    # varlen queries over a paged cache, one chunk of 130 rows: Runtime::plan's
    # rule sends it to the forward kernel, which reads the pages itself.
    hkv, d, page = 1, 32, 16
    lens = [150, 20]
    k, v = randn(2, 160, hkv, d, seed=16), randn(2, 160, hkv, d, seed=17)
    table = torch.arange(20, dtype=torch.int32).reshape(2, 10)
    kc, vc = k.reshape(20, page, hkv, d), v.reshape(20, page, hkv, d)
    cu_q = torch.tensor([0, 130, 131], dtype=torch.int32)
    cu_k = torch.tensor([0, 150, 170], dtype=torch.int32)
    q = randn(131, 2, d, seed=18)
    out = attune.flash_attn_varlen_func(q, kc, vc, cu_q, cu_k, 130, 160, causal=True, block_table=table)
    kw = dict(causal=True, cu_seqlens_q=cu_q, seqlens_k=lens)
    assert_accurate(out, reference(q, k, v, **kw)[0], naive(q, k, v, **kw), "chunked prefill")
    assert ".paged1" in attune.explain(q, kc, vc, causal=True, cu_seqlens_q=cu_q, cache_seqlens=torch.tensor(lens),
                                       block_table=table, max_seqlen_q=130, max_seqlen_k=160).variant


def test_softcap_and_alibi():
    q, k, v = randn(1, 30, 4, 64, seed=19), randn(1, 30, 2, 64, seed=20), randn(1, 30, 2, 64, seed=21)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    out = attune.flash_attn_func(q, k, v, causal=True, softcap=5.0, alibi_slopes=slopes)
    kw = dict(causal=True, softcap=5.0, alibi=slopes)
    assert_accurate(out, reference(q, k, v, **kw)[0], naive(q, k, v, **kw), "softcap + alibi")


def test_sinks_dense_and_varlen():
    """attune's sinks (gpt-oss): one more softmax term per head with no
    value; a row without keys gives 0 and LSE = its sink."""
    sinks = torch.tensor([1.5, -0.5, 0.0, 3.0])
    q, k, v = randn(2, 20, 4, 64, seed=40), randn(2, 12, 2, 64, seed=41), randn(2, 12, 2, 64, seed=42)
    out, lse, _ = attune.flash_attn_func(q, k, v, causal=True, sinks=sinks, return_attn_probs=True)
    kw = dict(causal=True, sinks=sinks)
    want, want_lse = reference(q, k, v, **kw)
    assert_accurate(out, want, naive(q, k, v, **kw), "dense sinks")
    assert (lse[:, :, :8] == sinks[None, :, None]).all(), "rows without keys: LSE is the sink"
    assert (lse.double() - want_lse).abs().max() < 1e-3
    cu_q, cu_k = torch.tensor([0, 5, 5, 19], dtype=torch.int32), torch.tensor([0, 9, 11, 11], dtype=torch.int32)
    q, k, v = randn(19, 4, 64, seed=43), randn(11, 2, 64, seed=44), randn(11, 2, 64, seed=45)
    out = attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 14, 9, sinks=sinks)
    kw = dict(sinks=sinks, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    assert_accurate(out, reference(q, k, v, **kw)[0], naive(q, k, v, **kw), "varlen sinks")


def test_float32_and_float64_run_the_reference_exactly():
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        q, k, v = (randn(2, 9, 2, 16, dtype=dtype, seed=s) for s in (22, 23, 24))
        out, lse, _ = attune.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
        want, want_lse = reference(q, k, v, causal=True)
        assert out.dtype == dtype and max_error(out, want) < tol
        assert lse.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)


def test_merge_states_of_two_key_halves_is_the_whole():
    q, k, v = randn(20, 2, 64, seed=25), randn(40, 2, 64, seed=26), randn(40, 2, 64, seed=27)
    cu_q = torch.tensor([0, 20], dtype=torch.int32)
    parts = []
    for lo, hi in ((0, 25), (25, 40)):
        cu_k = torch.tensor([0, hi - lo], dtype=torch.int32)
        o, lse, _ = attune.flash_attn_varlen_func(q, k[lo:hi], v[lo:hi], cu_q, cu_k, 20, hi - lo,
                                                  return_attn_probs=True)
        parts.append((o, lse))
    out, lse = attune.merge_states([p[0] for p in parts], [p[1] for p in parts])
    whole = attune.flash_attn_varlen_func(q, k, v, cu_q, torch.tensor([0, 40], dtype=torch.int32), 20, 40)
    assert max_error(out, whole) < 2e-2


def test_bad_inputs_say_what_was_wrong():
    q, k = randn(1, 8, 2, 64), randn(1, 8, 2, 64)
    with pytest.raises(attune.InvalidArgument, match=r"dropout_p: got 1.0; expected a probability in \[0, 1\)"):
        attune.flash_attn_func(q, k, k, dropout_p=1.0)
    with pytest.raises(ValueError, match="head_dim"):  # attune.InvalidArgument is a ValueError
        attune.flash_attn_func(q, randn(1, 8, 2, 32), randn(1, 8, 2, 32))
    with pytest.raises(attune.InvalidArgument, match="dtypes"):
        attune.flash_attn_func(q, k.half(), k.half())
    with pytest.raises(attune.InvalidArgument, match="window_size"):
        attune.flash_attn_func(q, k, k, window_size=(-3, 0))
    with pytest.raises(attune.InvalidArgument, match="expected float16 or bfloat16"):
        from attune import _engine
        _engine.backend_of(_engine.View(0, (1,), (1,), "fp32", "cuda", 0))
    with pytest.raises(attune.InvalidArgument, match="rotary_cos, rotary_sin: got only one"):
        attune.flash_attn_with_kvcache(q, k, k, rotary_cos=q)


def test_the_rule_catches_a_wrong_answer():
    # Planted: the causal output judged against the full attention must fail.
    q, k, v = (randn(1, 20, 2, 64, seed=s) for s in (28, 29, 30))
    out = attune.flash_attn_func(q, k, v, causal=True)
    with pytest.raises(AssertionError):
        assert_accurate(out, reference(q, k, v)[0], naive(q, k, v), "planted")


def _paged_case():
    """Two sequences over a pool of 8 pages of 16 keys, 3 pages per table
    row; row 1 uses 2 pages, so its last entry (-1) is never read."""
    q = randn(2, 1, 2, 32, seed=30)
    kc, vc = randn(8, 16, 1, 32, seed=31), randn(8, 16, 1, 32, seed=32)
    table = torch.tensor([[0, 1, 2], [3, 4, -1]], dtype=torch.int32)
    lens = torch.tensor([40, 20], dtype=torch.int32)
    return q, kc, vc, table, lens


@pytest.mark.parametrize("fault", ["length past the row", "page past the pool", "negative page"])
@pytest.mark.parametrize("path", ["flash_attn_with_kvcache", "flash_attn_varlen_func", "BatchDecode"])
def test_a_paged_call_outside_its_block_table_is_refused_on_the_host(fault, path):
    q, kc, vc, table, lens = _paged_case()

    def call():
        if path == "flash_attn_with_kvcache":
            return attune.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, block_table=table, causal=True)
        if path == "flash_attn_varlen_func":
            cu_q = torch.tensor([0, 1, 2], dtype=torch.int32)
            cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), lens.cumsum(0).to(torch.int32)])
            return attune.flash_attn_varlen_func(q.reshape(2, 2, 32), kc, vc, cu_q, cu_k, 1, 48, causal=True,
                                                 block_table=table)
        dec = attune.BatchDecode().plan(batch_size=2, num_qo_heads=2, num_kv_heads=1, head_dim=32, page_size=16,
                                        max_pages=3, num_pages=8, dtype=q.dtype)
        return dec.run(q, kc, vc, table, lens)

    call()  # within bounds: accepted (the unused -1 is never read)
    if fault == "length past the row":
        lens[1] = 49
        says = r"cache_seqlens\[1\] = 49 exceeds the capacity addressable by block_table \(3 pages x page_size 16"
        if path == "flash_attn_varlen_func":
            says = says.replace("cache_seqlens", "(cache_)?seqlens(_k)?")
    elif fault == "page past the pool":
        table[0, 2] = 8
        says = r"block_table\[0, 2\] = 8: outside the page pool \(expected a page index in \[0, 8\)"
    else:
        lens[1] = 33  # now row 1 reads its third page, the -1
        says = r"block_table\[1, 2\] = -1: outside the page pool"
    with pytest.raises(attune.InvalidArgument, match=says):
        call()


# -- flash-attn's packed functions -----------------------------------------------------

PACKED = {  # name: (q's shape, or None where q is packed too; the packed shape; the axis of the parts)
    "qkvpacked": (None, (2, 24, 3, 2, 64), 2),
    "kvpacked": ((2, 20, 4, 64), (2, 28, 2, 1, 64), 2),  # GQA: 4 query heads over one KV head
    "varlen_qkvpacked": (None, (32, 3, 2, 64), 1),
    "varlen_kvpacked": ((32, 4, 64), (40, 2, 2, 64), 1),  # GQA
}
CU_Q = torch.tensor([0, 13, 32], dtype=torch.int32)  # longest 19
CU_K = torch.tensor([0, 18, 40], dtype=torch.int32)  # longest 22


def _packed_call(name, q, packed, causal):
    kw = dict(causal=causal, deterministic=True, return_attn_probs=True)
    if name == "qkvpacked":
        return attune.flash_attn_qkvpacked_func(packed, **kw)
    if name == "kvpacked":
        return attune.flash_attn_kvpacked_func(q, packed, **kw)
    if name == "varlen_qkvpacked":
        return attune.flash_attn_varlen_qkvpacked_func(packed, CU_Q, 19, **kw)
    return attune.flash_attn_varlen_kvpacked_func(q, packed, CU_Q, CU_K, 19, 22, **kw)


def _unpacked_call(name, q, k, v, causal):
    kw = dict(causal=causal, deterministic=True, return_attn_probs=True)
    if name == "varlen_qkvpacked":
        return attune.flash_attn_varlen_func(q, k, v, CU_Q, CU_Q, 19, 19, **kw)
    if name == "varlen_kvpacked":
        return attune.flash_attn_varlen_func(q, k, v, CU_Q, CU_K, 19, 22, **kw)
    return attune.flash_attn_func(q, k, v, **kw)


@pytest.mark.parametrize("name, causal, dtype", [
    ("qkvpacked", True, torch.bfloat16),
    ("kvpacked", False, torch.float16),
    ("varlen_qkvpacked", False, torch.float16),
    ("varlen_kvpacked", True, torch.bfloat16),
])
def test_packed_functions_match_the_unpacked_ones_forward_and_backward(name, causal, dtype):
    q_shape, packed_shape, axis = PACKED[name]
    packed = randn(*packed_shape, dtype=dtype, requires_grad=True, seed=40)
    q = randn(*q_shape, dtype=dtype, requires_grad=True, seed=41) if q_shape else None
    out, lse, probs = _packed_call(name, q, packed, causal)
    # The same inputs unpacked into contiguous leaves: the function the packed one must equal.
    parts = [x.detach().contiguous().requires_grad_() for x in packed.unbind(axis)]
    plain = ([q.detach().clone().requires_grad_()] if q is not None else []) + parts
    want_out, want_lse, _ = _unpacked_call(name, *plain, causal)
    varlen = dict(cu_seqlens_q=CU_Q, cu_seqlens_k=CU_Q if name == "varlen_qkvpacked" else CU_K) \
        if name.startswith("varlen") else {}
    assert_accurate(out, reference(*plain, causal=causal, **varlen)[0], naive(*plain, causal=causal, **varlen), name)
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse) and probs.shape == (0,)

    dout = randn(*out.shape, dtype=dtype, seed=42)
    got = torch.autograd.grad(out, [q, packed] if q is not None else [packed], dout)
    want = torch.autograd.grad(want_out, plain, dout)
    dpacked = got[-1]
    assert dpacked.shape == packed.shape, "the gradient comes back packed like the input"
    assert torch.equal(dpacked, torch.stack(want[-len(parts):], axis))
    if q is not None:
        assert torch.equal(got[0], want[0])
    # The forward reads the views as they are; the backward copies them (named by explain).
    copies = attune.explain(*(x.detach() for x in ((q,) if q is not None else ()) + packed.unbind(axis)),
                            causal=causal, op="bwd", cu_seqlens_q=varlen.get("cu_seqlens_q"),
                            cu_seqlens_k=varlen.get("cu_seqlens_k")).copies
    assert len(copies) == len(parts) and all("copied contiguous for the backward" in c for c in copies), copies
    assert attune.explain(*plain, causal=causal, cu_seqlens_q=varlen.get("cu_seqlens_q"),
                          cu_seqlens_k=varlen.get("cu_seqlens_k")).copies == ()


def test_packed_functions_refuse_a_wrong_packing():
    with pytest.raises(attune.InvalidArgument, match=r"qkv: got shape \[1, 8, 2, 2, 64\]; expected \[batch, seqlen, 3"):
        attune.flash_attn_qkvpacked_func(randn(1, 8, 2, 2, 64))
    with pytest.raises(attune.InvalidArgument, match=r"kv: got shape \[8, 3, 2, 64\]; expected \[total_k, 2"):
        attune.flash_attn_varlen_kvpacked_func(randn(8, 2, 64), randn(8, 3, 2, 64), CU_Q, CU_Q, 8, 8)


# -- flash-attn's conventions ------------------------------------------------------------

def test_rows_without_keys_return_flash_attns_lse_and_merge_states_skips_them():
    # varlen: the second key sequence is empty, so its 7 query rows see no key
    q, k, v = randn(20, 2, 64, seed=43), randn(30, 2, 64, seed=44), randn(30, 2, 64, seed=45)
    cu_q = torch.tensor([0, 13, 20], dtype=torch.int32)
    cu_k = torch.tensor([0, 30, 30], dtype=torch.int32)
    out, lse, _ = attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 13, 30, return_attn_probs=True)
    assert (lse[:, 13:] == math.inf).all() and torch.isfinite(lse[:, :13]).all()
    # the KV cache's decode: a sequence with no cached keys
    lens = torch.tensor([0, 11], dtype=torch.int32)
    _, dec_lse = attune.flash_attn_with_kvcache(q[:4].reshape(2, 1, 4, 64), k[:24].reshape(2, 12, 2, 64),
                                                v[:24].reshape(2, 12, 2, 64), cache_seqlens=lens,
                                                return_softmax_lse=True)
    assert (dec_lse[0] == math.inf).all() and torch.isfinite(dec_lse[1]).all()
    # merge_states takes either convention for an empty partial and returns attune's (-inf)
    cu_one = torch.tensor([0, 20], dtype=torch.int32)
    full, full_lse, _ = attune.flash_attn_varlen_func(q, k, v, cu_one, torch.tensor([0, 30], dtype=torch.int32),
                                                      20, 30, return_attn_probs=True)
    none, none_lse, _ = attune.flash_attn_varlen_func(q, k[:1], v[:1], cu_one, torch.tensor([0, 0], dtype=torch.int32),
                                                      20, 1, return_attn_probs=True)
    assert (none == 0).all() and (none_lse == math.inf).all()
    merged, merged_lse = attune.merge_states([full, none], [full_lse, none_lse])
    assert max_error(merged, full) < 1e-2 and max_error(merged_lse, full_lse) < 1e-4
    empty, empty_lse = attune.merge_states([none, none], [none_lse, -none_lse])
    assert (empty == 0).all() and (empty_lse == -math.inf).all()


def test_a_strided_last_dimension_is_copied_as_flash_attn_does_and_explain_names_the_copy():
    q = randn(1, 24, 64, 2, seed=46).transpose(-1, -2)  # [1, 24, 2, 64], last-dimension stride 2
    k, v = randn(1, 24, 2, 64, seed=47), randn(1, 24, 2, 64, seed=48)
    assert q.stride(-1) == 2
    assert torch.equal(attune.flash_attn_func(q, k, v, causal=True),
                       attune.flash_attn_func(q.contiguous(), k, v, causal=True))
    choice = attune.explain(q, k, v, causal=True)
    assert choice.copies == ("q: last dimension stride 2, copied contiguous (the kernels read each head's row "
                             "with stride 1)",), choice
    assert choice.variant == attune.explain(q.contiguous(), k, v, causal=True).variant
    assert attune.explain(q.contiguous(), k, v, causal=True).copies == ()
    # A KV cache is refused, not copied on every step, as flash-attn refuses it; its q is copied.
    kt = k.transpose(-1, -2).contiguous().transpose(-1, -2)
    with pytest.raises(attune.InvalidArgument, match="k: the last dimension has stride 2"):
        attune.flash_attn_with_kvcache(q[:, :1].contiguous(), kt, v, cache_seqlens=24)
    assert torch.equal(attune.flash_attn_with_kvcache(q[:, :1], k, v, cache_seqlens=24),
                       attune.flash_attn_with_kvcache(q[:, :1].contiguous(), k, v, cache_seqlens=24))
    assert attune.explain(q[:, :1], k, v, op="decode", cache_seqlens=torch.tensor([24], dtype=torch.int32)) \
        .copies[0].startswith("q: last dimension stride 2")


def test_window_size_tensors_do_not_grow_the_mask_cache():
    from attune import _interface

    q, k = randn(1, 4, 1, 8, dtype=torch.float32, seed=49), randn(1, 4, 1, 8, dtype=torch.float32, seed=50)
    want = attune.flash_attn_func(q, k, k, window_size=(2, 0))
    size = len(_interface._masks)
    for i in range(10000):  # a fresh tensor each call, as a model that keeps its window in a buffer passes it
        window = torch.tensor([2, 0]) if i % 2 else (torch.tensor(2), torch.tensor(0))
        out = attune.flash_attn_func(q, k, k, window_size=window)
    assert len(_interface._masks) == size
    assert torch.equal(out, want)


def test_numpy_arrays_take_the_packed_functions_and_flash_attns_returns():
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((1, 16, 3, 2, 64)).astype(np.float16)  # the emulator, on strided views
    out, lse, probs = attune.flash_attn_qkvpacked_func(qkv, causal=True, return_attn_probs=True)
    parts = [np.ascontiguousarray(qkv[:, :, i]) for i in range(3)]
    want, want_lse, _ = attune.flash_attn_func(*parts, causal=True, return_attn_probs=True)
    assert np.array_equal(out, want) and np.array_equal(lse, want_lse)
    assert isinstance(probs, np.ndarray) and probs.shape == (0,) and probs.dtype == np.float16
    q, kv = rng.standard_normal((9, 2, 16)), rng.standard_normal((6, 2, 1, 16))  # float64: the reference
    cu_q, cu_k = np.array([0, 9], dtype=np.int32), np.array([0, 6], dtype=np.int32)
    out, lse, _ = attune.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 9, 6, causal=True, return_attn_probs=True)
    want = attune.flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_q, cu_k, 9, 6, causal=True)
    assert np.array_equal(out, want)
    assert (lse[:, :3] == np.inf).all() and np.isfinite(lse[:, 3:]).all(), "9 rows over 6 keys: 3 see none"
    strided = np.ascontiguousarray(q.swapaxes(-1, -2)).swapaxes(-1, -2)
    assert np.array_equal(attune.flash_attn_varlen_func(strided, kv[:, 0], kv[:, 1], cu_q, cu_k, 9, 6, causal=True),
                          want)
