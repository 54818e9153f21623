"""flash_attn_with_kvcache's cache step, as flash-attn's users call it: new
k and v appended in place at cache_seqlens (contiguous and paged, across a
page boundary), rotary embedding of q and the new keys (interleaved and
not, partial rotary dims, per-row positions when causal), cache_batch_idx
and cache_leftpad (down to empty sequences). CPU bfloat16 runs the kernels
on the emulator; the oracle is the fp64 reference over an independently
rotated and updated cache (flash-attn's own test recipe)."""
import pytest
import torch

import attune
from conftest import assert_accurate, attention_one, randn, rope, tables


def expected(q_rot, k_rows, v_rows, pads, ends, causal):
    """Per sequence: fp64 attention over keys [pad, end) of its cache row,
    and the same in bfloat16 (the rule's yardstick)."""
    outs, naive_outs, lses = [], [], []
    for b in range(q_rot.shape[0]):
        ks, vs = k_rows[b, pads[b]:ends[b]], v_rows[b, pads[b]:ends[b]]
        scale = q_rot.shape[-1] ** -0.5
        o, l = attention_one(q_rot[b], ks, vs, scale=scale, causal=causal)
        n, _ = attention_one(q_rot[b], ks, vs, scale=scale, causal=causal, dtype=q_rot.dtype)
        outs.append(o)
        naive_outs.append(n)
        lses.append(l)
    return torch.stack(outs), torch.stack(naive_outs), torch.stack(lses)


def check_cache(after, before, new_rows, rows, lens, what, exact):
    """The cache holds new_rows at [lens[b], lens[b] + Snew) of row rows[b],
    and everything else as before."""
    want = before.clone()
    for b in range(new_rows.shape[0]):
        want[rows[b], lens[b]:lens[b] + new_rows.shape[1]] = new_rows[b].to(before.dtype)
    if exact:
        assert torch.equal(after, want), f"{what}: the cache differs from the appended one"
    else:  # rounding of the rotation in fp32 vs fp64: one ulp
        torch.testing.assert_close(after.double(), want.double(), rtol=1e-2, atol=1e-2, msg=what)
        untouched = torch.ones_like(after, dtype=torch.bool)
        for b in range(new_rows.shape[0]):
            untouched[rows[b], lens[b]:lens[b] + new_rows.shape[1]] = False
        assert torch.equal(after[untouched], before[untouched]), f"{what}: a key outside the appended rows changed"


