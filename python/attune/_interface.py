"""The functions users call: flash-attn's names, arguments and return
values (its packed variants too), SDPA's, and the plan/run pair of a
serving step.

    from attune import flash_attn_func          # was: from flash_attn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)  # [B, S, H, D]

Torch tensors go through the registered ops (autograd, torch.compile,
torch.export); NumPy arrays run the same calls without torch (no autograd).
An argument attune does not support raises NotImplementedError naming it.

fp8 (torch.float8_e4m3fn, torch.float8_e5m2) as FlashAttention-3 takes it:
q, k and v in one fp8 format with q_descale, k_descale and v_descale
(float32 (batch, kv_heads), (kv_heads,), one element, or a Python float),
the output in bfloat16; and, attune's addition, an fp8 KV cache under
float16/bfloat16 queries (flash_attn_with_kvcache, k_scale/v_scale as vLLM
names them). Forward only: no dropout, no gradient.
"""
import math

from . import _calls as calls
from . import _dropout as dropout
from . import _engine as engine
from . import _native as native
from ._errors import InvalidArgument


def _is_numpy(x):
    return type(x).__module__ == "numpy"


def _unsupported(name, why=""):
    raise NotImplementedError(f"attune: {name} is not supported{': ' + why if why else ''}")


def _scale(softmax_scale, head_dim):
    return float(softmax_scale) if softmax_scale is not None else 1.0 / math.sqrt(head_dim)


def _window(window_size):
    """window_size as two Python ints: a tensor, or a tuple of 0-d tensors,
    hashes by identity and would add a mask-cache entry per call."""
    if len(window_size) != 2:
        raise InvalidArgument(f"window_size: got {window_size!r}; expected (left, right)")
    return int(window_size[0]), int(window_size[1])


def contiguous_rows(q, k, v, copy_kv=True):
    """(q, k, v, copies): each input whose last dimension is strided copied
    contiguous, as flash-attn's maybe_contiguous copies it, since the kernels
    read a head's row with stride 1; copies names each copy and why
    (attune.explain reports them). copy_kv False leaves k and v to be
    refused: flash-attn refuses a KV cache with a strided last dimension
    rather than copy the whole cache on every decode step."""
    inputs, copies = [q, k, v], []
    for i, name in enumerate(("q", "k", "v") if copy_kv else ("q",)):
        x = inputs[i]
        numpy = _is_numpy(x)
        stride = x.strides[-1] // x.itemsize if numpy else x.stride(-1)
        if stride == 1:
            continue
        if numpy:
            import numpy as np
            inputs[i] = np.ascontiguousarray(x)
        else:
            inputs[i] = x.contiguous()
        copies.append(f"{name}: last dimension stride {stride}, copied contiguous (the kernels read each head's "
                      "row with stride 1)")
    return (*inputs, tuple(copies))


