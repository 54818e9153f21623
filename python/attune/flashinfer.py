"""attune where a serving engine calls FlashInfer: the wrapper classes with
FlashInfer's constructors, plan() and run() arguments and return values,
and its merge functions, so a program switches with its import line.

    import attune.flashinfer as flashinfer          # was: import flashinfer
    workspace = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    decode.plan(kv_page_indptr, kv_page_indices, kv_last_page_len, num_qo_heads, num_kv_heads, head_dim,
                page_size, q_data_type=torch.bfloat16)
    for layer in range(num_layers):
        out = decode.run(q[layer], kv_cache[layer])      # [batch, num_qo_heads, head_dim]

Semantics are FlashInfer's: pages named by a CSR table (indptr, indices,
last_page_len: the rows in use in each sequence's last page), caches
[pages, page_size, Hkv, D] ("NHD") or [pages, Hkv, page_size, D] ("HND"),
as a (k, v) pair or one [pages, 2, ...] tensor; causal masks aligned to the
end of the keys; window_left keys to the left; logits_soft_cap; sm_scale;
sinks at run; the LSE in base 2, [rows, heads]. plan() does the host work
(reads the indptr arrays, builds attune's block table and lengths on the
device, dispatches and loads the kernel, sizes the workspace); run() only
launches attune's kernel, and with return_lse one in-place scale of the LSE
to base 2 (attune's is natural).

fp8 caches: plan(kv_data_type=torch.float8_e4m3fn or float8_e5m2) under
float16/bfloat16 queries, or q_data_type the same fp8 type (out bfloat16),
in the paged wrappers; run()'s k_scale and v_scale (and q_scale for fp8
queries) are FlashInfer's: floats or one-element float32 tensors, each
input's value its stored value times its scale. A float is written once
into a buffer the wrapper holds (rewritten only when it changes), so runs
still only launch.

Differences, each refused with NotImplementedError naming the argument:
pos_encoding_mode other than "NONE", custom masks, scales other than 1 of
16-bit inputs, fp8 in the ragged wrapper, jit_args. Where attune's plan needs what FlashInfer's plan
does not take (the pool's page count and strides, known at the first run),
the first run after the wrapper is made, or after the pool changes, plans
(later plan() calls reuse what it learned). So with use_cuda_graph, run
once before capturing (a warm-up, as SGLang and vLLM do): a run that would
plan under capture is refused, saying so.
"""
import math

import torch

from . import _engine as engine
from . import _fp8
from . import _native as native
from . import _serving
from ._errors import InvalidArgument
from ._interface import _unsupported
from ._interface import merge_states as _merge

LOG2E = 1.0 / math.log(2.0)  # FlashInfer's LSE is log2(sum exp2(...)): natural LSE x log2(e)

_DTYPES = {"float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
           "float8_e4m3fn": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
           "e5m2": torch.float8_e5m2, torch.float16: torch.float16, torch.bfloat16: torch.bfloat16,
           torch.float8_e4m3fn: torch.float8_e4m3fn, torch.float8_e5m2: torch.float8_e5m2}


def _dtype(value, name, default=None):
    if value is None:
        return default
    found = _DTYPES.get(value if isinstance(value, torch.dtype) else str(value).replace("torch.", ""))
    if found is None:
        _unsupported(f"{name}={value}", "attune's kernels take float16, bfloat16, float8_e4m3fn and float8_e5m2")
    return found


def _refuse(**given):
    """NotImplementedError for the first of these FlashInfer options that is
    given (not None or False; a scale other than 1): attune has no
    counterpart for them."""
    for name, value in given.items():
        if value is None or value is False:
            continue
        if name.endswith("scale") and not torch.is_tensor(value) and float(value) == 1.0:
            continue
        if name in ("q_scale", "k_scale", "v_scale"):
            _unsupported(f"{name}={value} with 16-bit inputs", "attune applies scales to fp8 inputs (plan with "
                         "kv_data_type=torch.float8_e4m3fn); fold a 16-bit input's scale into sm_scale")
        _unsupported(name, "FlashInfer's option has no counterpart in attune (custom masks, JIT kernels, "
                     "item-wise prefixes, o_scale)")


