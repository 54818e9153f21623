"""The plan/run pair of a serving step (decode, and mixed prefill and decode
over a paged KV cache), as serving engines call attention: plan once per
batch shape (dispatch, split count, compile and load, the workspace), then
run once per layer, launching only: no allocation by attune, no copy, no
synchronization, so the run can be captured in a CUDA graph and replayed
while the lengths and block table change in place.

    dec = attune.BatchDecode()
    dec.plan(batch_size=64, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=16, max_pages=256,
             num_pages=pool_pages, dtype=torch.bfloat16)
    for layer in layers:
        out = dec.run(q, k_pool[layer], v_pool[layer], block_table, cache_seqlens)

A plan with append_kv=True also writes each step's new keys and values into
the pages first (flash_attn_with_kvcache's k=, v=, with rotary when planned
with rotary_dim): run(..., k=k_new, v=v_new, rotary_cos=cos, rotary_sin=sin)
launches kv_append, then the attention over the lengths after the append.

An fp8 KV cache (plan(kv_dtype=torch.float8_e4m3fn)) under 16-bit queries,
or fp8 queries and cache (plan(dtype=torch.float8_e4m3fn); out bfloat16):
each run takes the descales' addresses (run(k_descale=..., v_descale=...)),
laid out as planned (descale_strides), so runs still only launch.
"""
import ctypes

from . import _engine as engine
from . import _native as native
from ._errors import InvalidArgument


