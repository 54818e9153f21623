"""attune as a Hugging Face transformers attention backend. Importing this
module registers attn_implementation="attune": the attention function and
the mask it needs (without a registered mask transformers would hand the
function no mask at all, and causal masking would be lost).

    import attune.transformers
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.bfloat16, attn_implementation="attune")
    # or, on a model already built: model.set_attn_implementation("attune")

What it serves, with eager attention's semantics: causal and bidirectional
models, GQA/MQA, Dk != Dv, `scaling`, sliding windows (Mistral; Gemma 2/3
alternating layers), `softcap` (Gemma 2), attention sinks (gpt-oss `s_aux`,
native in attune's kernels), left and right padding (the 2-D padding mask
turned into packed sequences for attune's varlen kernels, never a dense
mask), KV caches (DynamicCache, sliding-window layers, StaticCache), and
training (gradients of q, k, v and the sinks through attune's backward).
Attention dropout in training (the `dropout` transformers passes, 0 in
eval) runs in attune's kernels, its seed drawn from torch's generator.
What it cannot serve raises NotImplementedError naming the argument: a 4-D
attention_mask, output_attentions, T5's position_bias, and mask
patterns beyond causal/bidirectional, windows and padding (image-token
overlays, chunked attention past its chunk, packed sequences told by
position_ids).
"""
from typing import NamedTuple

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers import masking_utils as _masks

from ._interface import _dropout_state, _run, _unsupported
from ._errors import InvalidArgument

NAME = "attune"


class Pattern(NamedTuple):
    """What a layer's mask asks of attune: causal or not, and the window
    (left, right) in flash-attn's convention (-1: unbounded)."""
    causal: bool
    window: tuple = (-1, -1)


# -- the mask ----------------------------------------------------------------------
#
# transformers composes a mask function from small ones (and_masks of
# causal_mask_function, a sliding-window overlay, ...). attune reads that
# composition, so a pattern it cannot serve is refused instead of dropped.


def _code(factory, *args):
    """The code object of the closures `factory` makes (None where this
    transformers version has no such factory): closures made by one factory
    share it."""
    f = getattr(_masks, factory, None)
    return f(*args).__code__ if f is not None else None


_AND, _OR = _code("and_masks"), _code("or_masks")
_SLIDING, _SLIDING_BOTH = _code("sliding_window_overlay", 1), _code("sliding_window_bidirectional_overlay", 1)
_CHUNKED = _code("chunked_overlay", 1, None)
_PACKED = {_code("packed_sequence_mask_function", None), _code("remap_positions_for_packed_sequence", None, None)}


def _closure(fn, name):
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def _leaves(fn):
    """The functions an and_masks composition intersects."""
    if fn.__code__ is _AND:
        for f in _closure(fn, "mask_functions"):
            yield from _leaves(f)
    else:
        yield fn


def pattern_of(mask_function, kv_end):
    """The Pattern of a transformers mask function over keys up to position
    kv_end; NotImplementedError for one attune cannot serve."""
    causal, window = False, (-1, -1)
    for f in _leaves(mask_function):
        code = getattr(f, "__code__", None)
        if f is _masks.causal_mask_function:
            causal = True
        elif f is _masks.bidirectional_mask_function:
            pass
        elif code is _SLIDING:  # kv > q - w: w - 1 keys to the left
            window = (_closure(f, "sliding_window") - 1, window[1])
        elif code is _SLIDING_BOTH:  # |q - kv| <= w
            w = _closure(f, "sliding_window")
            window = (w, w)
        elif code is _CHUNKED:
            if kv_end > _closure(f, "chunk_size"):
                _unsupported("chunked attention (attention_chunk_size)",
                             f"{kv_end} keys span more than one chunk of {_closure(f, 'chunk_size')}")
        elif code is not None and code in _PACKED:
            _unsupported("packed sequences (position_ids restarting inside a row)",
                         "pass one sequence per row with an attention_mask for the padding")
        elif code is _OR:
            _unsupported("or_mask_function / block_sequence_ids",
                         "a mask that adds keys to the causal or window pattern (image tokens attending both ways)")
        else:
            _unsupported(f"the mask function {getattr(f, '__qualname__', f)!r}",
                         "attune serves causal and bidirectional masks, sliding windows and padding")
    if causal:
        window = (window[0], -1 if window[0] < 0 else 0)
    return Pattern(causal, window)


def mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=_masks.causal_mask_function,
         attention_mask=None, **kwargs):
    """The mask transformers builds for attn_implementation="attune": a 2-D
    bool padding mask [batch, keys] (True: a key in use) carrying the
    layer's Pattern (`attune_pattern`) and whether any key is padding
    (`attune_padded`), so the attention function follows the mask as eager
    attention does, whatever its own arguments say. A causal mask ends at
    the last query: a static cache's slots past it are never visible."""
    pattern = pattern_of(mask_function, int(kv_offset) + int(kv_length))
    q_offset, kv_offset = int(q_offset), int(kv_offset)
    width = kv_length
    if pattern.causal or pattern.window != (-1, -1):
        width = max(0, min(kv_length, q_offset - kv_offset + q_length))
    if attention_mask is None:
        padding = torch.ones(batch_size, width, dtype=torch.bool, device=kwargs.get("device", "cpu"))
        padded = False
    else:
        padding = attention_mask.to(torch.bool)
        end = kv_offset + width
        if padding.shape[1] == width < end:
            # Already this layer's columns: a mask made here, handed back
            # (generate() makes the masks before the model remakes them).
            padding = padding[:, :]  # a view of its own, to carry this layer's pattern
        else:
            if padding.shape[1] < end:  # tokens the 2-D mask does not cover are not in use (transformers' rule)
                padding = torch.nn.functional.pad(padding, (0, end - padding.shape[1]), value=False)
            padding = padding[:, kv_offset:end]
        padded = not bool(padding.all())
    padding.attune_pattern = pattern
    padding.attune_padded = padded
    return padding


# -- the attention function ------------------------------------------------------------


class _Unpadded:
    """The packed form of a padded batch: where each sequence's keys (and
    queries) are in the [batch, position] grid, and cu_seqlens over them.
    Queries are the last Sq columns of the mask when they are key tokens
    too (causal or windowed self-attention); otherwise every query row is
    kept and only keys are dropped."""

    def __init__(self, padding, seqlen_q, queries_in_mask):
        batch, width = padding.shape
        counts = padding.sum(1)
        self.k_rows = padding.nonzero(as_tuple=True)
        self.cu_k = _offsets(counts)
        self.max_k = int(counts.max()) if batch else 0
        first = padding.int().argmax(1)
        last = width - 1 - padding.flip(1).int().argmax(1)
        self.holes = bool(((counts > 0) & (counts != last - first + 1)).any())
        self.q_rows = None
        self.cu_q = torch.arange(batch + 1, dtype=torch.int32, device=padding.device) * seqlen_q
        self.max_q = seqlen_q
        if queries_in_mask:
            if seqlen_q > width:
                raise InvalidArgument(f"attention_mask: {width} key columns for {seqlen_q} query rows; expected the "
                                      "queries among the keys (a causal or windowed self-attention)")
            in_use = padding[:, width - seqlen_q:]
            if not bool(in_use.all()):
                q_counts = in_use.sum(1)
                self.q_rows = in_use.nonzero(as_tuple=True)
                self.cu_q = _offsets(q_counts)
                self.max_q = int(q_counts.max())


def _offsets(counts):
    """cu_seqlens (int32 [B + 1]) of per-sequence counts."""
    return torch.nn.functional.pad(counts.cumsum(0), (1, 0)).to(torch.int32)


_unpadded = []  # (mask, its version, Sq, queries_in_mask, _Unpadded): every layer of a forward shares its mask


def _unpadded_for(padding, seqlen_q, queries_in_mask):
    key = (padding._version, seqlen_q, queries_in_mask)
    for entry in _unpadded:
        if entry[0] is padding and entry[1:4] == key:
            return entry[4]
    found = _Unpadded(padding, seqlen_q, queries_in_mask)
    _unpadded.insert(0, (padding, *key, found))
    del _unpadded[4:]  # a model's few mask kinds (full, sliding), one forward at a time
    return found


