"""attune's C API for the GPU check: runtimes, problems from tensors, plans.

Through the Python package's ctypes binding (python/attune/_native.py), on
torch tensors (CUDA tensors on the cuda backend, CPU tensors on emu), so
attune and SDPA read the same inputs in one process.
"""
import ctypes
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_ROOT, "python"))
from attune import _native as native  # noqa: E402
from attune._errors import CudaError  # noqa: E402,F401  (re-exported for the worker)

MASKS = {"none": native.MASK_NONE, "causal": native.MASK_CAUSAL_BOTTOM_RIGHT}


def dtype_code(torch_dtype):
    import torch
    codes = {torch.bfloat16: native.DTYPE_BF16, torch.float16: native.DTYPE_FP16,
             torch.float8_e4m3fn: native.DTYPE_E4M3, torch.float8_e5m2: native.DTYPE_E5M2}
    return codes[torch_dtype]


class Runtime:
    """One attune runtime on `backend` ("cuda" or "emu"), heuristics only (no
    tuning database: the run measures attune's own choices)."""

    def __init__(self, backend):
        self.lib = native.lib()
        self.backend = backend
        opts = native.RuntimeOptions()
        self.lib.attune_runtime_options_init(ctypes.byref(opts))
        opts.backend = backend.encode()
        opts.tuning_db = b""
        self.rt = ctypes.c_void_p()
        native.check(self.lib.attune_runtime_create_with(ctypes.byref(opts), ctypes.byref(self.rt)))

    def explain(self, problem):
        return native.checked_text(self.lib.attune_explain(self.rt, ctypes.byref(problem.c)))

    def explain_decode(self, problem, splits=0):
        return native.checked_text(self.lib.attune_explain_decode(self.rt, ctypes.byref(problem.c), splits))

    def explain_backward(self, problem, deterministic=False):
        return native.checked_text(self.lib.attune_explain_backward(self.rt, ctypes.byref(problem.c),
                                                                    1 if deterministic else 0))

    def forward(self, problem, q, k, v, o, lse, variant=None, stream=None):
        args = [_ptr(x) for x in (q, k, v, o, lse)] + [stream]
        if variant:
            native.check(self.lib.attune_forward_variant(self.rt, variant.encode(), ctypes.byref(problem.c), *args))
        else:
            native.check(self.lib.attune_forward(self.rt, ctypes.byref(problem.c), *args))

    def plan(self, problem, op="fwd", variant=None, splits=0, deterministic=False):
        return Plan(self, problem, op, variant, splits, deterministic)


def _ptr(t):
    return None if t is None else ctypes.c_void_p(t.data_ptr())


