"""libattune.so through ctypes: the C API (runtime/attune_c.h), its structs,
and its status codes as Python exceptions.

The library is found, in order, at $ATTUNE_LIBRARY, beside this package
(`attune/lib/libattune.so`, where the wheel puts it), or in a build tree of
the source checkout this file sits in (build/ci, build/dev). The CLI the
same way: $ATTUNE_CLI, `attune/bin/attune`, build/*/cli/attune.
"""
import ctypes
import os
import threading

from ._errors import error_for_status

ABI_VERSION = 4  # ATTUNE_ABI_VERSION of the header this binding follows

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE_BUILDS = [os.path.join(_HERE, "..", "..", "build", name) for name in ("ci", "dev")]


def _first_existing(env, packaged, in_build):
    path = os.environ.get(env, "")
    if path:
        if not os.path.exists(path):
            raise FileNotFoundError(f"{env}={path}: no such file")
        return os.path.abspath(path)
    if os.path.exists(packaged):
        return packaged
    for build in _SOURCE_BUILDS:
        candidate = os.path.join(build, in_build)
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    raise FileNotFoundError(
        f"attune: cannot find {os.path.basename(packaged)}: not at ${env}, not at {packaged}, and no build tree "
        f"(build/ci or build/dev) beside the package; install attune with 'pip install .' or set {env}")


def library_path():
    return _first_existing("ATTUNE_LIBRARY", os.path.join(_HERE, "lib", "libattune.so"), "libattune.so")


def cli_path():
    return _first_existing("ATTUNE_CLI", os.path.join(_HERE, "bin", "attune"), os.path.join("cli", "attune"))


# -- the C structs ---------------------------------------------------------------

Strides = ctypes.c_int64 * 3


class Problem(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("seqlen_k", ctypes.c_int64),
        ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64),
        ("head_dim_k", ctypes.c_int64), ("head_dim_v", ctypes.c_int64),
        ("scale", ctypes.c_double),
        ("mask", ctypes.c_int),
        ("window_left", ctypes.c_int64), ("window_right", ctypes.c_int64),
        ("seqlens_k", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
        ("q_strides", Strides), ("k_strides", Strides), ("v_strides", Strides), ("o_strides", Strides),
        ("lse_strides", Strides),
        ("block_table", ctypes.c_void_p),
        ("max_pages", ctypes.c_int64), ("page_size", ctypes.c_int64), ("num_pages", ctypes.c_int64),
        ("softcap", ctypes.c_double),
        ("sinks", ctypes.c_void_p), ("alibi_slopes", ctypes.c_void_p),
        ("alibi_per_batch", ctypes.c_int),
        ("dsink", ctypes.c_void_p),
        ("dropout_p", ctypes.c_double), ("seed", ctypes.c_uint64), ("offset", ctypes.c_uint64),
        ("kv_dtype", ctypes.c_int),
        ("q_descale", ctypes.c_void_p), ("k_descale", ctypes.c_void_p), ("v_descale", ctypes.c_void_p),
        ("descale_strides", ctypes.c_int64 * 2),
    ]


class RuntimeOptions(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_char_p), ("device", ctypes.c_int), ("tuning_db", ctypes.c_char_p),
                ("cache_directory", ctypes.c_char_p)]


class PlanOptions(ctypes.Structure):
    _fields_ = [
        ("op", ctypes.c_int), ("variant", ctypes.c_char_p), ("splits", ctypes.c_int),
        ("split_size", ctypes.c_int64), ("deterministic", ctypes.c_int),
        ("device_lengths", ctypes.c_int), ("cu_seqlens_q", ctypes.c_int), ("cu_seqlens_k", ctypes.c_int),
        ("seqlens_k", ctypes.c_int), ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64),
    ]


class Buffers(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv", "sinks", "alibi_slopes", "dsink", "rng_state",
                 "q_descale", "k_descale", "v_descale")]


class Metadata(ctypes.Structure):
    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p),
                ("seqlens_k", ctypes.c_void_p), ("block_table", ctypes.c_void_p), ("batch", ctypes.c_int64)]


class AppendProblem(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("batch", ctypes.c_int64), ("seqlen_new", ctypes.c_int64), ("heads_kv", ctypes.c_int64),
        ("head_dim_k", ctypes.c_int64), ("head_dim_v", ctypes.c_int64),
        ("k_new_strides", Strides), ("v_new_strides", Strides),
        ("cache_batch", ctypes.c_int64), ("seqlen_cache", ctypes.c_int64),
        ("page_size", ctypes.c_int64), ("num_pages", ctypes.c_int64), ("max_pages", ctypes.c_int64),
        ("k_cache_strides", Strides), ("v_cache_strides", Strides),
        ("rotary_dim", ctypes.c_int64), ("seqlen_ro", ctypes.c_int64),
        ("rotary_interleaved", ctypes.c_int),
        ("seqlen_q", ctypes.c_int64), ("heads_q", ctypes.c_int64),
        ("q_strides", Strides), ("q_rot_strides", Strides),
        ("q_per_row", ctypes.c_int),
    ]


class AppendBuffers(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in
                ("k_new", "v_new", "k_cache", "v_cache", "q", "q_rot", "rotary_cos", "rotary_sin", "cache_seqlens",
                 "seqlens_out", "block_table")]


