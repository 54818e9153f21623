"""The calls behind every entry point, over an array adapter (torch or
NumPy): forward (dense, varlen, over a KV cache) and backward, on a kernel
backend (cuda, emu) through plans, or on the fp64 reference for float32 and
float64 CPU arrays.
"""
import ctypes

from . import _engine as engine
from . import _native as native
from . import _record
from ._engine import _require
from ._errors import InvalidArgument


class Arrays:
    """What the calls need of an array library; torch and NumPy adapters
    implement it."""

    def view(self, x): ...  # engine.View of x

    def ptr(self, x): ...  # x's address

    def fast_key(self, q, k, v, lengths, alibi, sinks): ...  # what a prepared call's checks read, or None

    def empty(self, shape, dtype, like): ...  # a new contiguous array on like's device (dtype None: like's)

    def float64(self, x): ...  # a contiguous float64 copy on the CPU

    def float32(self, x): ...  # a contiguous float32 array

    def cast(self, x, dtype_of): ...  # x as the dtype of dtype_of

    def int32(self, x): ...  # x as a contiguous int32 array (itself when it is one)

    def stream(self, like): ...  # the current stream of like's device (0 on the CPU)

    def gather_pages(self, cache, block_table, page_size): ...  # [B, max_pages * page_size, H, D]

    def host(self, x): ...  # x as a NumPy array when it lives in host memory, else None (no copy from a GPU)


def _lengths(arrays, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None, block_table=None, max_seqlen_q=0,
             max_seqlen_k=0):
    """int32 views of the length arrays; the arrays themselves are returned
    too, to keep converted copies alive through the call."""
    keep = []
    views = {}
    for name, x in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k), ("seqlens_k", seqlens_k),
                    ("block_table", block_table)):
        if x is None:
            views[name] = None
            continue
        x = arrays.int32(x)
        keep.append(x)
        views[name] = arrays.view(x)
    return engine.Lengths(**views, max_seqlen_q=int(max_seqlen_q), max_seqlen_k=int(max_seqlen_k)), keep


def _out_layout(s):
    """O and LSE shapes and their [batch, seq, head] strides (contiguous)."""
    if s.packed_q:
        o_shape = (s.seqlen_q, s.heads_q, s.head_dim_v)
        lse_shape = (s.heads_q, s.seqlen_q)
        return o_shape, (0, s.heads_q * s.head_dim_v, s.head_dim_v), lse_shape, (0, 1, s.seqlen_q)
    o_shape = (s.batch, s.seqlen_q, s.heads_q, s.head_dim_v)
    lse_shape = (s.batch, s.heads_q, s.seqlen_q)
    return (o_shape, (s.seqlen_q * s.heads_q * s.head_dim_v, s.heads_q * s.head_dim_v, s.head_dim_v), lse_shape,
            (s.heads_q * s.seqlen_q, 1, s.seqlen_q))


def _bounds(lengths, s):
    """Plan bounds: the caller's, else the array extents (safe upper bounds)."""
    if lengths.cu_seqlens_q is not None and lengths.max_seqlen_q <= 0:
        lengths.max_seqlen_q = s.seqlen_q
    if not (lengths.cu_seqlens_k is not None or lengths.seqlens_k is not None):
        return
    if lengths.max_seqlen_k <= 0:
        lengths.max_seqlen_k = s.seqlen_k


class _Entry:
    """What repeated calls of one shape reuse: the plan, the output layouts
    and the recorded problem, so a call with the same shapes, strides,
    dtypes and devices skips every check the first one made (but the
    contents of a block table, checked at every run where they are on the
    host: pages is (page_size, num_pages) of a paged cache, else None)."""
    __slots__ = ("plan", "o_shape", "lse_shape", "problem", "pages", "o_dtype")

    def __init__(self, plan, o_shape, lse_shape, problem, pages=None, o_dtype=None):
        self.plan, self.o_shape, self.lse_shape, self.problem = plan, o_shape, lse_shape, problem
        self.pages = pages
        self.o_dtype = o_dtype  # None: q's dtype; "bf16" for fp8 queries