def _refuse_run(args, **options):
    """run()'s extra positional arguments (for FlashInfer's JIT kernels) and
    options attune has no counterpart for."""
    if args:
        _unsupported("extra positional arguments", "they feed FlashInfer's JIT kernels (jit_args)")
    _refuse(**options)


def _check_backend(jit_args):
    """backend is left to attune's dispatcher, whatever it names; JIT
    variants cannot be."""
    if jit_args is not None:
        _unsupported("jit_args", "attune's kernels are its own templates, compiled and tuned by attune")


def _require_buffers(**buffers):
    """use_cuda_graph's fixed buffers: tensors, each one."""
    for name, t in buffers.items():
        if not torch.is_tensor(t):
            raise InvalidArgument(f"{name}: got {type(t).__name__}; expected a tensor (use_cuda_graph)")


def _pools(paged_kv_cache, layout):
    """(k, v) as [pages, page_size, Hkv, D] views of a FlashInfer cache: a
    (k, v) pair or one [pages, 2, ...] tensor, NHD or HND."""
    if isinstance(paged_kv_cache, (tuple, list)):
        k, v = paged_kv_cache
    elif torch.is_tensor(paged_kv_cache) and paged_kv_cache.dim() == 5 and paged_kv_cache.shape[1] == 2:
        k, v = paged_kv_cache.unbind(1)
    else:
        got = list(paged_kv_cache.shape) if torch.is_tensor(paged_kv_cache) else type(paged_kv_cache).__name__
        raise InvalidArgument(f"paged_kv_cache: got {got}; expected a (k_cache, v_cache) pair or one "
                              f"[pages, 2, ...] tensor in the {layout} layout")
    if k.dim() != 4 or v.dim() != 4:
        raise InvalidArgument(f"paged_kv_cache: k {list(k.shape)}, v {list(v.shape)}; expected 4-D pools")
    if layout == "HND":
        k, v = k.transpose(1, 2), v.transpose(1, 2)
    return k, v


def _host(x, name):
    if not torch.is_tensor(x):
        x = torch.as_tensor(x)
    if x.dim() != 1:
        raise InvalidArgument(f"{name}: got shape {list(x.shape)}; expected a 1-D array")
    return x.to("cpu", torch.int64)


def _indptr(indptr, name, batch=None):
    """indptr on the host (int64), checked: non-decreasing, from 0."""
    h = _host(indptr, name)
    if len(h) < 1 or int(h[0]) != 0 or bool((h[1:] < h[:-1]).any()) or (batch is not None and len(h) != batch + 1):
        raise InvalidArgument(f"{name}: got {h.tolist()[:8]}{'...' if len(h) > 8 else ''}; expected "
                              f"{'' if batch is None else f'{batch + 1} '}non-decreasing offsets from 0")
    return h


class _PageTable:
    """FlashInfer's CSR page table (indptr, indices, last_page_len) as
    attune's: a dense block table [batch, max_pages] and the cache lengths,
    int32 on the device. With fixed (CUDA graphs), both live in buffers made
    once, so a captured run reads each plan's values."""

    def __init__(self, device, fixed_batch=None, width=None):
        self.device, self.fixed = device, fixed_batch is not None
        if self.fixed:
            self.table = torch.zeros(fixed_batch, max(int(width), 1), dtype=torch.int32, device=device)
            self.lengths = torch.zeros(fixed_batch, dtype=torch.int32, device=device)

    def fill(self, indptr, indices, last_page_len, page_size):
        """Reads indptr and last_page_len on the host (the plan's one read)
        and gathers the indices on their device; returns (batch, max_pages)."""
        last = _host(last_page_len, "last_page_len")
        batch = len(last)
        starts = _indptr(indptr, "indptr", batch)
        pages = starts[1:] - starts[:-1]
        if len(indices) < int(starts[-1]):
            raise InvalidArgument(f"indices: {len(indices)} entries; expected indptr[-1] = {int(starts[-1])}")
        bad = (pages > 0) & ((last < 1) | (last > page_size))
        if bool(bad.any()):
            b = int(bad.nonzero()[0])
            raise InvalidArgument(f"last_page_len[{b}] = {int(last[b])}; expected 1..page_size = {page_size}")
        lengths = torch.where(pages > 0, (pages - 1) * page_size + last, torch.zeros_like(pages))
        max_pages = max(int(pages.max()) if batch else 0, 1)
        if self.fixed:
            if batch != self.lengths.shape[0] or max_pages > self.table.shape[1]:
                raise InvalidArgument(f"indptr: {batch} sequences of up to {max_pages} pages; expected "
                                      f"{self.lengths.shape[0]} sequences (use_cuda_graph fixes the batch) of at "
                                      f"most {self.table.shape[1]} pages (the buffers given at construction)")
            max_pages = self.table.shape[1]
        cols = torch.arange(max_pages)[None, :]
        used = cols < pages[:, None]
        where = torch.where(used, starts[:-1, None] + cols, torch.zeros_like(cols))
        if int(starts[-1]) == 0:
            table = torch.zeros(batch, max_pages, dtype=torch.int32, device=self.device)
        else:
            table = torch.as_tensor(indices, device=self.device)[where.to(self.device)].to(torch.int32)
            table = table.masked_fill(~used.to(self.device), 0)
        lengths = lengths.to(device=self.device, dtype=torch.int32)
        if self.fixed:
            self.table.copy_(table)
            self.lengths.copy_(lengths)
        else:
            self.table, self.lengths = table, lengths
        return batch, max_pages