class BatchDecode:
    """Attention of few query rows per sequence (or packed query chunks)
    against a paged KV cache, planned once per batch shape."""

    def __init__(self, workspace=None, device=None):
        """workspace: a byte tensor to run in (None: allocated by plan() from
        torch's allocator, on `device`)."""
        self._workspace = workspace
        self._device = device
        self._plan = None

    def plan(self, *, batch_size, num_qo_heads, num_kv_heads, head_dim, page_size, max_pages, num_pages,
             dtype=None, head_dim_v=None, max_seqlen_q=1, total_q=None, max_seqlen_k=None, causal=True,
             window_size=(-1, -1), softmax_scale=None, softcap=0.0, num_splits=0, split_size=0, append_kv=False,
             rotary_dim=0, rotary_interleaved=True, seqlen_ro=None, sinks=False, k_strides=None, v_strides=None,
             lse_strides=None, kv_dtype=None, descale_strides=(0, 0)):
        """Plans runs over q [batch_size, max_seqlen_q, Hq, D] (or, with
        total_q, packed [total_q, Hq, D] and cu_seqlens_q), page pools
        [num_pages, page_size, Hkv, D] and block tables [batch_size,
        max_pages]; max_seqlen_k bounds the cache lengths (default: all
        pages). A run may use fewer sequences. num_splits or split_size (keys
        per split, batch invariant) choose the decode kernel's splits;
        otherwise attune decides (tuned or built in).

        append_kv: each run appends max_seqlen_q new keys and values per
        sequence at its cache_seqlens before the attention (dense queries
        only); rotary_dim > 0 rotates them and q (rotary tables
        [seqlen_ro, rotary_dim / 2], seqlen_ro default max_pages x
        page_size; rows rotated one position each when causal or local).
        The buffers the append writes (q rotated, the lengths after it) are
        allocated here, so runs still only launch.

        sinks: each run takes float32 [Hq] sink logits (docs/contract.md).
        k_strides, v_strides: the pools' (page, row, head) strides in
        elements, for pools that are views (a [pages, Hkv, page_size, D]
        "HND" pool transposed, or one half of a [pages, 2, ...] pool);
        default contiguous. lse_strides: where runs write softmax_lse, as
        (batch, row, head) strides (default [B, Hq, rows], packed [Hq,
        total_q]).

        kv_dtype: the pools' dtype when they are an fp8 cache
        (torch.float8_e4m3fn, float8_e5m2) under float16/bfloat16 queries
        (None: dtype). dtype itself may be fp8 (q and the pools in one fp8
        format): out is then bfloat16. descale_strides: the (batch, kv head)
        element strides of the descales runs pass (q_descale for fp8 q,
        k_descale, v_descale): (0, 0) one factor per tensor (vLLM's k_scale,
        FlashInfer's), (0, 1) one per kv head, (num_kv_heads, 1)
        FlashAttention-3's (batch, kv_heads) tensors."""
        import torch

        from . import _fp8

        dtype = dtype or torch.bfloat16
        names = {torch.float16: "fp16", torch.bfloat16: "bf16", **_fp8.DTYPES}
        if dtype not in names:
            raise InvalidArgument(f"dtype: got {dtype}; expected torch.float16, torch.bfloat16, "
                                  "torch.float8_e4m3fn or torch.float8_e5m2")
        kv_dtype = kv_dtype or dtype
        if kv_dtype != dtype and (kv_dtype not in _fp8.DTYPES or dtype in _fp8.DTYPES):
            raise InvalidArgument(f"kv_dtype: got {kv_dtype} under {dtype} queries; expected None, {dtype}, or an "
                                  "fp8 cache (torch.float8_e4m3fn, torch.float8_e5m2) under float16/bfloat16 queries")
        descale_strides = tuple(int(x) for x in descale_strides)
        if len(descale_strides) != 2 or min(descale_strides) < 0:
            raise InvalidArgument(f"descale_strides: got {descale_strides}; expected (batch, head) element strides "
                                  ">= 0")
        fp8 = dtype in _fp8.DTYPES or kv_dtype in _fp8.DTYPES
        device = torch.device(self._device) if self._device is not None else torch.device(
            "cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
        self._device = device
        dv = head_dim_v or head_dim
        packed = total_q is not None
        rows = int(total_q) if packed else int(max_seqlen_q)
        max_k = int(max_seqlen_k) if max_seqlen_k is not None else int(max_pages) * int(page_size)
        s = engine.Shape(int(batch_size), rows, int(max_pages) * int(page_size), int(num_qo_heads),
                         int(num_kv_heads), int(head_dim), int(dv), int(page_size), int(max_pages), int(num_pages),
                         packed_q=packed)
        hq, hkv = s.heads_q, s.heads_kv
        q_strides = (0, hq * head_dim, head_dim) if packed else (rows * hq * head_dim, hq * head_dim, head_dim)
        k_strides = tuple(k_strides) if k_strides is not None else (page_size * hkv * head_dim, hkv * head_dim,
                                                                     head_dim)
        v_strides = tuple(v_strides) if v_strides is not None else (page_size * hkv * dv, hkv * dv, dv)
        if packed:
            o_strides, lse_default = (0, hq * dv, dv), (0, 1, rows)
        else:
            o_strides, lse_default = (rows * hq * dv, hq * dv, dv), (hq * rows, 1, rows)
        lse_strides = tuple(lse_strides) if lse_strides is not None else lse_default
        mask, window = engine.mask_of(causal, window_size)
        scale = engine.default_scale(head_dim) if softmax_scale is None else float(softmax_scale)
        spec = engine.Spec(scale=scale, mask=mask, window=window, softcap=float(softcap), has_sinks=bool(sinks),
                           descale_strides=descale_strides if fp8 else (0, 0))
        lengths = engine.Lengths(cu_seqlens_q=engine.View(0, (), (), "int32") if packed else None,
                                 seqlens_k=engine.View(0, (), (), "int32"),
                                 block_table=engine.View(0, (), (), "int32"),
                                 max_seqlen_q=int(max_seqlen_q), max_seqlen_k=max_k)
        storage = engine.storage_name(names[dtype], names[kv_dtype])
        key = engine.key_of(storage, s, spec, (q_strides, k_strides, v_strides, o_strides, lse_strides), lengths,
                            True)
        backend = "cuda" if device.type == "cuda" else engine.cpu_backend()
        op = native.OP_FORWARD if (packed and num_splits == 0 and split_size == 0) else native.OP_DECODE
        self._plan = engine.Plan(engine.runtime(backend, device.index or 0), key, op, lengths,
                                 splits=int(num_splits), split_size=int(split_size))
        self._shapes = ((rows, hq, head_dim) if packed else (s.batch, rows, hq, head_dim),
                        (int(num_pages), int(page_size), hkv, head_dim), (int(num_pages), int(page_size), hkv, dv))
        self._pool_strides = (k_strides, v_strides)
        self._out_shape = (rows, hq, dv) if packed else (s.batch, rows, hq, dv)
        self._lse_shape = (hq, rows) if packed else (s.batch, hq, rows)
        self._dtype, self._packed, self._plan_sinks = dtype, packed, bool(sinks)
        self._kv_dtype = kv_dtype
        self._out_dtype = torch.bfloat16 if dtype in _fp8.DTYPES else dtype
        # The descales' layout and whether q has one; None: no fp8 input.
        self._descales = (descale_strides, hkv, dtype in _fp8.DTYPES) if fp8 else None
        self._pages = (s.batch, s.max_pages, s.page_size, s.num_pages)
        self._append = None
        if append_kv:
            if packed:
                raise InvalidArgument("append_kv: got a packed plan (total_q); expected dense queries [batch_size, "
                                      "max_seqlen_q, Hq, D], each step appending max_seqlen_q keys per sequence")
            if fp8:
                raise InvalidArgument(f"append_kv: got it with a {kv_dtype} cache; expected a float16/bfloat16 "
                                      "cache (kv_append writes 16-bit caches; write the quantized keys into the fp8 "
                                      "pages yourself)")
            self._append = _AppendPlan(self._plan.runtime, names[dtype], s, rows, int(rotary_dim),
                                       bool(rotary_interleaved), seqlen_ro, q_per_row=bool(causal) or
                                       tuple(window) != (-1, -1), device=device, dtype=dtype)
        need = self._plan.workspace_bytes
        if need and (self._workspace is None or self._workspace.numel() * self._workspace.element_size() < need):
            self._workspace = torch.empty(need, dtype=torch.uint8, device=device)
        return self

    def check_bounds(self, synchronize=True):
        """After runs with lengths in GPU memory: raises InvalidArgument when
        one of them was given a cache length past its block-table row or a
        page outside the pool (the kernels clamp them, so nothing outside the
        pool is read, but that run's output is wrong), and clears the
        report. synchronize waits for the current stream first, so the runs
        launched so far are counted."""
        import torch

        from . import _native
        if synchronize and self._device is not None and torch.device(self._device).type == "cuda":
            torch.cuda.current_stream(self._device).synchronize()
        _native.check_bounds()

    @property
    def description(self):
        """What the plan runs: kernel, variant, splits, workspace, and why."""
        return self._plan.description if self._plan else "not planned"

    def run(self, q, k_cache, v_cache, block_table, cache_seqlens, cu_seqlens_q=None, out=None, lse=None,
            batch=None, k=None, v=None, rotary_cos=None, rotary_sin=None, sinks=None, q_descale=None,
            k_descale=None, v_descale=None):
        """Launches the plan on the current stream: out [shape of q with
        head_dim_v] (written into `out` when given), and softmax_lse into
        `lse` when given. block_table int32 [batch_size, max_pages],
        cache_seqlens int32 [batch_size], cu_seqlens_q int32 [batch_size + 1]
        (packed plans), all on the plan's device; batch: the sequences of
        this run (default: the plan's). A plan with append_kv takes k and v
        [batch_size, max_seqlen_q, Hkv, D] (and the rotary tables when
        planned with rotary_dim) and appends them first; cache_seqlens stays
        as given (the caller advances it). sinks: float32 [Hq] on the plan's
        device (a plan with sinks). q_descale (a plan with fp8 queries),
        k_descale, v_descale (fp8 pools): float32 descales on the plan's
        device laid out as planned (descale_strides); None: 1. out is
        bfloat16 for fp8 queries."""
        import torch

        if self._plan is None:
            raise InvalidArgument("BatchDecode.run before plan(); expected plan() first")
        for name, t, shape, strides, dtype in (
                ("q", q, self._shapes[0], None, self._dtype),
                ("k_cache", k_cache, self._shapes[1], self._pool_strides[0], self._kv_dtype),
                ("v_cache", v_cache, self._shapes[2], self._pool_strides[1], self._kv_dtype)):
            laid_out = t.is_contiguous() if strides is None else tuple(t.stride()) == (*strides, 1)
            if tuple(t.shape) != shape or t.dtype != dtype or not laid_out:
                layout = "contiguous" if strides is None else f"strides {[*strides, 1]}"
                raise InvalidArgument(f"{name}: got {list(t.shape)} {t.dtype} strides {list(t.stride())}; expected "
                                      f"{list(shape)} {dtype} {layout} (as planned)")
        planned_sinks = self._plan_sinks
        if (sinks is None) == planned_sinks or (sinks is not None and (
                sinks.dtype != torch.float32 or tuple(sinks.shape) != (self._shapes[0][-2],))):
            got = "None" if sinks is None else f"{list(sinks.shape)} {sinks.dtype}"
            want = f"float32 [{self._shapes[0][-2]}] (planned with sinks)" if planned_sinks else \
                "None (a plan without sinks; plan(sinks=True) for them)"
            raise InvalidArgument(f"sinks: got {got}; expected {want}")
        if self._packed and cu_seqlens_q is None:
            raise InvalidArgument("cu_seqlens_q: got None; expected int32 [batch_size + 1] (a packed plan)")
        for name, t in (("block_table", block_table), ("cache_seqlens", cache_seqlens),
                        ("cu_seqlens_q", cu_seqlens_q)):
            if t is not None and (t.dtype != torch.int32 or not t.is_contiguous()):
                raise InvalidArgument(f"{name}: got {t.dtype}; expected contiguous int32")
        batch_size, max_pages, page_size, num_pages = self._pages
        rows = batch_size if batch is None else int(batch)
        if block_table.dim() != 2 or block_table.shape[1] != max_pages or block_table.shape[0] < rows:
            raise InvalidArgument(f"block_table: got {list(block_table.shape)}; expected [{rows}, {max_pages}] "
                                  "(the run's sequences x the planned max_pages)")
        if cache_seqlens.dim() != 1 or cache_seqlens.shape[0] < rows:
            raise InvalidArgument(f"cache_seqlens: got {list(cache_seqlens.shape)}; expected [{rows}]")
        descales = self._check_descales(q_descale, k_descale, v_descale, rows, torch)
        if (k is not None or v is not None) and self._append is None:
            raise InvalidArgument("k, v: got new keys for a plan without append_kv; expected plan(append_kv=True)")
        appended = self._append.new_keys if self._append is not None else 0
        if block_table.device.type == "cpu" and cache_seqlens.device.type == "cpu":
            # Host lengths are checked here; lengths in GPU memory are clamped by the kernels.
            engine.check_pages(cache_seqlens[:rows].numpy() + appended, block_table[:rows].numpy(), page_size,
                               num_pages, names=("cache_seqlens + new keys" if appended else "cache_seqlens",
                                                 "block_table"))
        if self._append is not None:
            q, cache_seqlens = self._append.run(q, k_cache, v_cache, k, v, block_table, cache_seqlens, rotary_cos,
                                                rotary_sin, rows)
        if out is None:
            out = torch.empty(self._out_shape, dtype=self._out_dtype, device=q.device)
        launch(self._plan, self._workspace, q, k_cache, v_cache, out, lse, sinks, cu_seqlens_q=cu_seqlens_q,
               seqlens_k=cache_seqlens, block_table=block_table, batch=batch, descales=descales)
        return out

    def _check_descales(self, q_descale, k_descale, v_descale, rows, torch):
        """The run's descales (None where not given) after checks that read
        no values: contiguous float32 on the plan's device, holding every
        factor the planned layout addresses for `rows` sequences."""
        given = (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale))
        if self._descales is None:
            for name, t in given:
                if t is not None:
                    raise InvalidArgument(f"{name}: got a descale for a plan without fp8 inputs; expected None "
                                          "(plan(dtype=... or kv_dtype=torch.float8_e4m3fn) for fp8)")
            return None
        (batch_stride, head_stride), hkv, fp8_q = self._descales
        extent = (max(rows, 1) - 1) * batch_stride + (hkv - 1) * head_stride + 1
        device = torch.device(self._device)
        if q_descale is not None and not fp8_q:
            raise InvalidArgument(f"q_descale: got one for {self._dtype} queries; expected None (q_descale is for "
                                  "fp8 queries; an fp8 cache takes k_descale and v_descale)")
        for name, t in given:
            if t is not None and (not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or
                                  not t.is_contiguous() or t.numel() < extent or t.device.type != device.type or
                                  (device.index is not None and t.device.index != device.index)):
                got = type(t).__name__ if not isinstance(t, torch.Tensor) else \
                    f"{t.dtype} with {t.numel()} elements on {t.device}"
                raise InvalidArgument(f"{name}: got {got}; expected a contiguous float32 tensor on {device} holding "
                                      f"the {extent} elements that the planned descale_strides "
                                      f"{(batch_stride, head_stride)} address for {rows} sequences")
        return q_descale, k_descale, v_descale