_entries = {}  # fast key -> _Entry


def forward(arrays, q, k, v, spec, *, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None, block_table=None,
            max_seqlen_q=0, max_seqlen_k=0, alibi_slopes=None, sinks=None, num_splits=0, decode=False,
            rng_state=None, descales=None):
    """O and LSE of one call: O shaped like q with v's head dim, LSE
    [B, Hq, Sq] (packed [Hq, Tq]), float32 (float64 for float64 inputs).
    decode (or num_splits > 0): the split-KV decode kernel; a forward over a
    paged cache picks between the two itself (Runtime::plan). sinks: float32
    [Hq] sink logits (spec.has_sinks). rng_state: with spec.dropout_p, the
    dropout's {seed, offset}, an int64 [2] array on q's device that the
    kernels read at the run (None: seed 0, offset 0). descales: the fp8 inputs'
    (q, k, v) descale arrays, float32 on q's device laid out as
    spec.descale_strides says (each may be None: 1); None: none. fp8
    queries write O in bf16."""
    lengths_in = (cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table)
    fast = arrays.fast_key(q, k, v, lengths_in, alibi_slopes, sinks)
    if fast is not None:
        fast = (fast, spec, max_seqlen_q, max_seqlen_k, num_splits, decode)
        entry = _entries.get(fast)
        if entry is not None and entry.plan.alive():
            return _run(arrays, entry, q, k, v, lengths_in, alibi_slopes, sinks, rng_state, descales)
    lengths, keep = _lengths(arrays, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, max_seqlen_q, max_seqlen_k)
    qv, kv, vv = arrays.view(q), arrays.view(k), arrays.view(v)
    s = engine.shape_of(qv, kv, vv, lengths)
    _bounds(lengths, s)
    backend, device = engine.backend_of(qv)
    o_shape, o_strides, lse_shape, lse_strides = _out_layout(s)
    decode = decode or num_splits > 0
    problem = _record.problem_of("decode" if decode else "fwd",
                                 engine.storage_name(qv.dtype, engine.kv_storage(qv.dtype, kv.dtype)), s, spec, lengths)
    if backend == "reference":
        _record.add(problem)
        return _reference_forward(arrays, q, k, v, spec, s, lengths, keep, (alibi_slopes, sinks, rng_state),
                                  o_shape, lse_shape, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table)
    key = engine.problem_key(qv.dtype, s, spec, qv, kv, vv, o_strides, lse_strides, lengths, lengths.any())
    op = native.OP_DECODE if decode else native.OP_FORWARD
    plan = engine.plan_for(backend, device, key, op, lengths, splits=num_splits, alibi=alibi_slopes is not None)
    o_dtype = "bf16" if qv.dtype in engine.FP8_DTYPES else None
    entry = _Entry(plan, o_shape, lse_shape, problem, (s.page_size, s.num_pages) if s.page_size else None, o_dtype)
    if fast is not None:
        _entries[fast] = entry
    converted = tuple(arrays.int32(x) if x is not None else None for x in lengths_in)
    slopes = arrays.float32(alibi_slopes) if alibi_slopes is not None else None
    sinks = arrays.float32(sinks) if sinks is not None else None
    out = _run(arrays, entry, q, k, v, converted, slopes, sinks, rng_state, descales)
    del keep
    return out