class _PagedWrapper:
    """What the paged wrappers share: the page table, attune's BatchDecode
    plan over it, and run()'s checks and returns."""

    def __init__(self, float_workspace_buffer, kv_layout, use_cuda_graph, fixed_batch, indices_buffer, jit_args,
                 max_pages_per_request):
        _check_backend(jit_args)
        if kv_layout not in ("NHD", "HND"):
            raise InvalidArgument(f"kv_layout: got {kv_layout!r}; expected 'NHD' or 'HND'")
        self._layout = kv_layout
        self.device = float_workspace_buffer.device
        self._use_cuda_graph = bool(use_cuda_graph)
        width = None
        if self._use_cuda_graph:
            width = max_pages_per_request if max_pages_per_request is not None else len(indices_buffer)
        self._pages = _PageTable(self.device, fixed_batch if use_cuda_graph else None, width)
        self._decode = _serving.BatchDecode(workspace=float_workspace_buffer, device=self.device)
        self._request = None  # BatchDecode.plan's arguments but the pool's
        self._planned = None  # ... and with the pool's, as last planned
        self._last = None  # ((num_pages, k strides, v strides), sinks or not) of the last run
        self._views = None  # q's and out's shapes as BatchDecode takes them
        self._window_left = -1
        # run()'s float scales of fp8 inputs (q, k, v), where the kernels read
        # them; the host copy says what the buffer holds.
        self._scales = torch.ones(3, dtype=torch.float32, device=self.device)
        self._scales_held = [1.0, 1.0, 1.0]

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def _plan(self, views, **request):
        self._views, self._request = views, request
        if self._last is not None:
            self._replan(*self._last)

    def _replan(self, pool, sinks):
        num_pages, k_strides, v_strides = pool
        full = dict(self._request, num_pages=num_pages, k_strides=k_strides, v_strides=v_strides, sinks=sinks)
        if full != self._planned:
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                # Planning allocates and copies: not inside a CUDA graph.
                raise InvalidArgument(
                    "run() under CUDA-graph capture needs a plan for this KV pool, which FlashInfer's plan() does "
                    "not receive: run once before capturing (a warm-up run, as SGLang and vLLM do), with the "
                    "same pool")
            self._decode.plan(**full)
            self._planned = full

    def _descales(self, scales):
        """run()'s (q_scale, k_scale, v_scale) as BatchDecode's descales:
        FlashInfer's scales are the same factors (value = stored x scale).
        Scales other than 1 of 16-bit inputs are refused, as before fp8."""
        fp8_q = self._request["dtype"] in _fp8.DTYPES
        fp8_kv = fp8_q or self._request.get("kv_dtype") is not None
        out = []
        for i, (name, value, applies) in enumerate(zip(("q_scale", "k_scale", "v_scale"), scales,
                                                       (fp8_q, fp8_kv, fp8_kv))):
            if value is None:
                out.append(None)
            elif not applies:
                _refuse(**{name: value})
                out.append(None)
            elif torch.is_tensor(value):
                if value.numel() != 1:
                    raise InvalidArgument(f"{name}: got shape {list(value.shape)}; expected a float or one element "
                                          "(one scale per tensor)")
                out.append(value.detach().reshape(1).to(device=self.device, dtype=torch.float32))
            else:
                value = float(value)
                if self._scales_held[i] != value:  # one small write when it changes, not one a run
                    self._scales[i].fill_(value)
                    self._scales_held[i] = value
                out.append(self._scales[i:i + 1])
        return out

    def _launch(self, q, paged_kv_cache, out, lse, return_lse, sinks, window_left, cu_seqlens_q=None,
                scales=(None, None, None)):
        """Runs the plan with FlashInfer's q [rows, Hq, D], out [rows, Hq,
        Dv] and lse [rows, Hq] (written in base 2); scales: run()'s
        (q_scale, k_scale, v_scale)."""
        if self._request is None:
            raise InvalidArgument("run before plan(); expected plan() first")
        if window_left is not None and int(window_left) != self._window_left:
            raise InvalidArgument(f"window_left: got {window_left}; expected None or the planned "
                                  f"{self._window_left} (attune compiles the window into the plan)")
        k, v = _pools(paged_kv_cache, self._layout)
        if k.stride(-1) != 1 or v.stride(-1) != 1:
            raise InvalidArgument("paged_kv_cache: the head dimension has a stride; expected it contiguous")
        self._last = ((k.shape[0], tuple(k.stride()[:3]), tuple(v.stride()[:3])), sinks is not None)
        self._replan(*self._last)
        q_view, out_view = self._views
        rows, hq = math.prod(q_view[:-2]), q_view[-2]  # [batch, q_len, ...] or packed [rows, ...]
        q_shape, out_shape, lse_shape = (rows, hq, q_view[-1]), (rows, hq, out_view[-1]), (rows, hq)
        if tuple(q.shape) != q_shape or q.dtype != self._request["dtype"]:
            raise InvalidArgument(f"q: got {list(q.shape)} {q.dtype}; expected {list(q_shape)} "
                                  f"{self._request['dtype']} (as planned)")
        q = q.contiguous()  # itself unless a strided view (then one copy)
        q_descale, k_descale, v_descale = self._descales(scales)
        out_dtype = torch.bfloat16 if q.dtype in _fp8.DTYPES else q.dtype
        out, lse = _outputs(out, lse, return_lse, out_shape, lse_shape, q, out_dtype)
        if sinks is not None:
            sinks = sinks.to(device=q.device, dtype=torch.float32).contiguous()
        self._decode.run(q.view(q_view), k, v, self._pages.table, self._pages.lengths, cu_seqlens_q=cu_seqlens_q,
                         out=out.view(out_view), lse=lse, sinks=sinks, q_descale=q_descale, k_descale=k_descale,
                         v_descale=v_descale)
        return _returned(out, lse, return_lse)