def _run(q, k, v, *, scale, causal, window_size, softcap, alibi_slopes, deterministic, cu_seqlens_q=None,
         cu_seqlens_k=None, seqlens_k=None, block_table=None, max_seqlen_q=0, max_seqlen_k=0, num_splits=0,
         top_left=False, copy_kv=True, sinks=None, dropout_p=0.0, rng_state=None, descales=(None, None, None)):
    """num_splits: 0 the forward; -1 decode with the built-in split count;
    N > 0 decode with N splits. copy_kv: see contiguous_rows. sinks: [Hq]
    sink logits (any float dtype), each joining its head's softmax as one
    more term with no value (docs/contract.md); for torch tensors their
    gradient flows back through autograd. dropout_p > 0: attention dropout
    with rng_state (_dropout.rng_state), saved for the backward. descales:
    (q_descale, k_descale, v_descale) of fp8 inputs (tensors, numbers or
    None; torch only)."""
    mask, window = _mask(causal, window_size, top_left)
    softcap = float(softcap or 0.0)
    if softcap < 0:
        raise InvalidArgument(f"softcap: got {softcap}; expected >= 0 (0: off)")
    if _is_numpy(q):
        if dropout_p:
            _unsupported("dropout_p with NumPy arrays", "dropout draws its seed from PyTorch's generator; pass "
                         "torch tensors")
        _no_numpy_descales(descales)
        q, k, v, _ = contiguous_rows(q, k, v, copy_kv)
        from . import _numpy
        spec = engine.Spec(scale=scale, mask=mask, window=window, softcap=softcap,
                           alibi_per_batch=alibi_slopes is not None and alibi_slopes.ndim == 2,
                           has_alibi=alibi_slopes is not None, has_sinks=sinks is not None)
        return calls.forward(_numpy.ARRAYS, q, k, v, spec, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                             seqlens_k=seqlens_k, block_table=block_table, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, alibi_slopes=alibi_slopes, sinks=sinks,
                             num_splits=max(num_splits, 0), decode=num_splits != 0)
    if not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):  # cheaper than stride(-1) x 3
        q, k, v, _ = contiguous_rows(q, k, v, copy_kv)
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, int(max_seqlen_q), int(max_seqlen_k), scale,
            mask, window[0], window[1], softcap, alibi_slopes, int(num_splits), bool(deterministic))
    fp8 = any(x is not None for x in descales) and _torch_module()._fp8.any_fp8(q, k, v)
    if sinks is not None or dropout_p or fp8:
        # sinks.float(): itself when float32; else a copy autograd sees through
        args += (sinks.float() if sinks is not None else None,)
    if dropout_p or fp8:
        args += (float(dropout_p), rng_state)
    if fp8:  # the op takes tensors: a number becomes a 1-element tensor
        to_tensor = _torch_module()._fp8.as_tensor
        args += tuple(to_tensor(x, name, q) for x, name in zip(descales, ("q_descale", "k_descale", "v_descale")))
    return _torch_module().call(*args)


def _no_numpy_descales(descales):
    for name, x in zip(("q_descale", "k_descale", "v_descale"), descales):
        if x is not None:
            raise InvalidArgument(f"{name}: got it with NumPy arrays; expected None (NumPy has no fp8 dtype: fp8 "
                                  "inputs are torch tensors)")


def _refuse_fp8_training(q, k, v, dropout_p):
    """fp8 torch inputs with requires_grad or dropout: InvalidArgument."""
    if not _is_numpy(q):
        _torch_module()._fp8.refuse_training(q, k, v, dropout_p)


_masks = {}  # (causal, (left, right) as ints, top_left) -> (mask, window): the same few on every call


def _mask(causal, window_size, top_left):
    window = _window(window_size)
    key = (bool(causal), window, top_left)
    found = _masks.get(key)
    if found is None:
        found = _masks[key] = engine.mask_of(causal, window, top_left=top_left)
    return found


_torch_mod = None


def _torch_module():
    global _torch_mod
    if _torch_mod is None:
        from . import _torch
        _torch_mod = _torch
    return _torch_mod


def _flash_attn_lse(lse):
    """flash-attn 2's LSE of a row that sees no key, +inf, where attune's
    own interfaces write -inf (the identity of merge_states). A new tensor,
    not a fill in place: autograd saved the op's LSE for the backward, which
    reads attune's convention."""
    if _is_numpy(lse):
        import numpy as np
        lse[lse == -np.inf] = np.inf  # nothing else holds a NumPy call's LSE
        return lse
    return lse.masked_fill(lse == -math.inf, math.inf)


