"""The KV-cache half of flash_attn_with_kvcache: new keys and values written
into the cache (in place, at cache_seqlens), rotary embedding of the new
keys and of q, cache_batch_idx and cache_leftpad, before the attention call.

16-bit arrays run the kv_append kernel (one launch, templates/kv_append.cuh,
through attune_append_kv); float32/float64 arrays run the same rule here in
fp64 (the reference path, as their attention does). Positions follow
flash-attn: new key t of sequence b goes to cache row position
cache_seqlens[b] + t and is rotated at that position; q row i is rotated at
cache_seqlens[b] + i when the mask is causal or local, else every row at
cache_seqlens[b]. The attention then sees keys [cache_leftpad[b],
cache_seqlens[b] + Snew) of row cache_batch_idx[b].
"""
import ctypes
from typing import NamedTuple

from . import _engine as engine
from . import _native as native
from ._engine import _require
from ._errors import InvalidArgument


def _is_numpy(x):
    return type(x).__module__ == "numpy"


def _int32(x, batch, name, like):
    """A length-like argument as a contiguous int32 array on like's device."""
    if isinstance(x, int):
        x = [x] * batch
    if _is_numpy(like):
        import numpy as np
        x = np.ascontiguousarray(np.asarray(x), dtype=np.int32)
    else:
        import torch
        x = torch.as_tensor(x, device=like.device).to(torch.int32).contiguous()
    _require(tuple(x.shape) == (batch,), f"{name}: got shape {list(x.shape)}; expected [{batch}] (one per sequence)")
    return x


def check_arguments(q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, cache_seqlens, cache_batch_idx,
                    cache_leftpad, block_table):
    """flash-attn's refusals, with attune's message shape."""
    if (k is None) != (v is None):
        raise InvalidArgument("k, v: got only " + ("k" if v is None else "v") +
                              "; expected both (the new keys and values to append) or neither")
    if k is not None and cache_seqlens is None:
        raise InvalidArgument("cache_seqlens: got None with k and v; expected the keys each sequence holds (where "
                              "the new ones go)")
    if (rotary_cos is None) != (rotary_sin is None):
        raise InvalidArgument("rotary_cos, rotary_sin: got only one; expected both [seqlen_ro, rotary_dim / 2]")
    if rotary_cos is not None and k is None:
        raise InvalidArgument("rotary_cos, rotary_sin: got them without k and v; expected the new keys and values "
                              "too (rotary embedding applies to q and the appended keys)")
    if block_table is not None and cache_batch_idx is not None:
        raise InvalidArgument("cache_batch_idx: got it with block_table; expected one of them (a paged cache "
                              "names each sequence's pages in its block table)")
    if block_table is not None and cache_leftpad is not None:
        raise InvalidArgument("cache_leftpad: got it with block_table; expected a contiguous cache (as flash-attn)")
    if k is not None:
        b, s_new = q.shape[0], k.shape[1]
        _require(k.ndim == 4 and tuple(k.shape) == (b, s_new, k_cache.shape[2], k_cache.shape[3]),
                 f"k: got shape {list(k.shape)}; expected [{b}, seqlen_new, {k_cache.shape[2]}, {k_cache.shape[3]}] "
                 "(batch, new keys, KV heads, head dim of k_cache)")
        _require(v.ndim == 4 and tuple(v.shape) == (b, s_new, v_cache.shape[2], v_cache.shape[3]),
                 f"v: got shape {list(v.shape)}; expected [{b}, {s_new}, {v_cache.shape[2]}, {v_cache.shape[3]}]")
        _require(k.dtype == k_cache.dtype and v.dtype == v_cache.dtype,
                 f"k, v: got {k.dtype} and {v.dtype}; expected the caches' dtype {k_cache.dtype}")


class CacheStep(NamedTuple):
    lengths: object       # int32 [B]: cache_seqlens, where the new keys go
    append_table: object  # the block table the append writes through; None: the cache's own rows
    k_cache: object       # the caches as the attention reads them
    v_cache: object
    table: object         # the attention's block table (None: contiguous)
    pad: object           # cache_leftpad as int32 [B]; None: none


