"""The registered ops as PyTorch's tooling sees them: torch.library.opcheck
(schema, autograd registration, fake tensors, AOT dispatch with dynamic
shapes) on attune::fwd and attune::bwd, torch.compile(fullgraph=True) with
aot_eager and inductor on CPU, forward and backward, with dynamic=True too,
and torch.export."""
import pytest
import torch

import attune
from conftest import max_error, randn


def _fwd_args(q, k, v, **over):
    args = dict(cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None, block_table=None, max_seqlen_q=0,
                max_seqlen_k=0, scale=0.25, mask=1, window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                num_splits=0, deterministic=False)
    args.update(over)
    return (q, k, v, *args.values())


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_opcheck_dense_and_varlen(dtype):
    q = randn(1, 9, 2, 16, dtype=dtype, requires_grad=True, seed=1)
    k = randn(1, 11, 1, 16, dtype=dtype, requires_grad=True, seed=2)
    v = randn(1, 11, 1, 16, dtype=dtype, requires_grad=True, seed=3)
    for args in (_fwd_args(q, k, v),
                 _fwd_args(q[0], k[0], v[0], cu_seqlens_q=torch.tensor([0, 4, 9], dtype=torch.int32),
                           cu_seqlens_k=torch.tensor([0, 5, 11], dtype=torch.int32), max_seqlen_q=5,
                           max_seqlen_k=6)):
        torch.library.opcheck(torch.ops.attune.fwd.default, args)
        out, lse = torch.ops.attune.fwd(*args)
        # The backward op's own inputs do not require grad (no double backward).
        bargs = (torch.ones_like(out), *(x.detach() for x in args[:3]), out.detach(), lse.detach(), *args[3:6],
                 *args[7:15], args[16])
        torch.library.opcheck(torch.ops.attune.bwd.default, bargs)


def _flash(q, k, v):
    return attune.flash_attn_func(q, k, v, causal=True)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_forward_and_backward(backend):
    q, k, v = (randn(1, 12, 2, 16, dtype=torch.float64, requires_grad=True, seed=s) for s in (4, 5, 6))
    compiled = torch.compile(_flash, fullgraph=True, backend=backend)
    out = compiled(q, k, v)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    eager = _flash(q, k, v)
    eager_grads = torch.autograd.grad(eager.sum(), (q, k, v))
    assert max_error(out, eager) == 0
    for g, e in zip(grads, eager_grads):
        assert max_error(g, e) == 0


def test_compile_dynamic_shapes_on_the_emulator():
    compiled = torch.compile(_flash, fullgraph=True, dynamic=True, backend="aot_eager")
    for sq in (9, 17):
        q = randn(1, sq, 2, 32, requires_grad=True, seed=sq)
        k, v = randn(1, 20, 2, 32, seed=7), randn(1, 20, 2, 32, seed=8)
        out = compiled(q, k, v)
        assert out.shape == (1, sq, 2, 32)
        assert torch.equal(out, _flash(q, k, v))
        out.float().sum().backward()
        assert q.grad.shape == q.shape


def test_compile_varlen_and_kvcache_without_graph_breaks():
    cu = torch.tensor([0, 5, 12], dtype=torch.int32)

    def fn(q, k, v, kc, vc, lens):
        a = attune.flash_attn_varlen_func(q, k, v, cu, cu, 7, 7, causal=True)
        b = attune.flash_attn_with_kvcache(q[:2].unsqueeze(0), kc, vc, cache_seqlens=lens, causal=True)
        return a.sum() + b.sum()

    q, k, v = (randn(12, 2, 16, dtype=torch.float64, seed=s) for s in (9, 10, 11))
    kc, vc = randn(1, 9, 2, 16, dtype=torch.float64, seed=12), randn(1, 9, 2, 16, dtype=torch.float64, seed=13)
    lens = torch.tensor([6], dtype=torch.int32)
    assert torch.compile(fn, fullgraph=True, backend="aot_eager")(q, k, v, kc, vc, lens) == fn(q, k, v, kc, vc, lens)


def test_export():
    class Attention(torch.nn.Module):
        def forward(self, q, k, v):
            return attune.flash_attn_func(q, k, v, causal=True)

    q, k, v = (randn(1, 8, 2, 16, seed=s) for s in (14, 15, 16))
    exported = torch.export.export(Attention(), (q, k, v))
    assert "attune.fwd" in str(exported.graph)
    assert torch.equal(exported.module()(q, k, v), _flash(q, k, v))
