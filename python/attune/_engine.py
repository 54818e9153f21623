"""Attention calls over array adapters (torch tensors, NumPy arrays): the
problem built from shapes and strides, a runtime per backend and device,
plans cached per problem, and the fp64 reference for float32 and float64.

Every call is a plan and a run (runtime/plan.h): the plan is made once per
problem shape and cached, and the run launches on the caller's stream with
the length arrays and workspace the caller's allocator holds, so a CUDA call
allocates nothing through attune, copies nothing and never synchronizes.
"""
import ctypes
import math
import os
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from . import _native as native
from ._errors import InvalidArgument

KERNEL_DTYPES = ("fp16", "bf16")  # what the kernels store
FP8_DTYPES = ("e4m3", "e5m2")  # what the kernels also read (inputs only: their O is bf16)
REFERENCE_DTYPES = ("fp32", "fp64")  # what the fp64 reference takes (CPU only)
_DTYPE_ENUMS = {"fp16": native.DTYPE_FP16, "bf16": native.DTYPE_BF16, "e4m3": native.DTYPE_E4M3,
                "e5m2": native.DTYPE_E5M2}
_KV_INFIX = "-kv-"  # as core/dtype.cpp's storage_name spells an fp8 cache under 16-bit queries


def storage_name(dtype, kv_dtype=None):
    """A problem's dtype as the library names it (problem keys, tuning
    databases): q's dtype, or "bf16-kv-e4m3" for an fp8 KV cache under
    16-bit queries."""
    return dtype if kv_dtype in (None, dtype) else f"{dtype}{_KV_INFIX}{kv_dtype}"


def kv_storage(q_dtype, k_dtype):
    """K and V's dtype when it differs from q's (an fp8 cache), else None."""
    return k_dtype if k_dtype in FP8_DTYPES and k_dtype != q_dtype else None


def out_dtype(dtype):
    """The dtype O is written in: q's, or bf16 for fp8 queries."""
    return "bf16" if dtype in FP8_DTYPES else dtype


@dataclass(frozen=True)
class View:
    """What a call needs of an array: its address, shape, strides in
    elements, dtype name and device."""
    ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    device: str = "cpu"  # "cpu" or "cuda"
    index: int = 0  # CUDA device ordinal


class Spec(NamedTuple):
    """The options of an attention call that are not tensors (a tuple: cheap
    to make and hash on every call)."""
    scale: float
    mask: int = native.MASK_NONE
    window: tuple = (-1, -1)
    softcap: float = 0.0
    alibi_per_batch: bool = False  # slopes [B, Hq] rather than [Hq]
    has_alibi: bool = False
    has_sinks: bool = False  # a float32 sink logit per query head joins every row's softmax
    dropout_p: float = 0.0  # attention dropout (its seed and offset travel with each run, not the plan)
    # fp8 inputs: where each [b, kv_head] descale factor is, (batch, head)
    # strides in elements ((0, 0): one per tensor); the factors' addresses
    # travel with each run.
    descale_strides: tuple = (0, 0)


def mask_of(causal, window_size, top_left=False):
    """flash-attn's (causal, window_size) as attune's mask and window."""
    left, right = int(window_size[0]), int(window_size[1])
    if left < -1 or right < -1:
        raise InvalidArgument(f"window_size: got {window_size}; expected (left, right) with -1 for unbounded")
    if causal:
        if top_left:
            if (left, right) != (-1, -1):
                raise InvalidArgument("a top-left causal mask with a window; expected one of the two")
            return native.MASK_CAUSAL_TOP_LEFT, (-1, -1)
        if left == -1:
            return native.MASK_CAUSAL_BOTTOM_RIGHT, (-1, -1)
        return native.MASK_SLIDING_WINDOW, (left, 0)
    if (left, right) == (-1, -1):
        return native.MASK_NONE, (-1, -1)
    return native.MASK_SLIDING_WINDOW, (left, right)


# -- runtimes -------------------------------------------------------------------

_runtimes = {}
_plans = {}
_lock = threading.Lock()


class _Runtime:
    def __init__(self, backend, device, tuning_db):
        opts = native.RuntimeOptions()
        native.lib().attune_runtime_options_init(ctypes.byref(opts))
        opts.backend = backend.encode()
        opts.device = device
        if tuning_db is not None:
            opts.tuning_db = os.fspath(tuning_db).encode()
        handle = ctypes.c_void_p()
        native.check(native.lib().attune_runtime_create_with(ctypes.byref(opts), ctypes.byref(handle)))
        self.handle = handle
        self.backend = backend

    def __del__(self):
        if getattr(self, "handle", None) and native._lib is not None:
            native.lib().attune_runtime_destroy(self.handle)


_tuning_db = None  # None: the CLI's default path; "": none; else a path


