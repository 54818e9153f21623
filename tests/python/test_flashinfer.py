"""attune.flashinfer: FlashInfer's wrapper classes and merge functions on
attune's kernels (CPU bf16 tensors on the emulator), against an fp64
attention over the same pages, read through FlashInfer's CSR page table by
this file's own gather: page sizes 1, 16 and 5 (which divides no length),
empty requests, NHD and HND caches, a (k, v) pair and one [pages, 2, ...]
tensor, GQA, causal, window_left, logits_soft_cap, sm_scale, sinks and the
base-2 LSE. A wrong page index in the table fails the check (planted), and
on the recording fake driver a planned run launches one kernel and nothing
else, as BatchDecode's runs do."""
import math

import pytest
import torch

import attune
import attune.flashinfer as flashinfer
from conftest import assert_accurate, attention_one, max_error, randn
from test_serving import _count_on_fake, needs_fake

HQ, HKV, D = 4, 2, 32
LOG2E = 1 / math.log(2)


def offsets(counts):
    """indptr (int32 [B + 1]) of per-request counts."""
    return torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32)


def workspace():
    return torch.empty(1 << 20, dtype=torch.uint8)


class Pages:
    """A paged cache as FlashInfer names it: requests' keys in shuffled
    pages of a pool (with spare pages nobody reads), indptr, indices and
    last_page_len."""

    def __init__(self, lengths, page_size, layout="NHD", seed=0):
        self.lengths, self.page_size, self.layout = lengths, page_size, layout
        counts = [(n + page_size - 1) // page_size for n in lengths]
        self.indptr = offsets(counts)
        used = int(self.indptr[-1])
        pool = used + 3
        self.indices = torch.randperm(pool, generator=torch.Generator().manual_seed(seed))[:used].to(torch.int32)
        self.last_page_len = torch.tensor([(n - 1) % page_size + 1 if n else 0 for n in lengths], dtype=torch.int32)
        shape = (pool, page_size, HKV, D) if layout == "NHD" else (pool, HKV, page_size, D)
        self.k, self.v = randn(*shape, seed=seed + 1), randn(*shape, seed=seed + 2)

    def keys(self, b, wrong_page=False):
        """Request b's keys and values [n, Hkv, D], gathered page by page
        (wrong_page: its first page read from the next slot of indices, the
        planted bug)."""
        k, v = (x if self.layout == "NHD" else x.transpose(1, 2) for x in (self.k, self.v))
        pages = self.indices[int(self.indptr[b]):int(self.indptr[b + 1])].long()
        if wrong_page and len(pages):
            pages = pages.clone()
            pages[0] = int(self.indices[(int(self.indptr[b]) + 1) % len(self.indices)])
        n = self.lengths[b]
        return k[pages].reshape(-1, HKV, D)[:n], v[pages].reshape(-1, HKV, D)[:n]

    def plan_args(self):
        return self.indptr, self.indices, self.last_page_len


def check(out, lse, q, pages, qo_indptr, what, wrong_page=False, **kw):
    """out and the base-2 lse of every request against the fp64 attention
    over its pages (assert_accurate, with bf16 naive computation as the
    yardstick)."""
    for b in range(len(pages.lengths)):
        rows = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        if rows.start == rows.stop:
            continue
        k, v = pages.keys(b, wrong_page)
        want, want_lse = attention_one(q[rows], k, v, **kw)
        naive, _ = attention_one(q[rows], k, v, dtype=torch.bfloat16, **kw)
        assert_accurate(out[rows], want, naive, f"{what}: request {b}")
        if lse is not None:
            want_lse = want_lse.t() * LOG2E  # [rows, Hq], base 2
            finite = torch.isfinite(want_lse)
            assert torch.equal(torch.isfinite(lse[rows]), finite), f"{what}: request {b}: empty rows' LSE"
            assert max_error(lse[rows][finite], want_lse[finite]) < 1e-3, f"{what}: request {b}: LSE"


CASES = [  # page size, kv lengths (an empty request among them), layout
    (1, [3, 0, 9], "NHD"),
    (16, [17, 40, 0, 16], "HND"),
    (5, [12, 0, 1, 23], "NHD"),
]


@pytest.mark.parametrize("page_size, lengths, layout", CASES)
def test_decode_over_pages(page_size, lengths, layout):
    pages = Pages(lengths, page_size, layout)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace(), layout)
    wrapper.plan(*pages.plan_args(), HQ, HKV, D, page_size, q_data_type=torch.bfloat16)
    q = randn(len(lengths), HQ, D, seed=9)
    cache = (pages.k, pages.v) if layout == "NHD" else torch.stack((pages.k, pages.v), 1)  # both forms
    out, lse = wrapper.run(q, cache, return_lse=True)
    assert out.shape == (len(lengths), HQ, D) and lse.shape == (len(lengths), HQ) and lse.dtype == torch.float32
    rows = torch.arange(len(lengths) + 1)  # one query row per request
    check(out, lse, q, pages, rows, f"decode page {page_size}", scale=D ** -0.5)