def _run(arrays, entry, q, k, v, lengths, alibi_slopes, sinks, rng_state=None, descales=None):
    """One run of a prepared call: outputs allocated by the caller's
    library, then the plan's launches on the current stream."""
    if entry.pages is not None:
        table = arrays.host(lengths[3])
        if table is not None:  # lengths in GPU memory: the kernels clamp them
            lens = arrays.host(lengths[2]) if lengths[2] is not None else None
            # flash-attn's name for the lengths: cache_seqlens, or the
            # differences of cu_seqlens_k (varlen over pages).
            named = "cache_seqlens" if lengths[1] is None else "seqlens_k (from cu_seqlens_k)"
            engine.check_pages(lens, table, *entry.pages, names=(named, "block_table"))
    if _record.active():
        _record.add(entry.problem)
    ptr = arrays.ptr
    o = arrays.empty(entry.o_shape, entry.o_dtype, q)
    lse = arrays.empty(entry.lse_shape, "fp32", q)
    plan = entry.plan
    buffers = native.Buffers(ptr(q), ptr(k), ptr(v), ptr(o), ptr(lse), None, None, None, None,
                             ptr(sinks) if sinks is not None else None,
                             ptr(alibi_slopes) if alibi_slopes is not None else None, None,
                             ptr(rng_state) if rng_state is not None else None,
                             *((ptr(x) if x is not None else None) for x in (descales or (None,) * 3)))
    workspace = _workspace(arrays, plan, q) if plan.workspace_bytes else None
    length_ptrs = None
    if lengths[0] is not None or lengths[1] is not None or lengths[2] is not None or lengths[3] is not None:
        length_ptrs = [ptr(x) if x is not None else None for x in lengths]
    plan.run_pointers(buffers, length_ptrs, ptr(workspace) if workspace is not None else None, arrays.stream(q))
    return o, lse


def backward(arrays, dout, q, k, v, out, lse, spec, *, cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None,
             max_seqlen_q=0, max_seqlen_k=0, alibi_slopes=None, sinks=None, deterministic=False, rng_state=None):
    """dQ, dK, dV (contiguous, shaped like q, k, v) of sum(dout * out), and
    dsink (float32 [Hq]; None without sinks). rng_state: the forward's
    (dropout: the backward regenerates its mask)."""
    lengths, keep = _lengths(arrays, cu_seqlens_q, cu_seqlens_k, seqlens_k, None, max_seqlen_q, max_seqlen_k)
    qv, kv, vv = arrays.view(q), arrays.view(k), arrays.view(v)
    s = engine.shape_of(qv, kv, vv, lengths)
    _bounds(lengths, s)
    fp8 = [(name, x.dtype) for name, x in (("q", qv), ("k", kv), ("v", vv)) if x.dtype in engine.FP8_DTYPES]
    if fp8:
        raise InvalidArgument(f"backward: got {fp8[0][0]} in {fp8[0][1]}; expected float16 or bfloat16 inputs (fp8 "
                              "inputs are forward only: attune's backward takes 16-bit q, k and v)")
    backend, device = engine.backend_of(qv)
    _record.note("bwd", qv.dtype, s, spec, lengths)
    if backend == "reference":
        return _reference_backward(arrays, dout, q, k, v, spec, s, keep, (alibi_slopes, sinks, rng_state),
                                   cu_seqlens_q, cu_seqlens_k, seqlens_k)
    o_shape, o_strides, lse_shape, lse_strides = _out_layout(s)
    ov, dov, lv = arrays.view(out), arrays.view(dout), arrays.view(lse)
    _require_contiguous(ov, o_shape, "out")
    _require_contiguous(dov, o_shape, "the gradient of out")
    _require_contiguous(lv, lse_shape, "softmax_lse")
    dq = arrays.empty(qv.shape, qv.dtype, q)
    dk = arrays.empty(kv.shape, qv.dtype, q)
    dv = arrays.empty(vv.shape, qv.dtype, q)
    # The gradients are written like q, k and v: the plan sees their (contiguous) strides.
    dqv, dkv, dvv = arrays.view(dq), arrays.view(dk), arrays.view(dv)
    _require(qv.strides == dqv.strides and kv.strides == dkv.strides and vv.strides == dvv.strides,
             "backward: q, k and v must be contiguous (the gradients are laid out like them)")
    key = engine.problem_key(qv.dtype, s, spec, qv, kv, vv, o_strides, lse_strides, lengths, lengths.any())
    plan = engine.plan_for(backend, device, key, native.OP_BACKWARD, lengths, deterministic=deterministic,
                           alibi=alibi_slopes is not None)
    alibi = arrays.view(alibi_slopes).ptr if alibi_slopes is not None else None
    dsink = arrays.empty((s.heads_q,), "fp32", q) if sinks is not None else None
    buffers = native.Buffers(qv.ptr, kv.ptr, vv.ptr, ov.ptr, lv.ptr, dov.ptr, dqv.ptr, dkv.ptr, dvv.ptr,
                             arrays.view(sinks).ptr if sinks is not None else None, alibi,
                             arrays.view(dsink).ptr if dsink is not None else None,
                             arrays.view(rng_state).ptr if rng_state is not None else None)
    workspace = _workspace(arrays, plan, q)
    plan.run(buffers, lengths, arrays.view(workspace).ptr if workspace is not None else None, arrays.stream(q))
    del keep
    return dq, dk, dv, dsink