class Problem:
    """attune_problem for contiguous [B, S, H, D] tensors, or packed [T, H, D]
    with cu_seqlens (host lists), or a paged cache: K and V page pools
    [pages, page_size, Hkv, D] with `paged` = (block table [B][max_pages],
    cache lengths [B]) as host lists. K and V of an fp8 dtype under 16-bit
    queries: an fp8 KV cache (kv_dtype)."""

    def __init__(self, q, k, v, mask="none", cu_q=None, cu_k=None, scale=0.0, paged=None):
        p = native.Problem()
        native.lib().attune_problem_init(ctypes.byref(p))
        p.dtype = dtype_code(q.dtype)
        if k.dtype != q.dtype:
            p.kv_dtype = dtype_code(k.dtype)
        self._keep = []
        if paged is not None:
            table, lengths = paged
            p.batch, p.seqlen_q, p.heads_q, p.head_dim_k = q.shape
            p.num_pages, p.page_size, p.heads_kv = k.shape[0], k.shape[1], k.shape[2]
            p.max_pages = len(table[0])
            p.seqlen_k = p.max_pages * p.page_size
            p.head_dim_v = v.shape[3]
            flat = [x for row in table for x in row]
            arr_t = (ctypes.c_int32 * len(flat))(*flat)
            arr_l = (ctypes.c_int32 * len(lengths))(*lengths)
            self._keep += [arr_t, arr_l]
            p.block_table = ctypes.cast(arr_t, ctypes.c_void_p)
            p.seqlens_k = ctypes.cast(arr_l, ctypes.c_void_p)
        elif cu_q is not None:
            p.batch = len(cu_q) - 1
            p.seqlen_q, p.heads_q, p.head_dim_k = q.shape
            p.seqlen_k, p.heads_kv = k.shape[0], k.shape[1]
            p.head_dim_v = v.shape[2]
            arr_q = (ctypes.c_int32 * len(cu_q))(*cu_q)
            arr_k = (ctypes.c_int32 * len(cu_k))(*cu_k)
            self._keep += [arr_q, arr_k]
            p.cu_seqlens_q = ctypes.cast(arr_q, ctypes.c_void_p)
            p.cu_seqlens_k = ctypes.cast(arr_k, ctypes.c_void_p)
        else:
            p.batch, p.seqlen_q, p.heads_q, p.head_dim_k = q.shape
            p.seqlen_k, p.heads_kv = k.shape[1], k.shape[2]
            p.head_dim_v = v.shape[3]
        p.mask = MASKS[mask]
        p.scale = scale
        self.c = p

    def describe(self):
        p = self.c
        packed = " packed" if p.cu_seqlens_q else ""
        return "B%d Sq%d Sk%d Hq%d Hkv%d Dk%d Dv%d%s" % (p.batch, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv,
                                                         p.head_dim_k, p.head_dim_v, packed)


class Plan:
    """attune_plan_create once, its workspace once; run() only launches."""

    OPS = {"fwd": native.OP_FORWARD, "decode": native.OP_DECODE, "bwd": native.OP_BACKWARD}

    def __init__(self, runtime, problem, op, variant, splits, deterministic):
        import torch
        self.rt, self.problem = runtime, problem
        lib = runtime.lib
        o = native.PlanOptions()
        lib.attune_plan_options_init(ctypes.byref(o))
        o.op = self.OPS[op]
        o.variant = variant.encode() if variant else None
        o.splits = splits
        o.deterministic = 1 if deterministic else 0
        self.handle = ctypes.c_void_p()
        native.check(lib.attune_plan_create(runtime.rt, ctypes.byref(problem.c), ctypes.byref(o),
                                            ctypes.byref(self.handle)))
        size = ctypes.c_size_t()
        native.check(lib.attune_plan_workspace_size(self.handle, ctypes.byref(size)))
        device = "cuda" if runtime.backend == "cuda" else "cpu"
        self.workspace = torch.empty(max(size.value, 16), dtype=torch.uint8, device=device) if size.value else None
        self.workspace_bytes = size.value
        self.description = lib.attune_plan_describe(self.handle).decode()

    def run(self, stream=None, metadata=None, **tensors):
        """metadata: the length arrays a plan with lengths reads (int32 tensors in the backend's memory by
        native.Metadata's names, e.g. seqlens_k and block_table of a paged cache)."""
        b = native.Buffers()
        for name, t in tensors.items():
            setattr(b, name, None if t is None else t.data_ptr())
        m = None
        if metadata:
            m = native.Metadata()
            m.batch = -1
            for name, t in metadata.items():
                setattr(m, name, t.data_ptr())
            m = ctypes.byref(m)
        ws = self.workspace.data_ptr() if self.workspace is not None else None
        native.check(self.rt.lib.attune_plan_run(self.rt.rt, self.handle, ctypes.byref(b), m, ws,
                                                 self.workspace_bytes, stream))

    def __del__(self):
        if getattr(self, "handle", None):
            self.rt.lib.attune_plan_destroy(self.handle)


def wait_report():
    """What a kernel built with ATTUNE_WAIT_BOUND_MS wrote when it gave up ("" if none)."""
    try:
        return native.lib().attune_wait_report().decode()
    except Exception:  # noqa: BLE001 - a report is a bonus, never a new failure
        return ""