def _outputs(out, lse, return_lse, out_shape, lse_shape, like, out_dtype=None):
    """run()'s out (the caller's, or new; out_dtype None: like's) and lse
    (the caller's, new with return_lse, else None)."""
    out = _output(out, out_shape, like, "out", out_dtype)
    if return_lse or lse is not None:
        lse = _output(lse, lse_shape, like, "lse", torch.float32)
    return out, lse


def _returned(out, lse, return_lse):
    """FlashInfer's return of run(): out, or (out, lse) with the LSE turned
    to base 2 in place (attune writes natural logarithms)."""
    if lse is None:
        return out
    lse.mul_(LOG2E)
    return (out, lse) if return_lse else out


def _output(given, shape, like, name, dtype=None):
    dtype = dtype or like.dtype
    if given is None:
        return torch.empty(shape, dtype=dtype, device=like.device)
    if tuple(given.shape) != tuple(shape) or given.dtype != dtype or not given.is_contiguous():
        raise InvalidArgument(f"{name}: got {list(given.shape)} {given.dtype}; expected a contiguous {list(shape)} "
                              f"{dtype}")
    return given


def _common_plan(num_qo_heads, num_kv_heads, head_dim, head_dim_vo, causal, window_left, logits_soft_cap, sm_scale,
                 q_data_type, kv_data_type, o_data_type, pos_encoding_mode, fixed_split_size, disable_split_kv,
                 page_size=1):
    """BatchDecode.plan's arguments from FlashInfer's."""
    if pos_encoding_mode not in ("NONE", None):
        _unsupported(f"pos_encoding_mode={pos_encoding_mode!r}", "rotate q and k before attune (its kv_append "
                     "kernel does, in attune.BatchDecode with rotary_dim) and pass 'NONE'")
    dtype = _dtype(q_data_type, "q_data_type", torch.float16)
    kv_dtype = _dtype(kv_data_type, "kv_data_type", dtype)
    if kv_dtype != dtype and (kv_dtype not in _fp8.DTYPES or dtype in _fp8.DTYPES):
        _unsupported(f"kv_data_type={kv_data_type}", f"attune reads K and V in q's dtype ({dtype}), or an fp8 cache "
                     "(float8_e4m3fn, float8_e5m2) under float16/bfloat16 queries")
    written = torch.bfloat16 if dtype in _fp8.DTYPES else dtype  # fp8 queries: out in bfloat16
    if _dtype(o_data_type, "o_data_type", written) != written:
        _unsupported(f"o_data_type={o_data_type}", f"attune writes {written} for {dtype} queries")
    window_left = int(window_left if window_left is not None else -1)
    request = dict(num_qo_heads=int(num_qo_heads), num_kv_heads=int(num_kv_heads), head_dim=int(head_dim),
                   head_dim_v=int(head_dim_vo or head_dim), dtype=dtype, causal=bool(causal),
                   window_size=(window_left, 0 if causal else -1), softmax_scale=sm_scale,
                   softcap=float(logits_soft_cap or 0.0))
    if kv_dtype != dtype:
        request["kv_dtype"] = kv_dtype
    if disable_split_kv:
        request["num_splits"] = 1
    elif fixed_split_size is not None and int(fixed_split_size) > 0:
        request["split_size"] = int(fixed_split_size) * int(page_size)  # FlashInfer counts pages
    return request, window_left