def _require_contiguous(view, shape, name):
    _require(tuple(view.shape) == tuple(shape), f"{name}: got shape {list(view.shape)}; expected {list(shape)}")
    expected, step = [], 1
    for n in reversed(shape):
        expected.insert(0, step)
        step *= n
    _require(all(n == 1 or a == b for a, b, n in zip(view.strides, expected, shape)),
             f"{name}: strides {list(view.strides)}; expected contiguous {expected}")


def _workspace(arrays, plan, like):
    if plan.workspace_bytes == 0:
        return None
    # float32 elements: 16-byte aligned from any allocator attune's callers use
    return arrays.empty(((plan.workspace_bytes + 3) // 4,), "fp32", like)


# -- the fp64 reference (float32 and float64 CPU arrays) ------------------------------

def _host_lengths(arrays, lengths_arrays):
    out, keep = {}, []
    for name, x in lengths_arrays.items():
        if x is None:
            continue
        x = arrays.int32(x)
        keep.append(x)
        out[name] = arrays.view(x).ptr
    return out, keep


def _reference_problem(arrays, dtype, s, spec, q64, k64, v64, host, keep):
    qv, kv, vv = arrays.view(q64), arrays.view(k64), arrays.view(v64)
    lengths = engine.Lengths()
    o_shape, o_strides, lse_shape, lse_strides = _out_layout(s)
    key = engine.problem_key("bf16", s, spec, qv, kv, vv, o_strides, lse_strides, lengths, False)
    return engine.make_problem(key, host), (qv, kv, vv)


def _unpaged(arrays, k, v, s, block_table):
    """A paged cache gathered into [B, max_pages * page_size, H, D] (the
    reference reads contiguous caches)."""
    k = arrays.gather_pages(k, block_table, s.page_size)
    v = arrays.gather_pages(v, block_table, s.page_size)
    s.page_size = s.max_pages = s.num_pages = 0
    return k, v


class _ReferenceCall:
    """The fp64 reference's inputs: q, k, v (and more) as contiguous
    float64 copies, the length arrays, ALiBi slopes and sinks in host
    memory, and the C problem over them; the copies live as long as the
    call. modifiers: (alibi_slopes, sinks, rng_state), each may be None;
    rng_state (dropout's {seed, offset}, int64 [2] in host memory, as every
    reference call's arrays are) goes into the problem."""

    def __init__(self, arrays, s, spec, tensors, modifiers, cu_seqlens_q, cu_seqlens_k, seqlens_k):
        self.f64 = [arrays.float64(x) for x in tensors]
        host, self.keep = _host_lengths(arrays, {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                                                 "seqlens_k": seqlens_k})
        self.slopes, self.sinks = (arrays.float32(x) if x is not None else None for x in modifiers[:2])
        if self.slopes is not None:
            host["alibi_slopes"] = arrays.view(self.slopes).ptr
        if self.sinks is not None:
            host["sinks"] = arrays.view(self.sinks).ptr
        self.problem, self.views = _reference_problem(arrays, "fp64", s, spec, *self.f64[:3], host, self.keep)
        if modifiers[2] is not None:
            seed, offset = (int(x) & 0xFFFFFFFFFFFFFFFF for x in arrays.host(modifiers[2]).reshape(-1)[:2])
            self.problem.seed, self.problem.offset = seed, offset
        self.ptrs = [arrays.view(x).ptr for x in self.f64]


def _reference_forward(arrays, q, k, v, spec, s, lengths, keep, modifiers, o_shape, lse_shape, cu_seqlens_q,
                       cu_seqlens_k, seqlens_k, block_table):
    if block_table is not None:
        k, v = _unpaged(arrays, k, v, s, block_table)
    call = _ReferenceCall(arrays, s, spec, (q, k, v), modifiers, cu_seqlens_q, cu_seqlens_k, seqlens_k)
    o = arrays.empty(o_shape, "fp64", q)
    lse = arrays.empty(lse_shape, "fp64", q)
    native.check(native.lib().attune_reference_forward(ctypes.byref(call.problem), *call.ptrs,
                                                       arrays.view(o).ptr, arrays.view(lse).ptr))
    lse_dtype = q if arrays.view(q).dtype == "fp64" else "fp32"
    return arrays.cast(o, q), arrays.cast(lse, lse_dtype)


def _reference_backward(arrays, dout, q, k, v, spec, s, keep, modifiers, cu_seqlens_q, cu_seqlens_k, seqlens_k):
    call = _ReferenceCall(arrays, s, spec, (q, k, v, dout), modifiers, cu_seqlens_q, cu_seqlens_k, seqlens_k)
    grads = [arrays.empty(arrays.view(x).shape, "fp64", q) for x in call.f64[:3]]
    dsink = arrays.empty((s.heads_q,), "fp32", q) if call.sinks is not None else None
    if dsink is not None:
        call.problem.dsink = arrays.view(dsink).ptr
    native.check(native.lib().attune_reference_backward(ctypes.byref(call.problem), *call.ptrs,
                                                        *[arrays.view(g).ptr for g in grads]))
    return (*(arrays.cast(g, x) for g, x in zip(grads, (q, k, v))), dsink)


def explain(arrays, q, k, v, spec, *, op="fwd", cu_seqlens_q=None, cu_seqlens_k=None, seqlens_k=None,
            block_table=None, max_seqlen_q=0, max_seqlen_k=0, num_splits=0, deterministic=False):
    """(variant, rule, detail) of what a call would run."""
    lengths, keep = _lengths(arrays, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, max_seqlen_q, max_seqlen_k)
    qv, kv, vv = arrays.view(q), arrays.view(k), arrays.view(v)
    s = engine.shape_of(qv, kv, vv, lengths)
    backend, device = engine.backend_of(qv)
    if backend == "reference":
        return ("reference", "reference", f"{qv.dtype} arrays run on the fp64 reference")
    o_shape, o_strides, lse_shape, lse_strides = _out_layout(s)
    key = engine.problem_key(qv.dtype, s, spec, qv, kv, vv, o_strides, lse_strides, engine.Lengths(), False)
    host, keep2 = _host_lengths(arrays, {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                                         "seqlens_k": seqlens_k, "block_table": block_table})
    if qv.device == "cuda" and host:
        raise InvalidArgument("explain: length arrays on a CUDA device; expected them on the CPU (explain reads them)")
    problem = engine.make_problem(key, host)
    rt = engine.runtime(backend, device)
    lib = native.lib()
    if op == "decode":
        text = native.checked_text(lib.attune_explain_decode(rt.handle, ctypes.byref(problem), num_splits))
    elif op == "bwd":
        text = native.checked_text(lib.attune_explain_backward(rt.handle, ctypes.byref(problem),
                                                               1 if deterministic else 0))
    else:
        text = native.checked_text(lib.attune_explain(rt.handle, ctypes.byref(problem)))
    del keep, keep2
    variant, _, rest = text.partition(" (")
    rule, _, detail = rest.rstrip(")").partition(": ")
    return variant, rule, detail