def _refuse_unsupported(attention_mask, kwargs):
    if attention_mask is not None and attention_mask.dim() != 2:
        _unsupported("attention_mask", f"got a {attention_mask.dim()}-D {attention_mask.dtype} mask "
                     f"{list(attention_mask.shape)}; attune takes the 2-D padding mask [batch, keys] that "
                     "transformers builds from the attention_mask of the inputs (with causal and window patterns "
                     "from the model), not an arbitrary dense mask")
    if kwargs.get("output_attentions"):
        _unsupported("output_attentions", "attune never materializes the attention probabilities")
    if kwargs.get("position_bias") is not None:
        _unsupported("position_bias", "an additive bias per query and key (T5) is a dense mask")
    for name in ("cu_seq_lens_q", "cu_seq_lens_k"):
        if kwargs.get(name) is not None:
            _unsupported(name, "packed sequences; pass one sequence per row with an attention_mask")


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None,
              softcap=None, is_causal=None, s_aux=None, **kwargs):
    """transformers' attention function for attn_implementation="attune":
    query [B, Hq, Sq, Dk], key and value [B, Hkv, Sk, D] (the cache's keys
    included) -> (out [B, Sq, Hq, Dv], None). The pattern comes from the
    mask when attune's mask made one (eager attention's semantics), else
    from is_causal (default: the module's) and sliding_window (flash-attn's
    convention: sliding_window - 1 keys each side)."""
    _refuse_unsupported(attention_mask, kwargs)
    pattern = getattr(attention_mask, "attune_pattern", None)
    if pattern is None:
        causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
        window = (-1, -1) if sliding_window is None else (int(sliding_window) - 1, int(sliding_window) - 1)
        pattern = Pattern(causal, (window[0], 0) if causal and window[0] >= 0 else window)
    q = query.transpose(1, 2)  # [B, Sq, Hq, Dk]: views, the kernels read any strides
    k, v = key.transpose(1, 2), value.transpose(1, 2)
    options = dict(scale=scaling if scaling is not None else query.shape[-1] ** -0.5, causal=pattern.causal,
                   window_size=pattern.window, softcap=float(softcap or 0.0), alibi_slopes=None,
                   deterministic=False, sinks=s_aux)
    # Dropout (training): one {seed, offset} for the call, from torch's generator.
    options["dropout_p"], options["rng_state"] = _dropout_state(q, dropout)
    if attention_mask is None or not getattr(attention_mask, "attune_padded", True):
        width = attention_mask.shape[1] if attention_mask is not None else k.shape[1]
        out, _ = _run(q, k[:, :width], v[:, :width], **options)
        return out, None
    return _padded_attention(q, k, v, attention_mask, pattern, options), None


def _padded_attention(q, k, v, padding, pattern, options):
    batch, seqlen_q, heads_q, _ = q.shape
    width = padding.shape[1]
    if width > k.shape[1]:
        raise InvalidArgument(f"attention_mask: {width} key columns; expected at most the {k.shape[1]} keys")
    windowed = pattern.window != (-1, -1)
    rows = _unpadded_for(padding, seqlen_q, pattern.causal or windowed)
    if rows.holes and windowed:
        _unsupported("attention_mask with padding between tokens of a sequence and a sliding window",
                     "attune's windows count keys in use; pad only at the start or the end of a row")
    k_packed, v_packed = k[rows.k_rows], v[rows.k_rows]  # [Tk, Hkv, D]
    q_packed = q.reshape(batch * seqlen_q, heads_q, q.shape[-1]) if rows.q_rows is None else q[rows.q_rows]
    out, _ = _run(q_packed, k_packed, v_packed, cu_seqlens_q=rows.cu_q, cu_seqlens_k=rows.cu_k,
                  max_seqlen_q=rows.max_q, max_seqlen_k=rows.max_k, **options)
    if rows.q_rows is None:
        return out.view(batch, seqlen_q, heads_q, out.shape[-1])
    # Query rows that are padding come back as zeros (no key is theirs).
    full = out.new_zeros(batch, seqlen_q, heads_q, out.shape[-1])
    return full.index_put(rows.q_rows, out)


AttentionInterface.register(NAME, attention)
AttentionMaskInterface.register(NAME, mask)
