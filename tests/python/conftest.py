"""Shared pieces of the Python package's tests: an independent fp64
attention in PyTorch (per sequence, every mask kind, GQA, Dk != Dv,
softcap, ALiBi, sinks, dropout with a given keep mask), the naive storage-dtype computation, and FlashAttention's
accuracy rule. Under CI (ATTUNE_REQUIRE_TORCH=1) a missing torch fails the
run instead of skipping it."""
import math
import os

import pytest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    if os.environ.get("ATTUNE_REQUIRE_TORCH") == "1":
        raise
    pytest.skip("torch is not installed (tools/setup.sh installs it)", allow_module_level=True)


def visible(sq, sk, causal=False, top_left=False, window=(-1, -1)):
    """[sq, sk] bool: which keys each query row sees, with flash-attn's
    arguments (causal aligned bottom-right unless top_left; window_size
    (left, right), -1 unbounded, in the same frame; causal with a window is
    the window (left, 0))."""
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    diag = i + (0 if top_left else sk - sq)
    left, right = window
    if causal:
        right = 0
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


def attention_one(q, k, v, *, scale, causal=False, top_left=False, window=(-1, -1), softcap=0.0, slopes=None,
                  sinks=None, keep=None, dropout_p=0.0, dtype=torch.float64):
    """One sequence: q [sq, hq, dk], k [sk, hkv, dk], v [sk, hkv, dv] ->
    (out [sq, hq, dv], lse [hq, sq]); rows without keys give 0 and -inf
    (with sinks [hq]: 0 and the sink, each sink one more softmax term
    without a value). keep [hq, sq, sk] bool: dropout, P kept where true
    and scaled by 1 / (1 - dropout_p) (lse is the one without dropout)."""
    sq, hq, _ = q.shape
    sk, hkv, _ = k.shape
    g = hq // hkv
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.to(dtype), k.to(dtype)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s - slopes.to(dtype)[:, None, None] * (i + sk - sq - j).abs()
    ok = visible(sq, sk, causal, top_left, window)
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    if sinks is not None:
        lse = torch.logaddexp(lse, sinks.to(dtype)[:, None])
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    if keep is not None:
        p = p * keep.to(dtype) / (1.0 - dropout_p)
    out = torch.einsum("hqk,khd->qhd", p.to(dtype), v.to(dtype))
    return out, lse


def reference(q, k, v, *, causal=False, top_left=False, window=(-1, -1), scale=None, softcap=0.0, alibi=None,
              sinks=None, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None, keep=None, dropout_p=0.0,
              dtype=torch.float64):
    """fp64 attention (differentiable) of dense [B, S, H, D] or packed
    [T, H, D] tensors; returns (out, lse) in flash-attn's layouts. keep
    [B, Hq, Sq, Sk] bool (varlen: max lengths, positions local to each
    sequence), e.g. S_dmask >= 0: dropout with that mask and dropout_p."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    kw = dict(scale=scale, causal=causal, top_left=top_left, window=window, softcap=softcap, sinks=sinks,
              dtype=dtype)
    outs, lses = [], []
    if q.dim() == 3:
        batch = len(cu_seqlens_q) - 1
        for b in range(batch):
            qs = q[cu_seqlens_q[b]:cu_seqlens_q[b + 1]]
            if cu_seqlens_k is not None:
                ks, vs = k[cu_seqlens_k[b]:cu_seqlens_k[b + 1]], v[cu_seqlens_k[b]:cu_seqlens_k[b + 1]]
            else:
                n = int(seqlens_k[b])
                ks, vs = k[b, :n], v[b, :n]
            o, l = attention_one(qs, ks, vs, slopes=_slopes(alibi, b), keep=_keep(keep, b, qs, ks),
                                 dropout_p=dropout_p, **kw)
            outs.append(o)
            lses.append(l)
        return torch.cat(outs, 0), torch.cat(lses, 1)
    for b in range(q.shape[0]):
        n = int(seqlens_k[b]) if seqlens_k is not None else k.shape[1]
        o, l = attention_one(q[b], k[b, :n], v[b, :n], slopes=_slopes(alibi, b), keep=_keep(keep, b, q[b], k[b, :n]),
                             dropout_p=dropout_p, **kw)
        outs.append(o)
        lses.append(l)
    return torch.stack(outs), torch.stack(lses)


def _keep(keep, b, q, k):
    return None if keep is None else keep[b, :, :q.shape[0], :k.shape[0]]


def _slopes(alibi, b):
    if alibi is None:
        return None
    return alibi[b] if alibi.dim() == 2 else alibi


def naive(q, k, v, **kw):
    """The same computed in the storage dtype, as autograd would with
    upcasting off (FlashAttention's yardstick): every product and the
    softmax round to it."""
    out, _ = reference(q, k, v, dtype=q.dtype, **kw)
    return out


def max_error(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def rounding_floor(want, dtype):
    """FlashAttention 3's floor: twice the rounding error of the storage
    dtype on values of the reference's size, max |(ref + 0.3 - 0.3) - ref|."""
    if want.numel() == 0 or dtype == torch.float64:
        return 1e-12
    ref = want.to(dtype)
    shifted = ((ref + 0.3).to(dtype) - 0.3).to(dtype)
    return 2 * (shifted.double() - ref.double()).abs().max().item() + 1e-6


def assert_accurate(got, want, naive_out, what="", floor=None):
    """FlashAttention's rule: at most twice the naive computation's error,
    plus the rounding floor."""
    err, base = max_error(got, want), max_error(naive_out, want)
    floor = rounding_floor(want, got.dtype) if floor is None else floor
    assert not torch.isnan(got).any(), f"{what}: NaN in the output"
    assert err <= 2 * base + floor, f"{what}: error {err:.3g} above twice the naive {base:.3g} + {floor:.3g}"


def randn(*shape, dtype=torch.bfloat16, requires_grad=False, seed=None):
    g = torch.Generator().manual_seed(seed if seed is not None else hash(shape) % 10000)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype).requires_grad_(requires_grad)


def rope(x, cos, sin, positions, interleaved):
    """x [B, S, H, D] rotated at positions [B, S] (fp64), in flash-attn's
    rotate-half formulation (a different code path from attune's pairs)."""
    ro = 2 * cos.shape[1]
    c, s = cos.double()[positions.long()], sin.double()[positions.long()]  # [B, S, ro/2]
    if interleaved:
        c, s = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
    else:
        c, s = torch.cat([c, c], -1), torch.cat([s, s], -1)
    x = x.double()
    head = x[..., :ro]
    if interleaved:
        turned = torch.stack((-head[..., 1::2], head[..., ::2]), -1).flatten(-2)
    else:
        turned = torch.cat((-head[..., ro // 2:], head[..., :ro // 2]), -1)
    return torch.cat((head * c[:, :, None] + turned * s[:, :, None], x[..., ro:]), -1)


def tables(seqlen_ro, rotary_dim, dtype=torch.bfloat16):
    angle = torch.rand(seqlen_ro, rotary_dim // 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    angle = angle * 6.2831853
    return angle.cos().to(dtype), angle.sin().to(dtype)
