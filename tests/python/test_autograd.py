"""Gradients: torch.autograd.gradcheck in float64 (the fp64 reference
forward and backward) over dense, varlen, GQA, Dk != Dv, both causal
alignments with empty rows, windows, padding and sinks; and the emulator's
bfloat16/float16 gradients (the backward kernel) against the fp64
reference's, with the accuracy rule. flash-attn's packed functions and
rows without keys (whose returned LSE is flash-attn's +inf) too."""
import math

import pytest
import torch

import attune
from conftest import assert_accurate, randn, reference


def f64(*shape, seed):
    return randn(*shape, dtype=torch.float64, requires_grad=True, seed=seed)


@pytest.mark.parametrize("case", [
    dict(sq=5, sk=7, hq=2, hkv=2, d=8, dv=8, causal=False),
    dict(sq=6, sk=4, hq=2, hkv=1, d=8, dv=6, causal=True),  # GQA, Dk != Dv, Sq > Sk: empty rows
    dict(sq=5, sk=9, hq=2, hkv=2, d=8, dv=8, causal=False, window=(2, 1)),
    dict(sq=5, sk=5, hq=2, hkv=1, d=8, dv=8, causal=True, window=(1, -1)),
])
def test_gradcheck_dense(case):
    q, k, v = f64(1, case["sq"], case["hq"], case["d"], seed=1), f64(1, case["sk"], case["hkv"], case["d"], seed=2), \
        f64(1, case["sk"], case["hkv"], case["dv"], seed=3)
    fn = lambda q, k, v: attune.flash_attn_func(q, k, v, causal=case["causal"],  # noqa: E731
                                                window_size=case.get("window", (-1, -1)))
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_top_left_causal_with_empty_rows():
    q, k, v = f64(1, 2, 6, 8, seed=4), f64(1, 2, 4, 8, seed=5), f64(1, 2, 4, 8, seed=6)  # [B, H, S, D]
    assert torch.autograd.gradcheck(lambda q, k, v: attune.sdpa(q, k, v, is_causal=True), (q, k, v))


def test_gradcheck_varlen_with_padding_and_empty_sequences():
    cu_q = torch.tensor([0, 3, 3, 7], dtype=torch.int32)  # the middle sequence has no queries
    cu_k = torch.tensor([0, 4, 6, 6], dtype=torch.int32)  # the last has no keys (all padding)
    q, k, v = f64(7, 2, 8, seed=7), f64(6, 1, 8, seed=8), f64(6, 1, 8, seed=9)
    fn = lambda q, k, v: attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 4, 4, causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_softcap_and_alibi():
    q, k, v = f64(1, 4, 2, 8, seed=10), f64(1, 5, 2, 8, seed=11), f64(1, 5, 2, 8, seed=12)
    slopes = torch.tensor([0.3, 0.1])
    fn = lambda q, k, v: attune.flash_attn_func(q, k, v, softcap=2.0, alibi_slopes=slopes)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_gradcheck_with_sinks_and_their_gradient():
    # sinks are float32 (the kernels' type): gradcheck over q, k, v; dsink
    # against the fp64 formula's autograd.
    q, k, v = f64(1, 6, 2, 8, seed=33), f64(1, 4, 1, 8, seed=34), f64(1, 4, 1, 8, seed=35)
    sinks = torch.tensor([0.7, -1.2], requires_grad=True)
    fn = lambda q, k, v: attune.flash_attn_func(q, k, v, causal=True, sinks=sinks.detach())  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v))
    out = attune.flash_attn_func(q, k, v, causal=True, sinks=sinks)
    dsink, = torch.autograd.grad(out.sum(), (sinks,))
    s64 = sinks.detach().double().requires_grad_()
    want, = torch.autograd.grad(reference(q, k, v, causal=True, sinks=s64)[0].sum(), (s64,))
    assert (dsink.double() - want).abs().max() < 1e-6


def test_gradcheck_packed_functions():
    # The gradient of a packed input comes back packed: unbind's gradient stacks the parts'.
    qkv = f64(1, 5, 3, 2, 8, seed=30)
    assert torch.autograd.gradcheck(lambda qkv: attune.flash_attn_qkvpacked_func(qkv, causal=True), (qkv,))
    cu_q = torch.tensor([0, 3, 3, 7], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 6, 6], dtype=torch.int32)  # the last sequence has no keys
    q, kv = f64(7, 2, 8, seed=31), f64(6, 2, 1, 8, seed=32)  # GQA
    fn = lambda q, kv: attune.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, 4, 4, causal=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, kv))