CASES = {
    # name: (causal, interleaved, rotary_dim, s_new, sq)
    "causal_halves_partial_rotary": (True, False, 32, 3, 3),
    "causal_interleaved_full_rotary": (True, True, 64, 2, 2),
    "noncausal_one_position_for_q": (False, True, 32, 2, 2),
    "no_rotary": (True, None, 0, 4, 1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_appended_keys_and_rotary_match_flash_attns_rule(name):
    causal, interleaved, rotary_dim, s_new, sq = CASES[name]
    b, smax, hq, hkv, d = 2, 40, 4, 2, 64
    q = randn(b, sq, hq, d, seed=1)
    k_cache, v_cache = randn(b, smax, hkv, d, seed=2), randn(b, smax, hkv, d, seed=3)
    k_new, v_new = randn(b, s_new, hkv, d, seed=4), randn(b, s_new, hkv, d, seed=5)
    lens = torch.tensor([5, 17], dtype=torch.int32)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    kw = {}
    if rotary_dim:
        cos, sin = tables(smax, rotary_dim)
        kw = dict(rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved)
    out, lse = attune.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens,
                                              causal=causal, return_softmax_lse=True, **kw)
    assert torch.equal(lens, torch.tensor([5, 17], dtype=torch.int32)), "cache_seqlens is the caller's to advance"

    positions_k = lens[:, None].long() + torch.arange(s_new)[None, :]
    rows = list(range(b))
    if rotary_dim:
        k_ro = rope(k_new, cos, sin, positions_k, interleaved).to(torch.bfloat16)
        q_pos = lens[:, None].long() + (torch.arange(sq)[None, :] if causal else torch.zeros(1, sq, dtype=torch.long))
        q_ro = rope(q, cos, sin, q_pos, interleaved).to(torch.bfloat16)
    else:
        k_ro, q_ro = k_new, q
    check_cache(k_cache, before_k, k_ro, rows, lens, f"{name}: k_cache", exact=not rotary_dim)
    check_cache(v_cache, before_v, v_new, rows, lens, f"{name}: v_cache", exact=True)
    # The oracle reads the cache it expects, not attune's.
    k_want, v_want = before_k.clone(), before_v.clone()
    for i in range(b):
        k_want[i, lens[i]:lens[i] + s_new], v_want[i, lens[i]:lens[i] + s_new] = k_ro[i], v_new[i]
    want, base, want_lse = expected(q_ro, k_want, v_want, [0] * b, (lens + s_new).tolist(), causal)
    assert_accurate(out, want, base, name)
    torch.testing.assert_close(lse.double(), want_lse, rtol=1e-3, atol=1e-3)


def test_a_paged_append_across_a_page_boundary():
    b, page, pages_per_seq, hq, hkv, d = 2, 16, 3, 2, 1, 64
    pool_pages = b * pages_per_seq + 1
    q = randn(b, 4, hq, d, seed=11)
    k_pool, v_pool = randn(pool_pages, page, hkv, d, seed=12), randn(pool_pages, page, hkv, d, seed=13)
    table = torch.randperm(pool_pages, generator=torch.Generator().manual_seed(3))[:b * pages_per_seq]
    table = table.reshape(b, pages_per_seq).to(torch.int32)
    lens = torch.tensor([14, 30], dtype=torch.int32)  # + 4 new: both cross into their next page
    k_new, v_new = randn(b, 4, hkv, d, seed=14), randn(b, 4, hkv, d, seed=15)
    cos, sin = tables(page * pages_per_seq, 64)
    before_k = k_pool.clone()
    out = attune.flash_attn_with_kvcache(q, k_pool, v_pool, k=k_new, v=v_new, cache_seqlens=lens, block_table=table,
                                         rotary_cos=cos, rotary_sin=sin, rotary_interleaved=False, causal=True)

    def rows_of(pool):  # [B, pages x page, Hkv, D] through the table
        return pool[table.long()].reshape(b, pages_per_seq * page, hkv, d)

    k_ro = rope(k_new, cos, sin, lens[:, None].long() + torch.arange(4)[None, :], False).to(torch.bfloat16)
    q_ro = rope(q, cos, sin, lens[:, None].long() + torch.arange(4)[None, :], False).to(torch.bfloat16)
    k_rows, v_rows = rows_of(k_pool), rows_of(v_pool)
    for i in range(b):
        got = k_rows[i, lens[i]:lens[i] + 4].double()
        torch.testing.assert_close(got, k_ro[i].double(), rtol=1e-2, atol=1e-2)
        assert torch.equal(v_rows[i, lens[i]:lens[i] + 4], v_new[i])
    untouched = torch.ones(pool_pages, dtype=torch.bool)
    untouched[table.long().flatten()] = False
    assert torch.equal(k_pool[untouched], before_k[untouched]), "a page outside every table changed"
    k_want = rows_of(k_pool).clone()
    for i in range(b):
        k_want[i, lens[i]:lens[i] + 4] = k_ro[i]
    want, base, _ = expected(q_ro, k_want, v_rows, [0] * b, (lens + 4).tolist(), True)
    assert_accurate(out, want, base, "paged append")


def test_cache_batch_idx_and_leftpad_down_to_empty_sequences():
    bc, smax, hq, hkv, d = 3, 32, 2, 2, 64
    q = randn(3, 1, hq, d, seed=21)
    k_cache, v_cache = randn(bc, smax, hkv, d, seed=22), randn(bc, smax, hkv, d, seed=23)
    idx = torch.tensor([2, 0, 1], dtype=torch.int32)
    lens = torch.tensor([9, 20, 6], dtype=torch.int32)
    pad = torch.tensor([3, 0, 6], dtype=torch.int32)  # the third sequence is empty
    out, lse = attune.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, cache_batch_idx=idx,
                                              cache_leftpad=pad, causal=True, return_softmax_lse=True)
    rows = [int(x) for x in idx]
    want, base, _ = expected(q, k_cache[rows], v_cache[rows], pad.tolist(), lens.tolist(), True)
    assert_accurate(out[:2], want[:2], base[:2], "batch_idx + leftpad")
    assert torch.equal(out[2], torch.zeros_like(out[2])), "an empty sequence gives zeros"
    assert torch.isinf(lse[2]).all() and (lse[2] > 0).all(), "flash-attn's LSE of a row without keys: +inf"

    # With an append: each sequence's new key lands in its own row, past its
    # keys, and the empty one now sees exactly that key.
    k_new, v_new = randn(3, 1, hkv, d, seed=24), randn(3, 1, hkv, d, seed=25)
    before_k = k_cache.clone()
    out = attune.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens,
                                         cache_batch_idx=idx, cache_leftpad=pad, causal=True)
    check_cache(k_cache, before_k, k_new, rows, lens, "batch_idx append", exact=True)
    want, base, _ = expected(q, k_cache[rows], v_cache[rows], pad.tolist(), (lens + 1).tolist(), True)
    assert_accurate(out, want, base, "batch_idx + leftpad + append")


