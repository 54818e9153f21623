"""Attention dropout from Python (issue 36): flash-attn 2's dropout_p and
S_dmask (the probabilities, negative where dropped), seeds drawn from
torch's generator so torch.manual_seed repeats a call, and the backward
regenerating the forward's mask. The emulator's bfloat16 outputs and
gradients against the fp64 attention with the kept positions S_dmask >= 0,
under the accuracy rule; gradcheck on the fp64 reference with a fixed seed;
sdpa, varlen and the packed functions."""
import math

import pytest
import torch

import attune
from conftest import assert_accurate, randn, reference

P = 0.17


def _bf16(*shape, seed):
    return randn(*shape, dtype=torch.bfloat16, requires_grad=True, seed=seed)


def _grads(out, inputs, seed):
    dout = randn(*out.shape, dtype=torch.float32, seed=seed).to(out.dtype)
    return torch.autograd.grad(out, inputs, dout), dout


def _kept_fraction_is_binomial(s_dmask, visible, p):
    """The kept share of the visible elements within 5 binomial standard
    deviations of 1 - p."""
    n = int(visible.sum())
    kept = int(((s_dmask >= 0) & visible).sum())
    sd = math.sqrt(n * p * (1 - p))
    assert abs(kept - n * (1 - p)) <= 5 * sd + 1, f"kept {kept} of {n} at p = {p}"


def test_flash_attn_func_with_dropout_meets_the_accuracy_rule_and_repeats_under_a_seed():
    # The acceptance case: CPU bfloat16 (the emulator), causal, p = 0.17.
    q, k, v = _bf16(2, 33, 4, 64, seed=1), _bf16(2, 45, 2, 64, seed=2), _bf16(2, 45, 2, 48, seed=3)
    torch.manual_seed(11)
    out, lse, s_dmask = attune.flash_attn_func(q, k, v, dropout_p=P, causal=True, return_attn_probs=True)
    assert s_dmask.shape == (2, 4, 33, 45)
    keep = s_dmask >= 0
    want, want_lse = reference(q, k, v, causal=True, keep=keep, dropout_p=P)
    naive_out, _ = reference(q, k, v, causal=True, keep=keep, dropout_p=P, dtype=torch.bfloat16)
    assert_accurate(out, want, naive_out, "out")
    assert (lse.double() - want_lse).abs().max() < 1e-3, "the LSE is the one without dropout"
    # |S_dmask| is P without the dropout's scale; the mask drops about p of the visible elements.
    probs = torch.stack([torch.softmax(_scores(q[b], k[b], causal=True), -1) for b in range(2)])
    assert (s_dmask.abs().double() - probs).abs().max() < 1e-2
    visible = probs > 0
    _kept_fraction_is_binomial(s_dmask, visible, P)

    got, dout = _grads(out, (q, k, v), seed=4)
    ref_grads = torch.autograd.grad(want, (q, k, v), dout.double())
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    for name, g, w, n in zip(("dq", "dk", "dv"), got, ref_grads, naive_grads):
        assert_accurate(g, w, n, name)

    torch.manual_seed(11)
    again = attune.flash_attn_func(q, k, v, dropout_p=P, causal=True, return_attn_probs=True)
    for name, a, b in zip(("out", "softmax_lse", "S_dmask"), (out, lse, s_dmask), again):
        assert torch.equal(a, b), f"{name} differs under the same torch.manual_seed"
    torch.manual_seed(12)
    _, _, other = attune.flash_attn_func(q, k, v, dropout_p=P, causal=True, return_attn_probs=True)
    assert not torch.equal(other >= 0, keep), "another seed draws another mask"


def _scores(q, k, causal):
    """fp64 scores [hq, sq, sk] of one sequence, -inf where masked (bottom-right)."""
    sq, hq, d = q.shape
    sk, hkv, _ = k.shape
    k = k.double().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(d)
    if causal:
        i, j = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + sk - sq, float("-inf"))
    return s.detach()