def set_tuning_db(path):
    """The tuning database new runtimes dispatch from (None: the default
    path, "": none), and drops the runtimes and plans made so far."""
    global _tuning_db
    _tuning_db = path
    reset()


_generation = 0  # advanced by reset(): plans of older generations are stale


def reset():
    """Drops every runtime and plan: the next call dispatches afresh (after
    `attune tune` wrote new results, for instance)."""
    global _generation
    with _lock:
        _generation += 1
        _plans.clear()
        _runtimes.clear()


def runtime(backend, device=0):
    key = (backend, device)
    rt = _runtimes.get(key)
    if rt is None:
        with _lock:
            rt = _runtimes.get(key)
            if rt is None:
                rt = _runtimes[key] = _Runtime(backend, device, _tuning_db)
    return rt


def cpu_backend():
    """Where 16-bit CPU arrays run: the emulator, unless $ATTUNE_CPU_BACKEND
    says "cuda" (the host-overhead benchmark, on the recording fake driver)."""
    backend = os.environ.get("ATTUNE_CPU_BACKEND", "emu")
    if backend not in ("emu", "cuda"):
        raise InvalidArgument(f"ATTUNE_CPU_BACKEND: got {backend!r}; expected emu or cuda")
    return backend


def backend_of(view):
    if view.device == "cuda":
        if view.dtype not in KERNEL_DTYPES and view.dtype not in FP8_DTYPES:
            raise InvalidArgument(f"dtype: got {view.dtype} on a CUDA device; expected float16 or bfloat16 (or fp8 "
                                  "inputs: float8_e4m3fn, float8_e5m2); float32 and float64 run on the fp64 "
                                  "reference, on the CPU")
        return "cuda", view.index
    if view.dtype in KERNEL_DTYPES or view.dtype in FP8_DTYPES:
        return cpu_backend(), 0
    if view.dtype in REFERENCE_DTYPES:
        return "reference", 0
    raise InvalidArgument(f"dtype: got {view.dtype}; expected float16 or bfloat16 (kernels; also fp8 inputs: "
                          "float8_e4m3fn, float8_e5m2), or float32 or float64 (the fp64 reference, on the CPU)")


# -- problems -------------------------------------------------------------------

@dataclass
class Lengths:
    """The length arrays of a call (views of int32 arrays, or None) and the
    host bounds a plan is made for."""
    cu_seqlens_q: View = None
    cu_seqlens_k: View = None
    seqlens_k: View = None
    block_table: View = None
    max_seqlen_q: int = 0
    max_seqlen_k: int = 0

    def any(self):
        return any(x is not None for x in (self.cu_seqlens_q, self.cu_seqlens_k, self.seqlens_k, self.block_table))


@dataclass
class Shape:
    """The sizes of a call, read from its arrays."""
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim_k: int
    head_dim_v: int
    page_size: int = 0
    max_pages: int = 0
    num_pages: int = 0
    packed_q: bool = False
    packed_k: bool = False
    extra: dict = field(default_factory=dict)


def _require(cond, what):
    if not cond:
        raise InvalidArgument(what)


def shape_of(q, k, v, lengths):
    """Sizes from Q [B, Sq, Hq, Dk] or packed [Tq, Hq, Dk], K and V [B, Sk,
    Hkv, D], packed [Tk, Hkv, D] or page pools [pages, page_size, Hkv, D]
    (with a block table)."""
    _require(k.dtype == v.dtype and (q.dtype == k.dtype or (k.dtype in FP8_DTYPES and q.dtype in KERNEL_DTYPES)),
             f"dtypes: got q {q.dtype}, k {k.dtype}, v {v.dtype}; expected one dtype, or an fp8 k and v (e4m3 or "
             "e5m2, one format) under fp16 or bf16 q")
    _require(q.device == k.device == v.device and q.index == k.index == v.index,
             "devices: q, k and v must be on one device")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require(len(t.shape) in (3, 4), f"{name}: got {len(t.shape)} dimensions {list(t.shape)}; expected "
                 "[batch, seqlen, heads, head_dim] or packed [total, heads, head_dim]")
        _require(t.strides[-1] == 1 or t.shape[-1] == 1,
                 f"{name}: the last dimension has stride {t.strides[-1]}; expected it contiguous (stride 1)")
    packed_q = len(q.shape) == 3
    if packed_q:
        _require(lengths.cu_seqlens_q is not None, "q is packed [total, heads, head_dim]; expected cu_seqlens_q")
        batch = lengths.cu_seqlens_q.shape[0] - 1
        seqlen_q = q.shape[0]
    else:
        batch, seqlen_q = q.shape[0], q.shape[1]
    heads_q, dk = q.shape[-2], q.shape[-1]
    _require(k.shape[-1] == dk, f"k: head_dim {k.shape[-1]}; expected q's {dk}")
    _require(k.shape[:-1] == v.shape[:-1], f"k {list(k.shape)} and v {list(v.shape)}: expected the same shape "
             "but for the head dim")
    heads_kv, dv = k.shape[-2], v.shape[-1]
    s = Shape(batch, seqlen_q, 0, heads_q, heads_kv, dk, dv, packed_q=packed_q)
    if lengths.block_table is not None:
        _require(len(k.shape) == 4, "a block table: expected k and v page pools [pages, page_size, heads, head_dim]")
        _require(len(lengths.block_table.shape) == 2 and lengths.block_table.shape[0] == batch,
                 f"block_table: got {list(lengths.block_table.shape)}; expected [{batch}, max_pages]")
        s.num_pages, s.page_size = k.shape[0], k.shape[1]
        s.max_pages = lengths.block_table.shape[1]
        s.seqlen_k = s.max_pages * s.page_size
    elif len(k.shape) == 3:
        _require(lengths.cu_seqlens_k is not None, "k is packed [total, heads, head_dim]; expected cu_seqlens_k")
        s.packed_k = True
        s.seqlen_k = k.shape[0]
    else:
        _require(packed_q or k.shape[0] == batch, f"k: batch {k.shape[0]}; expected q's {batch}")
        s.seqlen_k = k.shape[1]
    return s