def test_decode_with_window_softcap_scale_and_sinks():
    pages = Pages([30, 7, 0], 16, "NHD", seed=3)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    wrapper.plan(*pages.plan_args(), HQ, HKV, D, 16, window_left=9, logits_soft_cap=3.0, sm_scale=0.3,
                 q_data_type="bfloat16")
    q = randn(3, HQ, D, seed=4)
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out, lse = wrapper.run(q, (pages.k, pages.v), return_lse=True, sinks=sinks)
    check(out, lse, q, pages, torch.arange(4), "window, softcap, scale, sinks", scale=0.3, softcap=3.0,
          window=(9, 0), causal=True, sinks=sinks)


@pytest.mark.parametrize("page_size, lengths, layout", CASES)
def test_prefill_over_pages(page_size, lengths, layout):
    pages = Pages(lengths, page_size, layout, seed=5)
    queries = [min(n, 4) for n in lengths]  # each request's last keys are its new rows
    qo_indptr = offsets(queries)
    window = 6 if page_size == 5 else -1  # one case with a window, crossing page boundaries
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace(), layout)
    wrapper.plan(qo_indptr, *pages.plan_args(), HQ, HKV, D, page_size, causal=True, window_left=window,
                 q_data_type=torch.bfloat16)
    q = randn(int(qo_indptr[-1]), HQ, D, seed=6)
    out, lse = wrapper.run(q, (pages.k, pages.v), return_lse=True)
    check(out, lse, q, pages, qo_indptr, f"prefill page {page_size}", scale=D ** -0.5, causal=True,
          window=(window, 0))


def test_flashinfers_documented_decode_example_runs_unchanged():
    """FlashInfer's own example of BatchDecodeWithPagedKVCacheWrapper (its
    docstring), smaller and on this machine's device, but for the import:
    float16, a [pages, 2, page_size, Hkv, D] cache per layer, the
    deprecated data_type= keyword."""
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    num_layers, num_qo_heads, num_kv_heads, head_dim, max_num_pages, page_size = 2, 8, 2, 64, 32, 16
    workspace_buffer = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=device)
    decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace_buffer, "NHD")
    batch_size = 7
    kv_page_indices = torch.arange(max_num_pages).int().to(device)
    kv_page_indptr = torch.tensor([0, 5, 9, 12, 13, 20, 26, 32], dtype=torch.int32, device=device)
    kv_last_page_len = torch.tensor([1, 7, 14, 4, 3, 1, 16], dtype=torch.int32, device=device)
    kv_cache_at_layer = [torch.randn(max_num_pages, 2, page_size, num_kv_heads, head_dim, dtype=torch.float16,
                                     device=device) for _ in range(num_layers)]
    decode_wrapper.plan(kv_page_indptr, kv_page_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim,
                        page_size, pos_encoding_mode="NONE", data_type=torch.float16)
    outputs = []
    for i in range(num_layers):
        q = torch.randn(batch_size, num_qo_heads, head_dim).half().to(device)
        kv_cache = kv_cache_at_layer[i]
        o = decode_wrapper.run(q, kv_cache)
        outputs.append(o)
    assert outputs[0].shape == torch.Size([7, 8, 64])
    k, v = kv_cache.unbind(1)
    for b in range(batch_size):
        pages = kv_page_indices[kv_page_indptr[b]:kv_page_indptr[b + 1]].long()
        n = (len(pages) - 1) * page_size + int(kv_last_page_len[b])
        keys, values = k[pages].reshape(-1, num_kv_heads, head_dim)[:n], v[pages].reshape(-1, num_kv_heads,
                                                                                         head_dim)[:n]
        want, _ = attention_one(q[b:b + 1], keys, values, scale=head_dim ** -0.5)
        naive, _ = attention_one(q[b:b + 1], keys, values, scale=head_dim ** -0.5, dtype=torch.float16)
        assert_accurate(outputs[-1][b:b + 1], want, naive, f"request {b}")