def _returned(q, out, lse, return_attn_probs, s_dmask=None):
    """flash-attn's returns: out, or (out, softmax_lse, S_dmask), where
    S_dmask is the empty tensor flash-attn returns without dropout, and with
    dropout what s_dmask() makes of the LSE (_dropout.s_dmask)."""
    if not return_attn_probs:
        return out
    if s_dmask is not None:
        return out, _flash_attn_lse(lse), s_dmask(lse)
    if _is_numpy(q):
        import numpy as np
        probs = np.empty(0, dtype=q.dtype)
    else:
        probs = q.new_empty(0)
    return out, _flash_attn_lse(lse), probs


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False, *, sinks=None, q_descale=None,
                    k_descale=None, v_descale=None):
    """Attention over q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (Hq a
    multiple of Hkv; v's head dim may differ), as flash-attn's: causal is
    aligned bottom-right, window_size (left, right) with -1 unbounded,
    softmax_scale defaults to 1/sqrt(D). Returns out [B, Sq, Hq, Dv], or
    (out, softmax_lse [B, Hq, Sq] float32, S_dmask) with return_attn_probs
    (a row that sees no key has LSE +inf, as in flash-attn; S_dmask is empty
    without dropout). sinks (attune's): [Hq] logits, each one more term of
    its head's softmax with no value (gpt-oss), with a gradient for torch
    tensors.

    dropout_p > 0 (torch tensors): attention dropout, each probability kept
    with probability 1 - dropout_p and scaled by 1 / (1 - dropout_p); the
    seed and offset come from torch's generator for q's device
    (torch.manual_seed makes calls repeatable) and the backward regenerates
    the same mask. S_dmask is then [B, Hq, Sq, Sk]: the probabilities,
    negative where dropped (flash-attn 2's convention; _dropout.s_dmask).

    fp8 (FlashAttention-3's): q, k and v torch.float8_e4m3fn (or all
    float8_e5m2), each input's value its stored value times its descale:
    q_descale, k_descale, v_descale float32 (B, Hkv) as FlashAttention-3
    takes them (q head h uses kv head h // (Hq / Hkv)'s), or (Hkv,), one
    element or a Python float (per tensor); None: 1. out is bfloat16.
    Descales of 16-bit inputs are ignored, as in FlashAttention-3. fp8 is
    forward only: requires_grad and dropout_p > 0 are refused."""
    scale = _scale(softmax_scale, q.shape[-1])
    _refuse_fp8_training(q, k, v, dropout_p)
    p, state = _dropout_state(q, dropout_p)
    out, lse = _run(q, k, v, scale=scale, causal=causal, window_size=window_size, softcap=softcap,
                    alibi_slopes=alibi_slopes, deterministic=deterministic, sinks=sinks, dropout_p=p,
                    rng_state=state, descales=(q_descale, k_descale, v_descale))
    probs = None
    if p and return_attn_probs:
        mask, window = _mask(causal, window_size, False)
        probs = lambda lse: dropout.s_dmask(q, k, lse, state, p, scale=scale, mask=mask,  # noqa: E731
                                            window=window, softcap=float(softcap or 0.0), alibi_slopes=alibi_slopes)
    return _returned(q, out, lse, return_attn_probs, probs)