def check_pages(lengths, table, page_size, num_pages, names=("cache_seqlens", "block_table")):
    """Refuses, on the host, a call that would read outside its block table
    or the page pool: each sequence's length must fit its row (max_pages x
    page_size keys) and every page it uses must be in [0, num_pages).
    lengths: int32 [B] or None (every row full); table: int32 [B, max_pages];
    both host arrays (NumPy). A GPU would read another sequence's keys, or
    past the pool, without an error; the kernels also clamp what device
    lengths ask for."""
    import numpy as np

    table = np.asarray(table)
    batch, max_pages = table.shape
    capacity = max_pages * page_size
    lens = np.full(batch, capacity, dtype=np.int64) if lengths is None else np.asarray(lengths, dtype=np.int64)
    _require(lens.shape == (batch,), f"{names[0]}: got shape {list(lens.shape)}; expected [{batch}] (one per "
                                     f"row of {names[1]})")
    bad = np.nonzero((lens < 0) | (lens > capacity))[0]
    if bad.size:
        b = int(bad[0])
        raise InvalidArgument(f"{names[0]}[{b}] = {int(lens[b])} exceeds the capacity addressable by {names[1]} "
                              f"({max_pages} pages x page_size {page_size} = {capacity} keys)"
                              if lens[b] > capacity else f"{names[0]}[{b}] = {int(lens[b])}; expected >= 0")
    used = np.arange(max_pages)[None, :] < ((lens + page_size - 1) // page_size)[:, None]
    outside = used & ((table < 0) | (table >= num_pages))
    if outside.any():
        b, i = (int(x) for x in np.argwhere(outside)[0])
        raise InvalidArgument(f"{names[1]}[{b}, {i}] = {int(table[b, i])}: outside the page pool (expected a page "
                              f"index in [0, {num_pages}); sequence {b} uses {int(used[b].sum())} pages)")


def _strides3(t, packed):
    """[batch, seq, head] strides in elements (packed: batch stride 0)."""
    if packed:
        return (0, t.strides[0], t.strides[1])
    return (t.strides[0], t.strides[1], t.strides[2])


def problem_key(dtype, s, spec, q, k, v, o_strides, lse_strides, lengths, device_lengths):
    """The tuple a plan is cached under: everything the C problem holds but
    the pointers."""
    kv_packed = s.packed_k
    return key_of(storage_name(dtype, kv_storage(dtype, k.dtype)), s, spec,
                  (_strides3(q, s.packed_q), _strides3(k, kv_packed), _strides3(v, kv_packed), o_strides,
                   lse_strides), lengths, device_lengths)


def key_of(dtype, s, spec, strides, lengths, device_lengths):
    """problem_key from the (batch, seq, head) strides of q, k, v, o and lse
    (batch stride 0 where packed): a plan made before its tensors exist.
    dtype: storage_name's."""
    return (dtype, s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim_k, s.head_dim_v, spec,
            *strides, s.page_size, s.max_pages, s.num_pages,
            lengths.cu_seqlens_q is not None, lengths.cu_seqlens_k is not None, lengths.seqlens_k is not None,
            lengths.max_seqlen_q, lengths.max_seqlen_k, device_lengths)


_KEY_SPEC = 8  # where problem_key puts the Spec


def make_problem(key, host_lengths=None):
    """The C problem of a plan key (host_lengths: pointers of host arrays,
    for the reference)."""
    (dtype, batch, seqlen_q, seqlen_k, heads_q, heads_kv, dk, dv, spec, qs, ks, vs, os_, ls, page_size, max_pages,
     num_pages, _, _, _, _, _, _) = key
    p = native.Problem()
    native.lib().attune_problem_init(ctypes.byref(p))
    dtype, _, kv_dtype = dtype.partition(_KV_INFIX)
    p.dtype = _DTYPE_ENUMS[dtype]
    if kv_dtype:
        p.kv_dtype = _DTYPE_ENUMS[kv_dtype]
    p.descale_strides[:] = spec.descale_strides
    p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv = batch, seqlen_q, seqlen_k, heads_q, heads_kv
    p.head_dim_k, p.head_dim_v = dk, dv
    p.scale = spec.scale
    p.mask = spec.mask
    p.window_left, p.window_right = spec.window
    for name, strides in (("q_strides", qs), ("k_strides", ks), ("v_strides", vs), ("o_strides", os_),
                          ("lse_strides", ls)):
        getattr(p, name)[:] = strides
    p.page_size, p.max_pages, p.num_pages = page_size, max_pages, num_pages
    p.softcap = spec.softcap
    p.alibi_per_batch = 1 if spec.alibi_per_batch else 0
    p.dropout_p = spec.dropout_p
    if host_lengths:
        for name, ptr in host_lengths.items():
            setattr(p, name, ptr)
    return p


class Plan:
    """A plan of the C API with what its runs need."""

    def __init__(self, rt, key, op, lengths, splits=0, split_size=0, deterministic=False, alibi=False):
        self.runtime = rt  # keeps the runtime alive while the plan is
        self.generation = _generation
        problem = make_problem(key)
        # The plan must know the problem has ALiBi or sinks: any non-null pointer marks them.
        if alibi:
            problem.alibi_slopes = 1
        if key[_KEY_SPEC].has_sinks:
            problem.sinks = 1
        opts = native.PlanOptions()
        native.lib().attune_plan_options_init(ctypes.byref(opts))
        opts.op = op
        opts.splits = splits
        opts.split_size = split_size
        opts.deterministic = 1 if deterministic else 0
        opts.device_lengths = 1 if lengths.any() else 0
        opts.cu_seqlens_q = 1 if lengths.cu_seqlens_q is not None else 0
        opts.cu_seqlens_k = 1 if lengths.cu_seqlens_k is not None else 0
        opts.seqlens_k = 1 if (lengths.seqlens_k is not None) else 0
        opts.max_seqlen_q = lengths.max_seqlen_q
        opts.max_seqlen_k = lengths.max_seqlen_k
        handle = ctypes.c_void_p()
        native.check(native.lib().attune_plan_create(rt.handle, ctypes.byref(problem), ctypes.byref(opts),
                                                     ctypes.byref(handle)))
        self.handle = handle
        size = ctypes.c_size_t()
        native.check(native.lib().attune_plan_workspace_size(handle, ctypes.byref(size)))
        self.workspace_bytes = size.value
        self.description = native.lib().attune_plan_describe(handle).decode()

    def __del__(self):
        if getattr(self, "handle", None) and native._lib is not None:
            native.lib().attune_plan_destroy(self.handle)

    def alive(self):
        """False once reset() dropped the plans made before it."""
        return self.generation == _generation

    def run(self, buffers, lengths, workspace_ptr, stream, batch=-1):
        self.run_pointers(buffers, [x.ptr if x is not None else None for x in
                                    (lengths.cu_seqlens_q, lengths.cu_seqlens_k, lengths.seqlens_k,
                                     lengths.block_table)], workspace_ptr, stream, batch)

    def run_pointers(self, buffers, length_ptrs, workspace_ptr, stream, batch=-1):
        """A run with the length arrays' addresses (cu_seqlens_q,
        cu_seqlens_k, seqlens_k, block_table; None where unused), or None
        when the call has none."""
        metadata = None
        if length_ptrs is not None:
            metadata = ctypes.byref(native.Metadata(*length_ptrs, batch))
        elif batch != -1:
            metadata = ctypes.byref(native.Metadata(None, None, None, None, batch))
        status = native.lib().attune_plan_run(self.runtime.handle, self.handle, ctypes.byref(buffers), metadata,
                                              workspace_ptr, self.workspace_bytes, stream)
        if status:
            native.check(status)


def plan_for(backend, device, key, op, lengths, splits=0, split_size=0, deterministic=False, alibi=False):
    full = (backend, device, op, splits, split_size, deterministic, alibi, key)
    plan = _plans.get(full)
    if plan is None:
        plan = Plan(runtime(backend, device), key, op, lengths, splits, split_size, deterministic, alibi)
        with _lock:
            _plans[full] = plan
    return plan


def default_scale(head_dim_k):
    return 1.0 / math.sqrt(head_dim_k)