def cache_views(arrays, q, k_cache, v_cache, cache_seqlens, cache_batch_idx, cache_leftpad, block_table):
    """The cache as the append and the attention read it. A contiguous cache
    read through cache_batch_idx is a pool of one page per row (page_size =
    Smax, the table [B, 1] the indices); with cache_leftpad the attention
    reads a pool of one-key pages whose table starts each sequence at its
    leftpad (its lengths then count from there). Host values are checked
    (arrays.host); device values are clamped and reported by the kernels."""
    batch = q.shape[0]
    numpy = _is_numpy(q)
    if numpy:
        import numpy as np
    else:
        import torch
    lengths = _int32(cache_seqlens, batch, "cache_seqlens", q)
    append_table = block_table
    if cache_batch_idx is not None:
        idx = _int32(cache_batch_idx, batch, "cache_batch_idx", q)
        host = arrays.host(idx)
        if host is not None:
            for i, row in enumerate(host):
                _require(0 <= row < k_cache.shape[0], f"cache_batch_idx[{i}]: got {int(row)}; expected a row of the "
                         f"cache, 0..{k_cache.shape[0] - 1}")
        append_table = idx.reshape(batch, 1)
    if cache_leftpad is None:
        return CacheStep(lengths, append_table, k_cache, v_cache, append_table, None)
    pad = _int32(cache_leftpad, batch, "cache_leftpad", q)
    rows, smax = k_cache.shape[0], k_cache.shape[1]
    host_pad, host_len = arrays.host(pad), arrays.host(lengths)
    if host_pad is not None and host_len is not None:
        for i in range(batch):
            _require(0 <= host_pad[i] <= host_len[i], f"cache_leftpad[{i}]: got {int(host_pad[i])}; expected "
                     f"0..cache_seqlens[{i}] = {int(host_len[i])} (the first key in use)")
    # One-key pages: key j of sequence b is position pad[b] + j of its row.
    # Entries past a sequence's keys are never read; they stay inside the
    # pool for the table checks.
    if numpy:
        row_of = append_table[:, 0] if append_table is not None else np.arange(batch)
        first = row_of.astype(np.int64) * smax + pad.astype(np.int64)
        table = np.minimum(first[:, None] + np.arange(smax)[None, :], rows * smax - 1).astype(np.int32)
    else:
        row_of = append_table[:, 0] if append_table is not None else torch.arange(batch, device=q.device)
        first = row_of.long() * smax + pad.long()
        cols = torch.arange(smax, dtype=torch.int64, device=q.device)
        table = (first[:, None] + cols[None, :]).clamp_(max=rows * smax - 1).to(torch.int32)
    k_pool = k_cache.reshape(rows * smax, 1, k_cache.shape[2], k_cache.shape[3])
    v_pool = v_cache.reshape(rows * smax, 1, v_cache.shape[2], v_cache.shape[3])
    _require(_shares(k_pool, k_cache) and _shares(v_pool, v_cache),
             "k_cache, v_cache: with cache_leftpad each cache row's keys must be one run of memory (the cache read "
             "as one-key pages); got strides that would need a copy of the cache")
    return CacheStep(lengths, append_table, k_pool, v_pool, table, pad)


def contiguous_last(x):
    """x with a last dimension of stride 1 (copied when strided: the new
    keys and values of one step, small)."""
    if _is_numpy(x):
        import numpy as np
        return x if x.strides[-1] == x.itemsize else np.ascontiguousarray(x)
    return x if x.stride(-1) == 1 else x.contiguous()


def _shares(view, base):
    if _is_numpy(base):
        import numpy as np
        return np.shares_memory(view, base)
    return view.data_ptr() == base.data_ptr()


def check_room(arrays, lengths, s_new, table, page_size, num_pages, capacity):
    """Host lengths: each sequence's keys after the append fit its row, and
    its pages are inside the pool (flash-attn's message shape)."""
    host = arrays.host(lengths)
    if host is None:
        return
    where = (f"the capacity addressable by block_table ({table.shape[1]} pages x page_size {page_size} = "
             f"{capacity} keys)" if table is not None and page_size != capacity else
             f"the capacity of the cache row (Smax = {capacity} keys)")
    for b, n in enumerate(host):
        _require(0 <= n and n + s_new <= capacity, f"cache_seqlens[{b}] + seqlen_new = {int(n)} + {s_new} = "
                 f"{int(n) + s_new} exceeds {where}")
    if table is not None:
        engine.check_pages(host + s_new, arrays.host(table), page_size, num_pages,
                           names=("cache_seqlens + seqlen_new", "block_table"))