DTYPE_FP16, DTYPE_BF16, DTYPE_E4M3, DTYPE_E5M2 = 0, 1, 2, 3
MASK_NONE, MASK_CAUSAL_BOTTOM_RIGHT, MASK_CAUSAL_TOP_LEFT, MASK_SLIDING_WINDOW = 0, 1, 2, 3
OP_FORWARD, OP_DECODE, OP_BACKWARD = 0, 1, 2

_P = ctypes.c_void_p
_SIGNATURES = {
    "attune_abi_version": (ctypes.c_int, []),
    "attune_version": (ctypes.c_char_p, []),
    "attune_last_error": (ctypes.c_char_p, []),
    "attune_wait_report": (ctypes.c_char_p, []),
    "attune_bounds_report": (ctypes.c_char_p, [ctypes.c_int]),
    "attune_problem_init": (None, [ctypes.POINTER(Problem)]),
    "attune_runtime_options_init": (None, [ctypes.POINTER(RuntimeOptions)]),
    "attune_runtime_create_with": (ctypes.c_int, [ctypes.POINTER(RuntimeOptions), ctypes.POINTER(_P)]),
    "attune_runtime_create": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(_P)]),
    "attune_runtime_destroy": (None, [_P]),
    "attune_forward": (ctypes.c_int, [_P, ctypes.POINTER(Problem), _P, _P, _P, _P, _P, _P]),
    "attune_forward_variant": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(Problem), _P, _P, _P, _P, _P,
                                              _P]),
    "attune_decode": (ctypes.c_int, [_P, ctypes.POINTER(Problem), ctypes.c_int, _P, _P, _P, _P, _P, _P]),
    "attune_backward": (ctypes.c_int, [_P, ctypes.POINTER(Problem), ctypes.c_int] + [_P] * 10),
    "attune_plan_options_init": (None, [ctypes.POINTER(PlanOptions)]),
    "attune_plan_create": (ctypes.c_int, [_P, ctypes.POINTER(Problem), ctypes.POINTER(PlanOptions),
                                          ctypes.POINTER(_P)]),
    "attune_plan_workspace_size": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "attune_plan_describe": (ctypes.c_char_p, [_P]),
    "attune_plan_run": (ctypes.c_int, [_P, _P, ctypes.POINTER(Buffers), ctypes.POINTER(Metadata), _P,
                                       ctypes.c_size_t, _P]),
    "attune_plan_destroy": (None, [_P]),
    "attune_merge_states": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                           ctypes.c_int, ctypes.POINTER(_P), ctypes.POINTER(_P), _P, _P, _P]),
    "attune_append_kv": (ctypes.c_int, [_P, ctypes.POINTER(AppendProblem), ctypes.POINTER(AppendBuffers), _P]),
    "attune_explain": (ctypes.c_char_p, [_P, ctypes.POINTER(Problem)]),
    "attune_explain_decode": (ctypes.c_char_p, [_P, ctypes.POINTER(Problem), ctypes.c_int]),
    "attune_explain_backward": (ctypes.c_char_p, [_P, ctypes.POINTER(Problem), ctypes.c_int]),
    "attune_reference_forward": (ctypes.c_int, [ctypes.POINTER(Problem), _P, _P, _P, _P, _P]),
    "attune_reference_backward": (ctypes.c_int, [ctypes.POINTER(Problem), _P, _P, _P, _P, _P, _P, _P]),
    "attune_dropout_keep_mask": (ctypes.c_int, [ctypes.c_double, ctypes.c_uint64, ctypes.c_uint64] +
                                 [ctypes.c_int64] * 4 + [_P]),
}

_lock = threading.Lock()
_lib = None


def lib():
    """The loaded library, its functions typed; loaded on first use."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = library_path()
            loaded = ctypes.CDLL(path)
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(loaded, name)
                fn.restype = restype
                fn.argtypes = argtypes
            abi = loaded.attune_abi_version()
            if abi != ABI_VERSION:
                raise ImportError(f"attune: {path} has C ABI {abi}; this package expects {ABI_VERSION} "
                                  "(the library and the Python package come from different builds)")
            _lib = loaded
    return _lib


def check(status):
    """Raises the exception of a failed call, with the library's message."""
    if status != 0:
        raise error_for_status(status, lib().attune_last_error().decode("utf-8", "replace"))


def checked_text(text):
    """A returned string, or the failure's exception when it is NULL."""
    if text is None:
        message = lib().attune_last_error().decode("utf-8", "replace")
        raise error_for_status(1, message)
    return text.decode("utf-8", "replace")


def version():
    return lib().attune_version().decode()


def bounds_report(clear=False):
    """What a kernel clamped of the lengths and block tables it read from
    device memory (runtime/attune_c.h: attune_bounds_report), or ""."""
    return lib().attune_bounds_report(1 if clear else 0).decode("utf-8", "replace")


def check_bounds():
    """Raises InvalidArgument when a run since the last check was given a
    length past its block-table row or a page outside the pool (its output
    is wrong; the kernel read nothing outside), and clears the report."""
    report = bounds_report(clear=True)
    if report:
        from ._errors import InvalidArgument
        raise InvalidArgument(report)