def _dropout_state(q, dropout_p):
    """(p, rng_state): the checked probability and, when it is not 0, the
    call's {seed, offset} drawn from torch's generator (_dropout)."""
    p = dropout.probability(dropout_p)
    if not p:
        return 0.0, None
    if _is_numpy(q):
        _unsupported("dropout_p with NumPy arrays", "dropout draws its seed from PyTorch's generator; pass "
                     "torch tensors")
    return p, dropout.rng_state(q)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None, *, sinks=None,
                           q_descale=None, k_descale=None, v_descale=None):
    """Packed sequences: q [Tq, Hq, D], k and v [Tk, Hkv, D], cu_seqlens
    int32 [B + 1] offsets, max_seqlen the longest sequence (a bound the plan
    is made for). With block_table, k and v are page pools [pages,
    page_size, Hkv, D] and cu_seqlens_k counts each sequence's cached keys.
    Returns out [Tq, Hq, Dv], or (out, softmax_lse [Hq, Tq], S_dmask).
    sinks and dropout_p: as in flash_attn_func; S_dmask with dropout is
    [B, Hq, max_seqlen_q, max_seqlen_k], rows and keys local to each
    sequence. fp8 q, k, v and their descales as in flash_attn_func, the
    descales' batch the sequences (B = len(cu_seqlens_q) - 1)."""
    scale = _scale(softmax_scale, q.shape[-1])
    _refuse_fp8_training(q, k, v, dropout_p)
    p, state = _dropout_state(q, dropout_p)
    if p and block_table is not None:
        _unsupported("dropout_p with block_table", "dropout is for training; a paged KV cache has no backward")
    seqlens_k = None
    if block_table is not None:  # the cache's lengths, as attune's paged contract takes them
        seqlens_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        cu_seqlens_k = None
    out, lse = _run(q, k, v, scale=scale, causal=causal, window_size=window_size, softcap=softcap,
                    alibi_slopes=alibi_slopes, deterministic=deterministic, cu_seqlens_q=cu_seqlens_q,
                    cu_seqlens_k=cu_seqlens_k, seqlens_k=seqlens_k, block_table=block_table,
                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, sinks=sinks, dropout_p=p, rng_state=state,
                    descales=(q_descale, k_descale, v_descale))
    probs = None
    if p and return_attn_probs:
        mask, window = _mask(causal, window_size, False)
        probs = lambda lse: dropout.s_dmask(  # noqa: E731
            q, k, lse, state, p, scale=scale, mask=mask, window=window, softcap=float(softcap or 0.0),
            alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
            max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return _returned(q, out, lse, return_attn_probs, probs)


def _unpacked(x, axis, count, name, layout):
    """The `count` parts of a packed array along `axis`, as views: the
    forward takes any batch, sequence and head strides, so nothing is
    copied. torch's unbind, whose gradient stacks the parts' gradients back
    into one tensor packed like x. The backward copies the views contiguous
    (its gradients are written laid out like q, k and v), where flash-attn
    writes into the packed gradient; attune.explain(op="bwd") names those
    copies."""
    if x.ndim != axis + 3 or x.shape[axis] != count:
        raise InvalidArgument(f"{name}: got shape {list(x.shape)}; expected {layout}")
    if _is_numpy(x):
        return tuple(x[(slice(None),) * axis + (i,)] for i in range(count))
    return x.unbind(axis)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func over one packed qkv [B, S, 3, H, D] (self-attention,
    as many key heads as query heads); the gradient comes back packed like
    qkv. Returns out [B, S, H, D], or (out, softmax_lse, an empty tensor)."""
    q, k, v = _unpacked(qkv, 2, 3, "qkv", "[batch, seqlen, 3, heads, head_dim]")
    return flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                           window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                           deterministic=deterministic, return_attn_probs=return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func with k and v packed in kv [B, Sk, 2, Hkv, D] (Hq a
    multiple of Hkv); the gradient of kv comes back packed like it."""
    k, v = _unpacked(kv, 2, 2, "kv", "[batch, seqlen_k, 2, heads_k, head_dim]")
    return flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                           window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                           deterministic=deterministic, return_attn_probs=return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func over one packed qkv [T, 3, H, D], the same
    cu_seqlens and max_seqlen for queries and keys."""
    q, k, v = _unpacked(qkv, 1, 3, "qkv", "[total, 3, heads, head_dim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p=dropout_p,
                                  softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                  softcap=softcap, alibi_slopes=alibi_slopes, deterministic=deterministic,
                                  return_attn_probs=return_attn_probs)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func with k and v packed in kv [Tk, 2, Hkv, D]."""
    k, v = _unpacked(kv, 1, 2, "kv", "[total_k, 2, heads_k, head_dim]")
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                  window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                  deterministic=deterministic, return_attn_probs=return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False, *,
                            q_descale=None, k_descale=None, v_descale=None, k_scale=None, v_scale=None):
    """Decode against a KV cache: q [B, Sq, Hq, D]; k_cache and v_cache
    [B_cache, Smax, Hkv, D], or page pools [pages, page_size, Hkv, D] with
    block_table int32 [B, max_pages]; cache_seqlens (int32 [B], or one int)
    the keys in use per sequence. num_splits 0: attune's choice (tuned, or
    enough to fill the GPU). Returns out, or (out, softmax_lse) with
    return_softmax_lse. q may have a strided last dimension (copied, as
    flash-attn does); the caches may not (refused, as flash-attn does).

    As flash-attn's: k and v [B, Snew, Hkv, D] are written into the cache in
    place at cache_seqlens (which the caller then advances), rotated first
    with rotary_cos and rotary_sin [seqlen_ro, rotary_dim / 2] (interleaved
    pairs or halves), q rotated at the same positions (row by row when
    causal or local); cache_batch_idx [B] picks each sequence's cache row
    and cache_leftpad [B] its first key (contiguous caches only).

    fp8 caches (torch.float8_e4m3fn or float8_e5m2, contiguous or paged):
    under float16/bfloat16 q (out in q's dtype), or under q in the same fp8
    format (FlashAttention-3's; out bfloat16, q_descale applies). k_descale
    and v_descale as in flash_attn_func ((B, Hkv), (Hkv,), one element or a
    float); k_scale and v_scale are their names in vLLM (one of each pair).
    New keys and values (k, v) cannot be appended to an fp8 cache."""
    k_descale = _alias(k_descale, k_scale, "k_descale", "k_scale")
    v_descale = _alias(v_descale, v_scale, "v_descale", "v_scale")
    appending = k is not None or v is not None
    if not _is_numpy(q) and _torch_module()._fp8.any_fp8(k_cache, v_cache):
        _refuse_fp8_training(q, k_cache, v_cache, 0.0)
        if appending:
            raise InvalidArgument(f"k, v: got new keys and values for a {k_cache.dtype} cache; expected None "
                                  "(kv_append writes float16/bfloat16 caches: write the quantized keys and values "
                                  "into the fp8 cache, then call with cache_seqlens counting them)")
    if appending or rotary_cos is not None or rotary_sin is not None or cache_batch_idx is not None or \
            cache_leftpad is not None:
        from . import _append
        _append.check_arguments(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                                cache_leftpad, block_table)
    batch = q.shape[0]
    if cache_seqlens is None:
        smax = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        cache_seqlens = [smax] * batch
    elif isinstance(cache_seqlens, int):
        cache_seqlens = [cache_seqlens] * batch
    if isinstance(cache_seqlens, list):
        if _is_numpy(q):
            import numpy as np
            cache_seqlens = np.asarray(cache_seqlens, dtype=np.int32)
        else:
            import torch
            cache_seqlens = torch.tensor(cache_seqlens, dtype=torch.int32, device=q.device)
    if appending or cache_batch_idx is not None or cache_leftpad is not None:
        q, k_cache, v_cache, cache_seqlens, block_table = _with_cache_step(
            q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx, cache_leftpad,
            block_table, rotary_interleaved, q_per_row=bool(causal) or _window(window_size) != (-1, -1))
    max_k = k_cache.shape[1] * block_table.shape[1] if block_table is not None else k_cache.shape[1]
    out, lse = _run(q, k_cache, v_cache, scale=_scale(softmax_scale, q.shape[-1]), causal=causal,
                    window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, deterministic=False,
                    seqlens_k=cache_seqlens, block_table=block_table, max_seqlen_k=max_k,
                    num_splits=_splits(num_splits, block_table), copy_kv=False,
                    descales=(q_descale, k_descale, v_descale))
    return (out, _flash_attn_lse(lse)) if return_softmax_lse else out


