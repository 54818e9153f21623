"""fp8 inputs from PyTorch: torch's float8 dtypes and the descale factors
that come with them, as the C problem takes them (docs/contract.md, "FP8
inputs"): an fp8 tensor's value is its stored value times its descale, a
float32 at [b, kv_head] with (batch, head) element strides.

FlashAttention-3 passes q_descale, k_descale and v_descale of shape
(batch, kv_heads); vLLM and FlashInfer pass one factor per tensor (k_scale,
v_scale). Any layout that broadcasts to (batch, kv_heads) is taken here
without a copy: its strides (0 along an axis it does not vary with) go to
the problem. Descales of 16-bit tensors are ignored, as FlashAttention-3
ignores them (vLLM passes them whatever the dtype).
"""
import torch

from ._errors import InvalidArgument

DTYPES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
NAMES = ("q_descale", "k_descale", "v_descale")


def is_fp8(x):
    return isinstance(x, torch.Tensor) and x.dtype in DTYPES


def any_fp8(*tensors):
    return any(is_fp8(x) for x in tensors)


def refuse_training(q, k, v, dropout_p=0.0):
    """fp8 inputs are forward only: no gradient (attune's backward reads
    16-bit inputs) and no dropout (an inference format)."""
    if q.dtype not in DTYPES and k.dtype not in DTYPES and v.dtype not in DTYPES:  # every call: the cheap test first
        return
    fp8 = [(name, x) for name, x in (("q", q), ("k", k), ("v", v)) if is_fp8(x)]
    name, x = fp8[0]
    if dropout_p:
        raise InvalidArgument(f"dropout_p: got {dropout_p} with {name} in {x.dtype}; expected 0.0 (fp8 inputs are "
                              "for inference: no dropout)")
    if torch.is_grad_enabled():
        for name, x in fp8:
            if x.requires_grad:
                raise InvalidArgument(f"{name}: got a {x.dtype} tensor with requires_grad=True; expected "
                                      "requires_grad=False (fp8 inputs are forward only: attune's backward takes "
                                      "float16 or bfloat16 q, k and v)")


def as_tensor(value, name, like):
    """A descale given as a Python number: a 1-element float32 tensor on
    like's device (the kernels read descales from the device's memory)."""
    if value is None or isinstance(value, torch.Tensor):
        return value
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name}: got {type(value).__name__}; expected a float32 tensor of shape (batch, "
                              "kv_heads), (kv_heads,) or one element, or a Python float") from None
    return torch.full((1,), value, dtype=torch.float32, device=like.device)


def _broadcast(t, name, batch, heads, like):
    """t as a float32 (batch, heads) view on like's device, and its strides
    (0 along an axis of size 1: the factor does not vary with it)."""
    if t.device != like.device:
        raise InvalidArgument(f"{name}: got a tensor on {t.device}; expected it on q's device {like.device}")
    if not t.is_floating_point() or t.dtype in DTYPES:
        raise InvalidArgument(f"{name}: got {t.dtype}; expected float32")
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    if t.numel() == 1:
        t = t.reshape(())
    try:
        if t.dim() > 2:
            raise RuntimeError
        wide = t.expand(batch, heads)
    except RuntimeError:
        raise InvalidArgument(f"{name}: got shape {list(t.shape)}; expected (batch, kv_heads) = ({batch}, {heads}) "
                              f"as FlashAttention-3's, ({heads},) per kv head, or one element per tensor") from None
    return wide, tuple(s if n > 1 else 0 for s, n in zip(wide.stride(), wide.shape))


def descales(q, k, v, batch, q_descale, k_descale, v_descale):
    """((q, k, v descales), (batch, head) strides) for a call's fp8 inputs:
    each None (a factor of 1) or a float32 tensor on q's device, all three
    laid out alike (the problem has one layout): when their layouts differ,
    the narrower ones are expanded into contiguous copies of the widest.
    batch: the call's sequences; the kv heads are k's."""
    given = [t if is_fp8(x) else None for t, x in zip((q_descale, k_descale, v_descale), (q, k, v))]
    if all(t is None for t in given) or batch == 0:
        return (None, None, None), (0, 0)
    heads = k.shape[-2]
    wide = [None if t is None else _broadcast(t, name, batch, heads, q) for t, name in zip(given, NAMES)]
    layouts = {w[1] for w in wide if w is not None}
    if len(layouts) == 1:
        return tuple(None if w is None else w[0] for w in wide), layouts.pop()
    per_batch, per_head = any(s[0] for s in layouts), any(s[1] for s in layouts)
    rows, cols = (slice(None) if per_batch else slice(0, 1)), (slice(None) if per_head else slice(0, 1))
    # Contiguous copies of the union layout: all three then share strides.
    out = [None if w is None else _broadcast(w[0][rows, cols].contiguous(), name, batch, heads, q)
           for w, name in zip(wide, NAMES)]
    return tuple(None if w is None else w[0] for w in out), next(w[1] for w in out if w is not None)