class BatchDecodeWithPagedKVCacheWrapper(_PagedWrapper):
    """Decode attention over a paged KV cache, FlashInfer's class: one query
    row per request (q [batch, Hq, D]; or q_len_per_req rows, causal among
    themselves), planned once per step and run once per layer."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None, *, max_pages_per_request=None):
        """FlashInfer's arguments; use_tensor_cores and backend are accepted
        and left to attune's dispatcher. With use_cuda_graph the batch is
        fixed by paged_kv_last_page_len_buffer's length, and attune's block
        table [batch, max_pages_per_request] lives in a buffer made here
        (default width: paged_kv_indices_buffer's length, enough for any
        split of the pages; attune-only, since attune reads a dense table
        where FlashInfer reads the CSR one)."""
        fixed = None
        if use_cuda_graph:
            _require_buffers(paged_kv_indptr_buffer=paged_kv_indptr_buffer,
                             paged_kv_indices_buffer=paged_kv_indices_buffer,
                             paged_kv_last_page_len_buffer=paged_kv_last_page_len_buffer)
            fixed = len(paged_kv_last_page_len_buffer)
            if len(paged_kv_indptr_buffer) != fixed + 1:
                raise InvalidArgument(f"paged_kv_indptr_buffer: {len(paged_kv_indptr_buffer)} entries; expected "
                                      f"batch_size + 1 = {fixed + 1}")
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, fixed, paged_kv_indices_buffer, jit_args,
                         max_pages_per_request)
        self._use_tensor_cores = bool(use_tensor_cores)
        self._q_len = 1

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False,
             q_len_per_req=1, *, window_right=0):
        """FlashInfer's plan(): indptr [batch + 1], indices [indptr[-1]]
        and last_page_len [batch] (int32, host or device) name each
        request's pages. data_type is the older name of q_data_type."""
        _refuse(block_tables=block_tables, seq_lens=seq_lens)
        if window_right not in (0, -1):
            _unsupported(f"window_right={window_right}", "decode rows are the last positions: no key is right")
        q_len = int(q_len_per_req)
        if q_len < 1:
            raise InvalidArgument(f"q_len_per_req: got {q_len}; expected >= 1")
        request, self._window_left = _common_plan(
            num_qo_heads, num_kv_heads, head_dim, None, True, window_left, logits_soft_cap, sm_scale,
            data_type if data_type is not None else q_data_type, kv_data_type, o_data_type, pos_encoding_mode,
            fixed_split_size, disable_split_kv, page_size)
        batch, max_pages = self._pages.fill(indptr, indices, last_page_len, int(page_size))
        self._q_len = q_len
        hq = request["num_qo_heads"]
        self._plan(((batch, q_len, hq, request["head_dim"]), (batch, q_len, hq, request["head_dim_v"])),
                   batch_size=batch, page_size=int(page_size), max_pages=max_pages, max_seqlen_q=q_len,
                   lse_strides=(q_len * hq, hq, 1), **request)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None):
        """FlashInfer's run(): q [batch * q_len_per_req, Hq, D] -> out
        [batch * q_len_per_req, Hq, Dv], or (out, lse [rows, Hq] float32,
        base 2) with return_lse. sinks: float32 [Hq] sink logits. k_scale,
        v_scale (q_scale with fp8 queries): an fp8 input's per-tensor scale,
        a float or a one-element tensor (None: 1)."""
        _refuse_run(args, kv_cache_sf=kv_cache_sf,
                    skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        if q_len_per_req is not None and int(q_len_per_req) != self._q_len:
            raise InvalidArgument(f"q_len_per_req: got {q_len_per_req}; expected the planned {self._q_len}")
        return self._launch(q, paged_kv_cache, out, lse, return_lse, sinks, window_left,
                            scales=(q_scale, k_scale, v_scale))

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)