def test_cuda_graph_buffers_keep_their_addresses_across_plans():
    """use_cuda_graph: each plan() rewrites attune's fixed block table and
    lengths in place (a captured run reads them), and the runs see the new
    pages."""
    i32 = lambda n: torch.zeros(n, dtype=torch.int32)  # noqa: E731
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace(), "HND", use_cuda_graph=True, paged_kv_indptr_buffer=i32(4), paged_kv_indices_buffer=i32(12),
        paged_kv_last_page_len_buffer=i32(3))
    q, out = randn(3, HQ, D, seed=13), torch.empty(3, HQ, D, dtype=torch.bfloat16)
    addresses = None
    for step, lengths in enumerate(([9, 0, 30], [33, 5, 1])):
        pages = Pages(lengths, 8, "HND", seed=20 + step)
        wrapper.plan(*pages.plan_args(), HQ, HKV, D, 8, q_data_type=torch.bfloat16)
        seen = (wrapper._pages.table.data_ptr(), wrapper._pages.lengths.data_ptr())
        assert addresses is None or seen == addresses, "plan() moved the buffers a captured run reads"
        addresses = seen
        wrapper.run(q, (pages.k, pages.v), out=out)
        check(out, None, q, pages, torch.arange(4), f"step {step}", scale=D ** -0.5)


def test_a_wrong_page_index_fails_the_check():
    """The planted bug: the same check, over a table with one page index
    changed, must fail; the right table passes it."""
    pages = Pages([20, 11], 5, "NHD", seed=7)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    wrapper.plan(*pages.plan_args(), HQ, HKV, D, 5, q_data_type=torch.bfloat16)
    q = randn(2, HQ, D, seed=8)
    out = wrapper.run(q, (pages.k, pages.v))
    rows = torch.arange(3)
    check(out, None, q, pages, rows, "right pages", scale=D ** -0.5)
    with pytest.raises(AssertionError, match="request 0"):
        check(out, None, q, pages, rows, "wrong page", wrong_page=True, scale=D ** -0.5)


def test_ragged_prefill_and_merging_two_halves():
    """Ragged prefill (causal); then over each half of the keys, merged with
    merge_state, merge_states and merge_state_in_place: the attention over
    all of them."""
    qo = offsets([3, 0, 5])  # an empty request
    kv = offsets([10, 0, 14])
    q, k, v = randn(8, HQ, D, seed=10), randn(24, HKV, D, seed=11), randn(24, HKV, D, seed=12)
    wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace(), "NHD")
    wrapper.plan(qo, kv, HQ, HKV, D, causal=True, q_data_type=torch.bfloat16)
    out, lse = wrapper.run(q, k, v, return_lse=True)
    _check_ragged(out, lse, q, k, v, qo, kv, "ragged", causal=True)
    halves = []
    for part in (0, 1):
        cut = [(int(kv[b]) + int(kv[b + 1])) // 2 for b in range(3)]
        bounds = [(int(kv[b]), cut[b]) if part == 0 else (cut[b], int(kv[b + 1])) for b in range(3)]
        idx = torch.cat([torch.arange(a, z) for a, z in bounds])
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace())
        w.plan(qo, offsets([z - a for a, z in bounds]), HQ, HKV, D, q_data_type=torch.bfloat16)
        halves.append(w.run(q, k[idx], v[idx], return_lse=True))
    (va, sa), (vb, sb) = halves
    merged = {"merge_state": flashinfer.merge_state(va, sa, vb, sb),
              "merge_states": flashinfer.merge_states(torch.stack((va, vb), 1), torch.stack((sa, sb), 1))}
    flashinfer.merge_state_in_place(va, sa, vb, sb)
    merged["merge_state_in_place"] = (va, sa)
    for name, (v_merged, s_merged) in merged.items():
        _check_ragged(v_merged, s_merged, q, k, v, qo, kv, name)


def _check_ragged(out, lse, q, k, v, qo, kv, what, causal=False):
    for b in range(len(qo) - 1):
        rows, keys = slice(int(qo[b]), int(qo[b + 1])), slice(int(kv[b]), int(kv[b + 1]))
        if rows.start == rows.stop:
            continue
        want, want_lse = attention_one(q[rows], k[keys], v[keys], scale=D ** -0.5, causal=causal)
        naive, _ = attention_one(q[rows], k[keys], v[keys], scale=D ** -0.5, causal=causal, dtype=torch.bfloat16)
        assert_accurate(out[rows], want, naive, f"{what}: request {b}")
        assert max_error(lse[rows], want_lse.t() * LOG2E) < 1e-3, f"{what}: request {b}: LSE"