def launch(plan, workspace, q, k, v, out, lse, sinks, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None,
           block_table=None, batch=None, descales=None):
    """One run of a plan on the current stream of q's device: the tensors'
    addresses and nothing else (no check, allocation or copy). lse, sinks,
    the length arrays and descales ((q, k, v) descales of fp8 inputs, each
    may be None) may be None; batch: the run's sequences (None: the
    plan's)."""
    from . import _torch
    ptr = (lambda t: t.data_ptr() if t is not None else None)
    buffers = native.Buffers(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), ptr(lse), None, None, None,
                             None, ptr(sinks), None, None, None, *(ptr(t) for t in (descales or (None,) * 3)))
    lengths = [ptr(t) for t in (cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table)]
    plan.run_pointers(buffers, lengths, workspace.data_ptr() if plan.workspace_bytes else None,
                      _torch.ARRAYS.stream(q), batch=-1 if batch is None else int(batch))


class _AppendPlan:
    """The kv_append launch of a BatchDecode plan: its problem fixed at plan
    time, its outputs (q rotated, the lengths after the append) allocated
    once, the kernel loaded (an empty append), so runs only launch."""

    def __init__(self, runtime, dtype_name, s, rows, rotary_dim, interleaved, seqlen_ro, q_per_row, device, dtype):
        import torch

        hq, hkv, dk, dv = s.heads_q, s.heads_kv, s.head_dim_k, s.head_dim_v
        page = s.page_size
        self.new_keys, self.rotary = rows, rotary_dim > 0
        p = native.AppendProblem()
        p.dtype = native.DTYPE_FP16 if dtype_name == "fp16" else native.DTYPE_BF16
        p.batch, p.seqlen_new, p.heads_kv, p.head_dim_k, p.head_dim_v = s.batch, rows, hkv, dk, dv
        p.k_new_strides[:] = (rows * hkv * dk, hkv * dk, dk)
        p.v_new_strides[:] = (rows * hkv * dv, hkv * dv, dv)
        p.page_size, p.num_pages, p.max_pages = page, s.num_pages, s.max_pages
        p.k_cache_strides[:] = (page * hkv * dk, hkv * dk, dk)
        p.v_cache_strides[:] = (page * hkv * dv, hkv * dv, dv)
        self.lengths = torch.empty(s.batch, dtype=torch.int32, device=device)
        self.q_rot = None
        self.table_shape = None
        if self.rotary:
            p.rotary_dim, p.rotary_interleaved = rotary_dim, int(interleaved)
            p.seqlen_ro = int(seqlen_ro) if seqlen_ro is not None else s.max_pages * page
            p.seqlen_q, p.heads_q, p.q_per_row = rows, hq, int(q_per_row)
            p.q_strides[:] = p.q_rot_strides[:] = (rows * hq * dk, hq * dk, dk)
            self.q_rot = torch.empty(s.batch, rows, hq, dk, dtype=dtype, device=device)
            self.table_shape = (p.seqlen_ro, rotary_dim // 2)
        self.kv_shapes = ((s.batch, rows, hkv, dk), (s.batch, rows, hkv, dv))
        self.dtype, self.runtime, self.problem = dtype, runtime, p
        # An empty append validates the problem and loads the kernel now.
        empty = native.AppendProblem.from_buffer_copy(p)
        empty.batch = 0
        self._launch(empty, native.AppendBuffers(), None)

    def _launch(self, problem, buffers, stream):
        native.check(native.lib().attune_append_kv(self.runtime.handle, ctypes.byref(problem), ctypes.byref(buffers),
                                                   stream))

    def run(self, q, k_cache, v_cache, k, v, block_table, cache_seqlens, cos, sin, rows):
        """Launches the append; returns (q for the attention, its lengths)."""
        if k is None or v is None:
            raise InvalidArgument("k, v: got None; expected the step's new keys and values (planned append_kv)")
        for name, t, shape in (("k", k, self.kv_shapes[0]), ("v", v, self.kv_shapes[1])):
            if tuple(t.shape) != shape or t.dtype != self.dtype or not t.is_contiguous():
                raise InvalidArgument(f"{name}: got {list(t.shape)} {t.dtype}; expected a contiguous {list(shape)} "
                                      f"{self.dtype} (as planned)")
        if self.rotary:
            for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
                if t is None or tuple(t.shape) != self.table_shape or t.dtype != self.dtype or \
                        not t.is_contiguous():
                    got = "None" if t is None else f"{list(t.shape)} {t.dtype}"
                    raise InvalidArgument(f"{name}: got {got}; expected a contiguous {list(self.table_shape)} "
                                          f"{self.dtype} (as planned with rotary_dim)")
        elif cos is not None or sin is not None:
            raise InvalidArgument("rotary_cos, rotary_sin: got tables for a plan without rotary_dim; expected "
                                  "plan(rotary_dim=...)")
        problem = self.problem
        if rows != problem.batch:
            problem = native.AppendProblem.from_buffer_copy(self.problem)
            problem.batch = rows
        ptr = (lambda t: t.data_ptr() if t is not None else None)
        buffers = native.AppendBuffers(k.data_ptr(), v.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                                       q.data_ptr() if self.rotary else None, ptr(self.q_rot), ptr(cos), ptr(sin),
                                       cache_seqlens.data_ptr(), self.lengths.data_ptr(), block_table.data_ptr())
        from . import _torch
        self._launch(problem, buffers, _torch.ARRAYS.stream(q))
        return (self.q_rot if self.rotary else q), self.lengths