class BatchPrefillWithPagedKVCacheWrapper(_PagedWrapper):
    """Prefill (or append) attention over a paged KV cache, FlashInfer's
    class: packed queries q [qo_indptr[-1], Hq, D], each request's keys in
    its pages (the cache already holds the new ones)."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None, jit_kwargs=None, *,
                 max_pages_per_request=None):
        """FlashInfer's arguments (see BatchDecodeWithPagedKVCacheWrapper for
        use_cuda_graph and max_pages_per_request); with use_cuda_graph,
        qo_indptr_buf holds each plan's query offsets."""
        _refuse(custom_mask_buf=custom_mask_buf, mask_indptr_buf=mask_indptr_buf, jit_kwargs=jit_kwargs)
        fixed = None
        if use_cuda_graph:
            _require_buffers(qo_indptr_buf=qo_indptr_buf, paged_kv_indptr_buf=paged_kv_indptr_buf,
                             paged_kv_indices_buf=paged_kv_indices_buf,
                             paged_kv_last_page_len_buf=paged_kv_last_page_len_buf)
            fixed = len(qo_indptr_buf) - 1
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, fixed, paged_kv_indices_buf, jit_args,
                         max_pages_per_request)
        self._qo_indptr = qo_indptr_buf if use_cuda_graph else None

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
             head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False,
             pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None,
             token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None,
             max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False):
        """FlashInfer's plan(): qo_indptr [batch + 1] the query offsets, the
        pages as in the decode wrapper. causal aligns each request's last
        query with its last key."""
        _refuse(custom_mask=custom_mask, packed_custom_mask=packed_custom_mask, prefix_len_ptr=prefix_len_ptr,
                token_pos_in_items_ptr=token_pos_in_items_ptr, max_item_len_ptr=max_item_len_ptr,
                seq_lens=seq_lens, seq_lens_q=seq_lens_q, block_tables=block_tables)
        request, self._window_left = _common_plan(
            num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, causal, window_left, logits_soft_cap, sm_scale,
            q_data_type, kv_data_type, o_data_type, pos_encoding_mode, fixed_split_size, disable_split_kv, page_size)
        batch, max_pages = self._pages.fill(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len,
                                            int(page_size))
        starts = _indptr(qo_indptr, "qo_indptr", batch)
        rows = int(starts[-1])
        cu = starts.to(device=self.device, dtype=torch.int32)
        if self._qo_indptr is not None:
            self._qo_indptr.copy_(cu)
            cu = self._qo_indptr
        self._cu_q = cu
        max_q = int((starts[1:] - starts[:-1]).max()) if batch else 0
        hq = request["num_qo_heads"]
        self._plan(((rows, hq, request["head_dim"]), (rows, hq, request["head_dim_v"])), batch_size=batch,
                   page_size=int(page_size), max_pages=max_pages, total_q=rows, max_seqlen_q=max(max_q, 1),
                   lse_strides=(0, hq, 1), **request)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, kv_cache_sf=None,
            skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None):
        """FlashInfer's run(): q [qo_indptr[-1], Hq, D] -> out [rows, Hq,
        Dv], or (out, lse [rows, Hq] float32, base 2) with return_lse.
        k_scale, v_scale (q_scale): as in the decode wrapper's run()."""
        _refuse_run(args, kv_cache_sf=kv_cache_sf,
                    skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        return self._launch(q, paged_kv_cache, out, lse, return_lse, sinks, window_left,
                            cu_seqlens_q=getattr(self, "_cu_q", None), scales=(q_scale, k_scale, v_scale))

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)