def append(arrays, q, k_cache, v_cache, k, v, lengths, table, rotary_cos, rotary_sin, rotary_interleaved,
           q_per_row):
    """Writes k and v into the cache (table: a block table, else the cache's
    own rows) and returns (q for the attention, lengths after the append)."""
    batch, s_new = k.shape[0], k.shape[1]
    paged = table is not None
    page_size = k_cache.shape[1] if paged else 0
    capacity = table.shape[1] * page_size if paged else k_cache.shape[1]
    check_room(arrays, lengths, s_new, table, page_size, k_cache.shape[0], capacity)
    rotary = rotary_cos is not None
    if rotary:
        _require(rotary_cos.ndim == 2 and tuple(rotary_cos.shape) == tuple(rotary_sin.shape),
                 f"rotary_cos, rotary_sin: got shapes {list(rotary_cos.shape)} and {list(rotary_sin.shape)}; "
                 "expected both [seqlen_ro, rotary_dim / 2]")
        rotary_cos, rotary_sin = (arrays.cast(x, q) for x in (rotary_cos, rotary_sin))
        rotary_cos, rotary_sin = (_contiguous(x) for x in (rotary_cos, rotary_sin))
    view = arrays.view(q)
    backend, device = engine.backend_of(view)
    if backend == "reference":
        return _reference_append(arrays, q, k_cache, v_cache, k, v, lengths, table, rotary_cos, rotary_sin,
                                 rotary_interleaved, q_per_row)
    lengths_out = arrays.empty((batch,), "int32", q)
    q_rot = arrays.empty(tuple(q.shape), None, q) if rotary else None
    p = native.AppendProblem()
    p.dtype = native.DTYPE_FP16 if view.dtype == "fp16" else native.DTYPE_BF16
    p.batch, p.seqlen_new, p.heads_kv = batch, s_new, k.shape[2]
    p.head_dim_k, p.head_dim_v = k.shape[3], v.shape[3]
    p.k_new_strides[:] = arrays.view(k).strides[:3]
    p.v_new_strides[:] = arrays.view(v).strides[:3]
    if paged:
        p.page_size, p.num_pages, p.max_pages = page_size, k_cache.shape[0], table.shape[1]
    else:
        p.cache_batch, p.seqlen_cache = k_cache.shape[0], k_cache.shape[1]
    p.k_cache_strides[:] = arrays.view(k_cache).strides[:3]
    p.v_cache_strides[:] = arrays.view(v_cache).strides[:3]
    if rotary:
        p.rotary_dim, p.seqlen_ro = 2 * rotary_cos.shape[1], rotary_cos.shape[0]
        p.rotary_interleaved = int(bool(rotary_interleaved))
        p.seqlen_q, p.heads_q = q.shape[1], q.shape[2]
        p.q_strides[:] = arrays.view(q).strides[:3]
        p.q_rot_strides[:] = arrays.view(q_rot).strides[:3]
        p.q_per_row = int(bool(q_per_row))
    ptr = arrays.ptr
    table32 = arrays.int32(table) if paged else None
    b = native.AppendBuffers(ptr(k), ptr(v), ptr(k_cache), ptr(v_cache), ptr(q) if rotary else None,
                             ptr(q_rot) if rotary else None, ptr(rotary_cos) if rotary else None,
                             ptr(rotary_sin) if rotary else None, ptr(lengths), ptr(lengths_out),
                             ptr(table32) if paged else None)
    rt = engine.runtime(backend, device)
    native.check(native.lib().attune_append_kv(rt.handle, ctypes.byref(p), ctypes.byref(b), arrays.stream(q)))
    if arrays.host(lengths) is not None:  # the same values, without reading back what the kernel wrote
        lengths_out = lengths + s_new
    return (q_rot if rotary else q), lengths_out


def _contiguous(x):
    if _is_numpy(x):
        import numpy as np
        return np.ascontiguousarray(x)
    return x.contiguous()


def rotate(x, cos, sin, positions, interleaved):
    """x [..., D] (fp64 NumPy) rotated at `positions` (broadcast to x's
    leading dims) by the tables' rows: the first 2 x cos.shape[1] dims in
    pairs, the rest unchanged."""
    import numpy as np
    half = cos.shape[1]
    c, s = cos[positions], sin[positions]  # [..., half]
    out = x.copy()
    a = np.arange(half) * 2 if interleaved else np.arange(half)
    b = a + 1 if interleaved else a + half
    x0, x1 = x[..., a], x[..., b]
    out[..., a] = x0 * c - x1 * s
    out[..., b] = x0 * s + x1 * c
    return out


def _reference_append(arrays, q, k_cache, v_cache, k, v, lengths, table, cos, sin, interleaved, q_per_row):
    """The append for float32/float64 arrays, in fp64 on the host."""
    import numpy as np
    numpy = _is_numpy(q)
    as64 = (lambda x: np.asarray(x, dtype=np.float64)) if numpy else (
        lambda x: x.detach().cpu().double().numpy())
    lens = np.asarray(arrays.host(lengths), dtype=np.int64)  # the reference runs on the CPU
    kn, vn = as64(k), as64(v)
    batch, s_new = kn.shape[0], kn.shape[1]
    if cos is not None:
        c64, s64 = as64(cos), as64(sin)
        kn = rotate(kn, c64, s64, (lens[:, None] + np.arange(s_new)[None, :])[..., None], interleaved)
        q64 = as64(q)
        rows = np.arange(q64.shape[1]) if q_per_row else np.zeros(q64.shape[1], dtype=np.int64)
        q_out = rotate(q64, c64, s64, (lens[:, None] + rows[None, :])[..., None], interleaved)
    host_table = None if table is None else np.asarray(arrays.host(table))
    kc, vc = k_cache, v_cache
    for bi in range(batch):
        for t in range(s_new):
            pos = int(lens[bi]) + t
            if host_table is None:
                where = (bi, pos)
            else:
                where = (int(host_table[bi, pos // kc.shape[1]]), pos % kc.shape[1])
            _store(kc, where, kn[bi, t])
            _store(vc, where, vn[bi, t])
    out_lens = lens + s_new
    if numpy:
        q_for = q_out.astype(q.dtype) if cos is not None else q
        return q_for, out_lens.astype(np.int32)
    import torch
    q_for = torch.from_numpy(q_out).to(q.dtype) if cos is not None else q
    return q_for, torch.from_numpy(out_lens.astype(np.int32))


def _store(cache, where, rows64):
    if _is_numpy(cache):
        cache[where] = rows64.astype(cache.dtype)
    else:
        import torch
        cache[where] = torch.from_numpy(rows64).to(cache.dtype)