def test_float32_caches_take_the_same_rule_on_the_reference():
    b, smax, h, d = 2, 24, 2, 32
    q = randn(b, 2, h, d, seed=31, dtype=torch.float32)
    k_cache, v_cache = randn(b, smax, h, d, seed=32, dtype=torch.float32), randn(b, smax, h, d, seed=33,
                                                                                  dtype=torch.float32)
    k_new, v_new = randn(b, 2, h, d, seed=34, dtype=torch.float32), randn(b, 2, h, d, seed=35, dtype=torch.float32)
    lens = torch.tensor([3, 10], dtype=torch.int32)
    cos, sin = tables(smax, 16, torch.float32)
    before_k = k_cache.clone()
    out = attune.flash_attn_with_kvcache(q, k_cache, v_cache, k=k_new, v=v_new, cache_seqlens=lens, rotary_cos=cos,
                                         rotary_sin=sin, causal=True)
    pos = lens[:, None].long() + torch.arange(2)[None, :]
    k_ro, q_ro = rope(k_new, cos, sin, pos, True), rope(q, cos, sin, pos, True)
    check_cache(k_cache, before_k, k_ro, [0, 1], lens, "float32 k_cache", exact=False)
    want, _, _ = expected(q_ro, k_cache.double(), v_cache.double(), [0, 0], (lens + 2).tolist(), True)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fault", ["past_the_row", "page_outside_the_pool", "leftpad_past_the_keys",
                                   "batch_idx_outside_the_cache", "k_without_cache_seqlens", "rotary_without_k"])
def test_a_bad_step_is_refused_before_anything_is_written(fault):
    b, page, d = 2, 16, 64
    q = randn(b, 1, 2, d, seed=41)
    k_pool, v_pool = randn(5, page, 1, d, seed=42), randn(5, page, 1, d, seed=43)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    k_new, v_new = randn(b, 2, 1, d, seed=44), randn(b, 2, 1, d, seed=45)
    lens = torch.tensor([4, 8], dtype=torch.int32)
    kw = dict(k=k_new, v=v_new, cache_seqlens=lens, block_table=table)
    match = {"past_the_row": "31 \\+ 2 = 33 exceeds the capacity addressable by block_table \\(2 pages x page_size",
             "page_outside_the_pool": "block_table",
             "leftpad_past_the_keys": "cache_leftpad\\[1\\]: got 9", "batch_idx_outside_the_cache":
             "cache_batch_idx\\[0\\]: got 7", "k_without_cache_seqlens": "cache_seqlens: got None",
             "rotary_without_k": "without k and v"}[fault]
    cache_k, cache_v = k_pool, v_pool
    if fault == "past_the_row":
        kw["cache_seqlens"] = torch.tensor([4, 31], dtype=torch.int32)
    elif fault == "page_outside_the_pool":  # 15 + 2 keys reach the second page
        kw["block_table"] = torch.tensor([[0, 1], [2, 9]], dtype=torch.int32)
        kw["cache_seqlens"] = torch.tensor([4, 15], dtype=torch.int32)
    elif fault in ("leftpad_past_the_keys", "batch_idx_outside_the_cache"):
        cache_k, cache_v = k_pool[:2].clone(), v_pool[:2].clone()  # contiguous [2, 16, 1, D]
        kw["block_table"] = None
        if fault == "leftpad_past_the_keys":
            kw["cache_leftpad"] = torch.tensor([0, 9], dtype=torch.int32)
        else:
            kw["cache_batch_idx"] = torch.tensor([7, 0], dtype=torch.int32)
    elif fault == "k_without_cache_seqlens":
        kw["cache_seqlens"] = None
    else:
        kw = dict(rotary_cos=torch.ones(32, 32, dtype=torch.bfloat16), rotary_sin=torch.ones(32, 32,
                                                                                                dtype=torch.bfloat16))
    before = cache_k.clone(), cache_v.clone()
    with pytest.raises(attune.InvalidArgument, match=match):
        attune.flash_attn_with_kvcache(q, cache_k, cache_v, causal=True, **kw)
    assert torch.equal(cache_k, before[0]) and torch.equal(cache_v, before[1]), "a refused call wrote the cache"