def _alias(value, alias, name, alias_name):
    """One of two names of an argument (FlashAttention-3's and vLLM's)."""
    if alias is None:
        return value
    if value is not None:
        raise InvalidArgument(f"{name} and {alias_name}: got both; expected one ({alias_name} is vLLM's name of "
                              f"{name})")
    return alias


def _with_cache_step(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                     cache_leftpad, block_table, rotary_interleaved, q_per_row):
    """The append (kv_append, one launch) and the cache as the attention
    then reads it: (q, k_cache, v_cache, cache_seqlens, block_table)."""
    from . import _append
    if _is_numpy(q):
        from . import _numpy
        arrays = _numpy.ARRAYS
    else:
        arrays = _torch_module().ARRAYS
    step = _append.cache_views(arrays, q, k_cache, v_cache, cache_seqlens, cache_batch_idx, cache_leftpad, block_table)
    q_att, lengths = q, step.lengths
    if k is not None:
        k, v = _append.contiguous_last(k), _append.contiguous_last(v)
        q_att, lengths = _append.append(arrays, q, k_cache, v_cache, k, v, step.lengths, step.append_table,
                                        rotary_cos, rotary_sin, rotary_interleaved, q_per_row)
    if step.pad is not None:
        lengths = lengths - step.pad
    return q_att, step.k_cache, step.v_cache, lengths, step.table