def _grads(out, *inputs, seed):
    dout = randn(*out.shape, dtype=torch.float32, seed=seed).to(out.dtype)
    return torch.autograd.grad(out, inputs, dout), dout


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", [
    dict(causal=True, varlen=False),
    dict(causal=False, varlen=True),
])
def test_kernel_gradients_meet_the_accuracy_rule(dtype, case):
    if case["varlen"]:
        cu = torch.tensor([0, 17, 40], dtype=torch.int32)
        q, k, v = (randn(40, h, 64, dtype=dtype, requires_grad=True, seed=s) for h, s in ((4, 13), (2, 14), (2, 15)))
        kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu)
        out = attune.flash_attn_varlen_func(q, k, v, cu, cu, 23, 23, causal=case["causal"])
    else:
        q = randn(2, 33, 4, 64, dtype=dtype, requires_grad=True, seed=13)
        k = randn(2, 45, 2, 64, dtype=dtype, requires_grad=True, seed=14)
        v = randn(2, 45, 2, 48, dtype=dtype, requires_grad=True, seed=15)
        kw = {}
        out = attune.flash_attn_func(q, k, v, causal=case["causal"])
    got, dout = _grads(out, q, k, v, seed=16)
    ref_out, _ = reference(q, k, v, causal=case["causal"], **kw)
    want = torch.autograd.grad(ref_out, (q, k, v), dout.double())
    naive_out, _ = reference(q, k, v, causal=case["causal"], dtype=dtype, **kw)  # autograd in the storage dtype
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    for name, g, w, n in zip(("dq", "dk", "dv"), got, want, naive_grads):
        assert_accurate(g, w, n, name)


@pytest.mark.parametrize("varlen", [False, True])
def test_kernel_gradients_with_sinks(varlen):
    sinks = torch.tensor([0.5, -1.0, 2.0, 0.0], requires_grad=True)
    if varlen:
        cu_q, cu_k = torch.tensor([0, 9, 30], dtype=torch.int32), torch.tensor([0, 20, 24], dtype=torch.int32)
        q = randn(30, 4, 64, requires_grad=True, seed=36)
        k, v = (randn(24, 2, 64, requires_grad=True, seed=s) for s in (37, 38))
        kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
        out = attune.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 21, 20, causal=True, sinks=sinks)
    else:
        q = randn(2, 24, 4, 64, requires_grad=True, seed=36)
        k, v = (randn(2, 17, 2, 64, requires_grad=True, seed=s) for s in (37, 38))
        kw = {}
        out = attune.flash_attn_func(q, k, v, causal=True, sinks=sinks)
    got, dout = _grads(out, q, k, v, sinks, seed=39)
    s64 = sinks.detach().double().requires_grad_()
    ref_out, _ = reference(q, k, v, causal=True, sinks=s64, **kw)
    want = torch.autograd.grad(ref_out, (q, k, v, s64), dout.double())
    s16 = sinks.detach().bfloat16().requires_grad_()
    naive_out, _ = reference(q, k, v, causal=True, sinks=s16, dtype=torch.bfloat16, **kw)
    naive_grads = torch.autograd.grad(naive_out, (q, k, v, s16), dout)
    for name, g, w, n in zip(("dq", "dk", "dv", "dsink"), got, want, naive_grads):
        assert_accurate(g, w, n, name)


def test_deterministic_backward_is_bitwise_repeatable():
    q, k, v = (randn(1, 40, 2, 64, requires_grad=True, seed=s) for s in (17, 18, 19))
    grads = []
    for _ in range(2):
        out = attune.flash_attn_func(q, k, v, causal=True, deterministic=True)
        grads.append(torch.autograd.grad(out.float().sum(), (q, k, v)))
    for a, b in zip(*grads):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kernel_backward_through_rows_without_keys(dtype):
    # Sq > Sk, causal bottom-right: the first 16 rows see no key. The caller
    # gets flash-attn's LSE (+inf) there; the backward reads the -inf it saved.
    q = randn(1, 40, 2, 64, dtype=dtype, requires_grad=True, seed=20)
    k = randn(1, 24, 2, 64, dtype=dtype, requires_grad=True, seed=21)
    v = randn(1, 24, 2, 64, dtype=dtype, requires_grad=True, seed=22)
    out, lse, _ = attune.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert (lse[:, :, :16] == math.inf).all() and torch.isfinite(lse[:, :, 16:]).all()
    got, dout = _grads(out, q, k, v, seed=23)
    ref_out, _ = reference(q, k, v, causal=True)
    want = torch.autograd.grad(ref_out, (q, k, v), dout.double())
    naive_out, _ = reference(q, k, v, causal=True, dtype=dtype)
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    for name, g, w, n in zip(("dq", "dk", "dv"), got, want, naive_grads):
        assert_accurate(g, w, n, name)
    assert (got[0][:, :16] == 0).all(), "rows without keys have no gradient"