class BatchPrefillWithRaggedKVCacheWrapper:
    """Prefill attention over packed ("ragged") keys and values, FlashInfer's
    class: q [qo_indptr[-1], Hq, D], k and v [kv_indptr[-1], Hkv, D]."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None,
                 jit_kwargs=None):
        _check_backend(jit_args)
        _refuse(custom_mask_buf=custom_mask_buf, mask_indptr_buf=mask_indptr_buf, jit_kwargs=jit_kwargs)
        if kv_layout != "NHD":
            _unsupported(f"kv_layout={kv_layout!r}", "ragged keys and values are [tokens, heads, dim] ('NHD')")
        if use_cuda_graph:
            _require_buffers(qo_indptr_buf=qo_indptr_buf, kv_indptr_buf=kv_indptr_buf)
        self._workspace = float_workspace_buffer
        self.device = float_workspace_buffer.device
        self._use_cuda_graph = bool(use_cuda_graph)
        self._fixed = (qo_indptr_buf, kv_indptr_buf) if use_cuda_graph else None
        self._plan = None

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
             use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
             rope_theta=None, q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True,
             prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None,
             fixed_split_size=None, disable_split_kv=False, seq_lens=None, seq_lens_q=None,
             max_token_per_sequence=None, max_sequence_kv=None, v_indptr=None, o_indptr=None):
        """FlashInfer's plan(): qo_indptr and kv_indptr [batch + 1] the
        query and key offsets of each request."""
        _refuse(custom_mask=custom_mask, packed_custom_mask=packed_custom_mask, prefix_len_ptr=prefix_len_ptr,
                token_pos_in_items_ptr=token_pos_in_items_ptr, max_item_len_ptr=max_item_len_ptr,
                seq_lens=seq_lens, seq_lens_q=seq_lens_q, v_indptr=v_indptr, o_indptr=o_indptr)
        request, _ = _common_plan(num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, causal, window_left,
                                  logits_soft_cap, sm_scale, q_data_type, kv_data_type, o_data_type,
                                  pos_encoding_mode, None, False)
        if request["dtype"] in _fp8.DTYPES or "kv_dtype" in request:
            _unsupported(f"q_data_type={q_data_type}, kv_data_type={kv_data_type}", "the ragged wrapper takes "
                         "float16/bfloat16; fp8 runs in the paged wrappers and attune.flash_attn_varlen_func")
        q_starts = _indptr(qo_indptr, "qo_indptr")
        batch = len(q_starts) - 1
        k_starts = _indptr(kv_indptr, "kv_indptr", batch)
        cu = [x.to(device=self.device, dtype=torch.int32) for x in (q_starts, k_starts)]
        if self._fixed is not None:
            for buf, x in zip(self._fixed, cu):
                buf.copy_(x)
            cu = list(self._fixed)
        hq, hkv, dk, dv = (request[n] for n in ("num_qo_heads", "num_kv_heads", "head_dim", "head_dim_v"))
        rows, keys = int(q_starts[-1]), int(k_starts[-1])
        longest = [int((x[1:] - x[:-1]).max()) if batch else 0 for x in (q_starts, k_starts)]
        s = engine.Shape(batch, rows, keys, hq, hkv, dk, dv, packed_q=True, packed_k=True)
        mask, window = engine.mask_of(request["causal"], request["window_size"])
        scale = engine.default_scale(dk) if sm_scale is None else float(sm_scale)
        spec = engine.Spec(scale=scale, mask=mask, window=window, softcap=request["softcap"])
        view = engine.View(0, (), (), "int32")
        lengths = engine.Lengths(cu_seqlens_q=view, cu_seqlens_k=view, max_seqlen_q=longest[0],
                                 max_seqlen_k=longest[1])
        strides = ((0, hq * dk, dk), (0, hkv * dk, dk), (0, hkv * dv, dv), (0, hq * dv, dv), (0, hq, 1))
        names = {torch.float16: "fp16", torch.bfloat16: "bf16"}
        backend = "cuda" if self.device.type == "cuda" else engine.cpu_backend()
        self._plan = engine.Plan(engine.runtime(backend, self.device.index or 0),
                                 engine.key_of(names[request["dtype"]], s, spec, strides, lengths, True),
                                 native.OP_FORWARD, lengths)
        if self._plan.workspace_bytes > self._workspace.numel() * self._workspace.element_size():
            self._workspace = torch.empty(self._plan.workspace_bytes, dtype=torch.uint8, device=self.device)
        self._cu = cu
        self._shapes = ((rows, hq, dk), (keys, hkv, dk), (keys, hkv, dv), (rows, hq, dv), (rows, hq))
        self._dtype = request["dtype"]

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, kv_cache_sf=None):
        """FlashInfer's run(): out [qo_indptr[-1], Hq, Dv], or (out, lse
        [rows, Hq] float32, base 2) with return_lse."""
        _refuse_run(args, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, o_scale=o_scale, kv_cache_sf=kv_cache_sf)
        if self._plan is None:
            raise InvalidArgument("run before plan(); expected plan() first")
        for name, t, shape in zip("qkv", (q, k, v), self._shapes):
            if tuple(t.shape) != shape or t.dtype != self._dtype:
                raise InvalidArgument(f"{name}: got {list(t.shape)} {t.dtype}; expected {list(shape)} {self._dtype} "
                                      "(as planned)")
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # themselves unless strided views
        out, lse = _outputs(out, lse, return_lse, self._shapes[3], self._shapes[4], q)
        _serving.launch(self._plan, self._workspace, q, k, v, out, lse, None, cu_seqlens_q=self._cu[0],
                        cu_seqlens_k=self._cu[1])
        return _returned(out, lse, return_lse)

    def run_return_lse(self, q, k, v, *args, **kwargs):
        return self.run(q, k, v, *args, return_lse=True, **kwargs)


# -- merging partial states (cascade attention) -----------------------------------------


def merge_state(v_a, s_a, v_b, s_b):
    """FlashInfer's merge_state: two partial results over disjoint keys, v
    [rows, H, D] with their LSE s [rows, H] (float32, base 2; -inf: an
    empty partial) -> (v, s) over both."""
    return _merge_base2([v_a, v_b], [s_a, s_b])


def merge_states(v, s):
    """FlashInfer's merge_states: v [rows, states, H, D] and s [rows,
    states, H] -> (v [rows, H, D], s [rows, H]), LSE in base 2."""
    if v.dim() != 4 or s.dim() != 3 or tuple(s.shape) != tuple(v.shape[:3]):
        raise InvalidArgument(f"v, s: got {list(v.shape)} and {list(s.shape)}; expected [rows, states, H, D] and "
                              "[rows, states, H]")
    return _merge_base2(list(v.unbind(1)), list(s.unbind(1)))


def merge_state_in_place(v, s, v_other, s_other, mask=None):
    """FlashInfer's merge_state_in_place: (v, s) becomes the merge of itself
    and (v_other, s_other), for the rows where mask (bool [rows]) is True
    (all rows without one)."""
    merged_v, merged_s = merge_state(v, s, v_other, s_other)
    if mask is not None:
        keep = ~mask.to(torch.bool)
        merged_v = torch.where(keep[:, None, None], v, merged_v)
        merged_s = torch.where(keep[:, None], s, merged_s)
    v.copy_(merged_v)
    s.copy_(merged_s)


def _merge_base2(vs, ss):
    """attune.merge_states over FlashInfer's layouts: its LSE is natural and
    [H, rows]."""
    natural = [(x.to(torch.float32) / LOG2E).t() for x in ss]
    out, lse = _merge(vs, natural)
    return out, lse.t() * LOG2E