def _splits(num_splits, block_table):
    """The op's split argument for a KV-cache call: the decode kernel with
    the asked splits; with none asked, decode's own choice for a contiguous
    cache, and Runtime::plan's rule for a paged one (long query chunks run
    the forward kernel)."""
    num_splits = int(num_splits)
    if num_splits < 0:
        raise InvalidArgument(f"num_splits: got {num_splits}; expected 0 (attune's choice) or a count >= 1")
    if num_splits > 0:
        return num_splits
    return 0 if block_table is not None else -1


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's arguments and
    layout, [B, H, S, D], with its top-left causal alignment; returns
    [B, Hq, Sq, Dv]. dropout_p > 0: attention dropout as in flash_attn_func
    (SDPA applies it whenever it is given: pass 0.0 outside training)."""
    if attn_mask is not None:
        _unsupported("attn_mask", "use is_causal, or flash_attn_func's window_size and cu_seqlens for padding")
    _refuse_fp8_training(query, key, value, dropout_p)
    p, state = _dropout_state(query, dropout_p)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise InvalidArgument(f"heads: query {query.shape[1]}, key {key.shape[1]}; expected equal counts, or "
                              "enable_gqa=True (as SDPA)")
    q, k, v = (x.swapaxes(1, 2) if _is_numpy(x) else x.transpose(1, 2) for x in (query, key, value))
    out, _ = _run(q, k, v, scale=_scale(scale, query.shape[-1]), causal=is_causal, window_size=(-1, -1),
                  softcap=0.0, alibi_slopes=None, deterministic=False, top_left=True, dropout_p=p, rng_state=state)
    return out.swapaxes(1, 2) if _is_numpy(out) else out.transpose(1, 2)


def merge_states(outs, lses):
    """The merge of partial results over disjoint keys: outs [T, H, D] and
    lses [H, T] (float32, natural log; -inf, or flash-attn's +inf: an empty
    partial, skipped), as flash_attn_varlen_func returns them; returns
    (out, lse), the LSE of a row without keys in any partial -inf (attune's
    convention)."""
    import torch

    if len(outs) != len(lses) or not outs:
        raise InvalidArgument(f"merge_states: got {len(outs)} outs and {len(lses)} lses; expected equal counts >= 1")
    o0 = outs[0]
    if o0.dim() != 3:
        raise InvalidArgument(f"merge_states: outs [T, H, D]; got {list(o0.shape)}")
    from . import _torch
    view = _torch.ARRAYS.view(o0)
    backend, device = engine.backend_of(view)
    if backend == "reference":
        raise InvalidArgument(f"merge_states: dtype {view.dtype}; expected float16 or bfloat16")
    rows, heads, dim = o0.shape
    outs = [o.contiguous() for o in outs]
    # An empty partial may come with flash-attn's +inf (the flash-attn
    # functions' LSE): it is merged as attune's -inf, skipped.
    lses = [l.to(torch.float32) for l in lses]
    lses = [l.masked_fill(l == math.inf, -math.inf).contiguous() for l in lses]
    out = torch.empty_like(outs[0])
    lse = torch.empty((heads, rows), dtype=torch.float32, device=o0.device)
    import ctypes
    o_ptrs = (ctypes.c_void_p * len(outs))(*[o.data_ptr() for o in outs])
    l_ptrs = (ctypes.c_void_p * len(lses))(*[l.data_ptr() for l in lses])
    rt = engine.runtime(backend, device)
    dtype = native.DTYPE_FP16 if view.dtype == "fp16" else native.DTYPE_BF16
    native.check(native.lib().attune_merge_states(rt.handle, dtype, rows, heads, dim, len(outs), o_ptrs, l_ptrs,
                                                  out.data_ptr(), lse.data_ptr(), _torch.ARRAYS.stream(o0)))
    return out, lse
