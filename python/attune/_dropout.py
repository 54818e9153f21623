"""Attention dropout from Python: the {seed, offset} of a call drawn from
PyTorch's generator, and flash-attn 2's S_dmask.

A call with dropout_p > 0 draws rng_state, an int64 [2] tensor {seed,
offset} on q's device, with torch.randint from the default generator of
that device: torch.manual_seed(s) makes calls repeatable, nothing is read
back to the host on CUDA, and under CUDA-graph capture the draw is a
captured random op whose replays draw anew (PyTorch's graph-safe
generator). The kernels read the pair at each run (attune_buffers.rng_state);
autograd saves it for the backward, which regenerates the forward's mask
from it (templates/dropout.h: Philox-4x32-10 of the pair and the element's
position).
"""
import ctypes
import math

from . import _native as native
from ._errors import InvalidArgument

_SEED_BOUND = 1 << 62  # seeds and offsets drawn in [0, 2^62): non-negative in an int64 tensor
_U64 = (1 << 64) - 1


def probability(dropout_p):
    """dropout_p as a float in [0, 1), or InvalidArgument."""
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        raise InvalidArgument(f"dropout_p: got {dropout_p!r}; expected a probability in [0, 1)") from None
    if not (0.0 <= p < 1.0) or math.isnan(p):
        raise InvalidArgument(f"dropout_p: got {dropout_p!r}; expected a probability in [0, 1) (0: no dropout)")
    return p


def rng_state(q):
    """{seed, offset}, int64 [2] on q's device, from torch's generator for
    that device (no host read-back; graph-safe under CUDA-graph capture)."""
    import torch

    return torch.randint(0, _SEED_BOUND, (2,), dtype=torch.int64, device=q.device)


def keep_mask(dropout_p, seed, offset, batch, heads_q, seqlen_q, seqlen_k):
    """NumPy bool [batch, heads_q, seqlen_q, seqlen_k]: the elements the
    kernels and the reference keep under (dropout_p, seed, offset), rows
    and keys as positions within each sequence."""
    import numpy as np

    keep = np.zeros((batch, heads_q, seqlen_q, seqlen_k), dtype=np.uint8)
    native.check(native.lib().attune_dropout_keep_mask(float(dropout_p), seed & _U64, offset & _U64, batch, heads_q,
                                                       seqlen_q, seqlen_k,
                                                       keep.ctypes.data_as(ctypes.c_void_p)))
    return keep.astype(bool)


def _visible(sq, sk, mask, window, device):
    """[sq, sk] bool: the keys each row sees under attune's mask (the
    contract's band of global positions)."""
    import torch

    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    if mask == native.MASK_NONE:
        return torch.ones(sq, sk, dtype=torch.bool, device=device)
    if mask == native.MASK_CAUSAL_TOP_LEFT:
        return j <= i
    diag = i + (sk - sq)
    if mask == native.MASK_CAUSAL_BOTTOM_RIGHT:
        return j <= diag
    left, right = window
    ok = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        ok &= j >= diag - left
    if right >= 0:
        ok &= j <= diag + right
    return ok


def _probabilities(q, k, lse, scale, mask, window, softcap, slopes, work):
    """One sequence's P [hq, sq, sk] = exp(score - LSE), 0 where masked:
    q [sq, hq, dk], k [sk, hkv, dk], lse [hq, sq] (attune's: -inf for a row
    without keys)."""
    import torch

    sq, hq, _ = q.shape
    sk, hkv, _ = k.shape
    k = k.to(work).repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.to(work), k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if slopes is not None:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s - slopes.to(work)[:, None, None] * (i + sk - sq - j).abs()
    ok = _visible(sq, sk, mask, window, q.device)
    return torch.where(ok, torch.exp(s - lse.to(work)[..., None]), torch.zeros((), dtype=work, device=q.device))


def s_dmask(q, k, lse, state, dropout_p, *, scale, mask, window, softcap=0.0, alibi_slopes=None, cu_seqlens_q=None,
            cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0):
    """flash-attn 2's S_dmask of a call with dropout: [B, Hq, Sq, Sk]
    (varlen: [B, Hq, max_seqlen_q, max_seqlen_k], rows and keys local to
    each sequence, zero past its lengths) holding the probabilities P
    without the dropout's scale, computed from q, k and the call's LSE in
    float32 (float64 for float64 inputs), negated where the element was
    dropped: kept iff S_dmask >= 0. For checking a call, not for training:
    it reads the state and the lengths back to the host."""
    import torch

    seed, offset = (int(x) for x in state.tolist())
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    hq = q.shape[-2]
    with torch.no_grad():
        q, k, lse = q.detach(), k.detach(), lse.detach()
        if q.dim() == 3:
            cq = [int(x) for x in cu_seqlens_q.tolist()]
            ck = [int(x) for x in cu_seqlens_k.tolist()]
            batch = len(cq) - 1
            rows = [(cq[b], cq[b + 1]) for b in range(batch)]
            keys = [(ck[b], ck[b + 1]) for b in range(batch)]
            sq_max = max([int(max_seqlen_q)] + [e - s for s, e in rows])
            sk_max = max([int(max_seqlen_k)] + [e - s for s, e in keys])
            parts = [(q[r0:r1], k[k0:k1], lse[:, r0:r1]) for (r0, r1), (k0, k1) in zip(rows, keys)]
        else:
            batch, sq_max, sk_max = q.shape[0], q.shape[1], k.shape[1]
            parts = [(q[b], k[b], lse[b]) for b in range(batch)]
        probs = torch.zeros((batch, hq, sq_max, sk_max), dtype=work, device=q.device)
        for b, (qb, kb, lb) in enumerate(parts):
            slopes = None
            if alibi_slopes is not None:
                slopes = alibi_slopes[b] if alibi_slopes.dim() == 2 else alibi_slopes
            probs[b, :, :qb.shape[0], :kb.shape[0]] = _probabilities(qb, kb, lb, scale, mask, window, softcap,
                                                                     slopes, work)
        keep = torch.from_numpy(keep_mask(dropout_p, seed, offset, batch, hq, sq_max, sk_max)).to(q.device)
        return torch.where(keep, probs, -probs)