def test_unsupported_arguments_are_refused_by_name():
    pages = Pages([5], 4)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace())
    with pytest.raises(NotImplementedError, match="pos_encoding_mode"):
        wrapper.plan(*pages.plan_args(), HQ, HKV, D, 4, pos_encoding_mode="ROPE_LLAMA")
    with pytest.raises(NotImplementedError, match="kv_data_type"):  # a 16-bit cache of another dtype
        wrapper.plan(*pages.plan_args(), HQ, HKV, D, 4, q_data_type=torch.bfloat16, kv_data_type="float16")
    wrapper.plan(*pages.plan_args(), HQ, HKV, D, 4, q_data_type=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="k_scale"):
        wrapper.run(randn(1, HQ, D), (pages.k, pages.v), k_scale=0.5)
    prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace())
    with pytest.raises(NotImplementedError, match="custom_mask"):
        prefill.plan(torch.tensor([0, 5], dtype=torch.int32), *pages.plan_args(), HQ, HKV, D, 4,
                     custom_mask=torch.ones(25, dtype=torch.bool))
    with pytest.raises(NotImplementedError, match="jit_args"):
        flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace(), jit_args=[])
    with pytest.raises(attune.InvalidArgument, match="last_page_len"):
        wrapper.plan(pages.indptr, pages.indices, torch.tensor([7], dtype=torch.int32), HQ, HKV, D, 4)


@needs_fake
def test_planned_runs_only_launch():
    """plan() does the host work; each run only launches (one kernel, or
    split-KV decode and its combine) and makes no other driver call (a
    context query per run on the null stream), for the three wrappers and
    with CUDA-graph buffers."""
    r = _count_on_fake("""
        import attune.flashinfer as fi
        count = lambda name: fake.attune_fake_count(name.encode())
        fake.attune_fake_total.restype = ctypes.c_long
        ws = torch.empty(1 << 20, dtype=torch.uint8)
        i32 = lambda *x: torch.tensor(x, dtype=torch.int32)
        pool = torch.zeros(8, 16, 2, 64, dtype=torch.bfloat16)
        indptr, indices, last = i32(0, 2, 3), i32(4, 1, 6), i32(5, 16)
        graph = fi.BatchDecodeWithPagedKVCacheWrapper(ws, use_cuda_graph=True, paged_kv_indptr_buffer=i32(0, 0, 0),
                                                      paged_kv_indices_buffer=torch.zeros(8, dtype=torch.int32),
                                                      paged_kv_last_page_len_buffer=i32(0, 0))
        decode, prefill = fi.BatchDecodeWithPagedKVCacheWrapper(ws), fi.BatchPrefillWithPagedKVCacheWrapper(ws)
        ragged = fi.BatchPrefillWithRaggedKVCacheWrapper(ws)
        q1, out1 = torch.zeros(2, 4, 64, dtype=torch.bfloat16), torch.empty(2, 4, 64, dtype=torch.bfloat16)
        q5, out5 = torch.zeros(5, 4, 64, dtype=torch.bfloat16), torch.empty(5, 4, 64, dtype=torch.bfloat16)
        kv = torch.zeros(20, 2, 64, dtype=torch.bfloat16)
        steps = [
            (decode, lambda: decode.plan(indptr, indices, last, 4, 2, 64, 16, q_data_type=torch.bfloat16),
             lambda: decode.run(q1, (pool, pool), out=out1)),
            (graph, lambda: graph.plan(indptr, indices, last, 4, 2, 64, 16, q_data_type=torch.bfloat16),
             lambda: graph.run(q1, (pool, pool), out=out1)),
            (prefill, lambda: prefill.plan(i32(0, 3, 5), indptr, indices, last, 4, 2, 64, 16, causal=True,
                                           q_data_type=torch.bfloat16),
             lambda: prefill.run(q5, (pool, pool), out=out5)),
            (ragged, lambda: ragged.plan(i32(0, 3, 5), i32(0, 12, 20), 4, 2, 64, causal=True,
                                         q_data_type=torch.bfloat16),
             lambda: ragged.run(q5, kv, kv, out=out5)),
        ]
        for wrapper, plan, run in steps:
            plan(); run()  # the first run learns the pool (attune's plan needs its size and strides)
            plan()  # the next step's plan: from here, host work only in plan()
            total, launches, queries = fake.attune_fake_total(), count("cuLaunchKernel"), count("cuCtxGetCurrent")
            memsets = count("cuMemsetD32Async")
            for _ in range(5):
                run()
            print(fake.attune_fake_total() - total, count("cuLaunchKernel") - launches,
                  count("cuCtxGetCurrent") - queries, count("cuMemsetD32Async") - memsets)
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 4, r.stdout
    for name, line in zip(("decode", "decode (CUDA graph)", "paged prefill", "ragged prefill"), lines):
        calls, launches, queries, memsets = map(int, line.split())
        # The Hopper forward's dynamic and varlen tile schedulers (the ragged
        # prefill's packed sequences take the varlen one, whose numbering
        # kernel launches before the forward) zero their counter with one
        # memset node per run.
        assert memsets in (0, 5), f"{name}: {memsets} memsets in 5 runs ({launches} launches)"
        assert launches in (5, 10) and calls == launches + queries + memsets, (
            f"{name}: 5 runs made {launches} launches and {calls} driver calls ({queries} context queries, "
            f"{memsets} memsets)")