def test_the_backward_regenerates_the_forwards_mask_after_other_draws():
    # The mask travels with autograd (the saved {seed, offset}), not with the
    # generator: draws between the forward and the backward change nothing.
    q, k, v = _bf16(1, 24, 2, 64, seed=5), _bf16(1, 24, 2, 64, seed=6), _bf16(1, 24, 2, 64, seed=7)
    torch.manual_seed(3)
    out, _, s_dmask = attune.flash_attn_func(q, k, v, dropout_p=0.5, return_attn_probs=True)
    torch.rand(100)
    attune.flash_attn_func(q.detach(), k.detach(), v.detach(), dropout_p=0.5)  # another call's draw
    got, dout = _grads(out, (q, k, v), seed=8)
    want, _ = reference(q, k, v, keep=s_dmask >= 0, dropout_p=0.5)
    naive_out, _ = reference(q, k, v, keep=s_dmask >= 0, dropout_p=0.5, dtype=torch.bfloat16)
    for name, g, w, n in zip(("dq", "dk", "dv"), got, torch.autograd.grad(want, (q, k, v), dout.double()),
                             torch.autograd.grad(naive_out, (q, k, v), dout)):
        assert_accurate(g, w, n, name)


def test_varlen_dropout_masks_positions_local_to_each_sequence():
    cu_q = torch.tensor([0, 9, 30], dtype=torch.int32)
    cu_k = torch.tensor([0, 20, 24], dtype=torch.int32)
    q, k, v = _bf16(30, 4, 64, seed=9), _bf16(24, 2, 64, seed=10), _bf16(24, 2, 64, seed=11)
    torch.manual_seed(5)
    out, lse, s_dmask = attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 21, 20, dropout_p=0.3, causal=True,
                                                      return_attn_probs=True)
    assert s_dmask.shape == (2, 4, 21, 20)
    assert (s_dmask[0, :, 9:] == 0).all() and (s_dmask[1, :, :, 4:] == 0).all(), "zero past each sequence"
    kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, causal=True, keep=s_dmask >= 0, dropout_p=0.3)
    want, _ = reference(q, k, v, **kw)
    naive_out, _ = reference(q, k, v, dtype=torch.bfloat16, **kw)
    assert_accurate(out, want, naive_out, "out")
    got, dout = _grads(out, (q, k, v), seed=12)
    for name, g, w, n in zip(("dq", "dk", "dv"), got, torch.autograd.grad(want, (q, k, v), dout.double()),
                             torch.autograd.grad(naive_out, (q, k, v), dout)):
        assert_accurate(g, w, n, name)


def _f64(*shape, seed):
    return randn(*shape, dtype=torch.float64, requires_grad=True, seed=seed)


def test_gradcheck_with_dropout_and_a_fixed_seed():
    # float64 runs the fp64 reference: forward and backward read the same
    # {seed, offset}, so gradcheck's repeated calls see one mask.
    q, k, v = _f64(1, 6, 2, 8, seed=13), _f64(1, 7, 1, 8, seed=14), _f64(1, 7, 1, 8, seed=15)

    def fn(q, k, v):
        torch.manual_seed(21)
        return attune.flash_attn_func(q, k, v, dropout_p=0.4, causal=True)

    assert torch.autograd.gradcheck(fn, (q, k, v))
    torch.manual_seed(21)
    out, _, s_dmask = attune.flash_attn_func(q, k, v, dropout_p=0.4, causal=True, return_attn_probs=True)
    assert s_dmask.dtype == torch.float64
    want, _ = reference(q, k, v, causal=True, keep=s_dmask >= 0, dropout_p=0.4)
    assert (out - want).abs().max() < 1e-12, "the reference drops what S_dmask says"
    assert (s_dmask < 0).any() and (s_dmask > 0).any()


def test_gradcheck_varlen_and_packed_functions_with_dropout():
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    qkv = _f64(8, 3, 2, 8, seed=16)

    def fn(qkv):
        torch.manual_seed(22)
        return attune.flash_attn_varlen_qkvpacked_func(qkv, cu, 5, dropout_p=0.3, causal=True)

    assert torch.autograd.gradcheck(fn, (qkv,))


def test_sdpa_with_dropout():
    query, key, value = (randn(1, 2, 20, 32, dtype=torch.bfloat16, seed=s) for s in (17, 18, 19))  # [B, H, S, D]
    torch.manual_seed(9)
    out = attune.sdpa(query, key, value, dropout_p=0.25, is_causal=True)
    # The same draw through flash_attn_func gives the mask (Sq = Sk: both causal alignments agree).
    torch.manual_seed(9)
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    _, _, s_dmask = attune.flash_attn_func(q, k, v, dropout_p=0.25, causal=True, return_attn_probs=True)
    want, _ = reference(q, k, v, causal=True, keep=s_dmask >= 0, dropout_p=0.25)
    naive_out, _ = reference(q, k, v, causal=True, keep=s_dmask >= 0, dropout_p=0.25, dtype=torch.bfloat16)
    assert_accurate(out.transpose(1, 2), want, naive_out, "sdpa")
    torch.manual_seed(9)
    assert torch.equal(attune.sdpa(query, key, value, dropout_p=0.25, is_causal=True), out)


def test_no_dropout_draws_nothing_and_returns_an_empty_s_dmask():
    q = randn(1, 8, 2, 32, seed=20)
    torch.manual_seed(1)
    _, _, probs = attune.flash_attn_func(q, q, q, dropout_p=0.0, return_attn_probs=True)
    assert probs.shape == (0,)
    after = torch.rand(4)
    torch.manual_seed(1)
    assert torch.equal(after, torch.rand(4)), "a call without dropout leaves torch's generator alone"


def test_keep_mask_is_one_function_of_seed_offset_and_position():
    from attune import _dropout
    a = _dropout.keep_mask(0.5, 7, 0, 2, 3, 40, 40)
    assert a.shape == (2, 3, 40, 40)
    assert (a == _dropout.keep_mask(0.5, 7, 0, 2, 3, 40, 40)).all()
    assert (a[:, :, :17, :23] == _dropout.keep_mask(0.5, 7, 0, 2, 3, 17, 23)).all(), "positions, not extents"
    assert (a != _dropout.keep_mask(0.5, 7, 1, 2, 3, 40, 40)).any(), "another offset, another mask"
    assert (a != _dropout.keep_mask(0.5, 8, 0, 2, 3, 40, 40)).any(), "another seed, another mask"
    for p in (0.1, 0.5, 0.9):
        kept = _dropout.keep_mask(p, 123, 4, 1, 4, 128, 128)
        n = kept.size
        assert abs(int(kept.sum()) - n * (1 - p)) <= 5 * math.sqrt(n * p * (1 - p)), f"p = {p}"
    assert _dropout.keep_mask(0.0, 1, 2, 1, 1, 8, 8).all()


def test_bad_dropout_p_says_what_was_wrong():
    q = randn(1, 8, 2, 32, seed=21)
    for p in (1.0, -0.1, float("nan"), "a lot"):
        with pytest.raises(attune.InvalidArgument, match=r"dropout_p: got .*; expected a probability in \[0, 1\)"):
            attune.flash_attn_func(q, q, q, dropout_p=p)
    with pytest.raises(attune.InvalidArgument, match="dropout_p: got 1.5"):
        attune.sdpa(q, q, q, dropout_p=1.5)
    from attune import _dropout
    with pytest.raises(attune.InvalidArgument, match="dropout_p: got 2"):
        _dropout.keep_mask(2.0, 0, 0, 1, 1, 1, 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_replays_draw_new_masks_and_backward_follows():
    q, k, v = (torch.randn(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    static_out = torch.empty(1, 128, 2, 64, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attune.flash_attn_func(q, k, v, dropout_p=0.5)  # warm-up: plans made outside the capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out.copy_(attune.flash_attn_func(q, k, v, dropout_p=0.5))
    graph.replay()
    first = static_out.clone()
    graph.replay()
    assert not torch.equal(first, static_out), "each replay draws a new {seed, offset}"
