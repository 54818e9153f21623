"""attune: autotuned FlashAttention-style attention kernels, from Python.

    import torch, attune
    out = attune.flash_attn_func(q, k, v, causal=True)   # flash-attn's signature and semantics

CUDA float16/bfloat16 tensors run attune's tuned kernels on the GPU; CPU
float16/bfloat16 tensors run the same kernels on attune's CPU emulator;
float32/float64 CPU tensors run the fp64 reference (gradcheck works).
The functions are torch.library ops: autograd, torch.compile(fullgraph=True)
and torch.export trace them. Without torch, the same functions take NumPy
arrays (forward only). `import attune.transformers` registers
attn_implementation="attune" with Hugging Face transformers;
`attune.flashinfer` has FlashInfer's serving wrappers. docs/python.md has
the details.
"""
from . import db
from ._engine import reset, set_tuning_db
from ._errors import CudaError, Error, InvalidArgument, IoError, KernelFault, Unavailable
from ._interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func, flash_attn_varlen_func,
                         flash_attn_varlen_kvpacked_func, flash_attn_varlen_qkvpacked_func, flash_attn_with_kvcache,
                         merge_states, sdpa)
from ._native import bounds_report, check_bounds, cli_path, library_path
from ._record import record
from ._serving import BatchDecode
from ._tuning import Choice, explain, tune

__version__ = "0.1.0"

try:  # registers the torch.library ops when torch is there
    import torch as _torch_module  # noqa: F401
except ImportError:
    pass
else:
    from . import _torch  # noqa: F401

__all__ = [
    "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_qkvpacked_func",
    "flash_attn_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "sdpa",
    "merge_states",
    "BatchDecode", "explain", "record", "tune", "db", "Choice", "reset", "set_tuning_db",
    "Error", "InvalidArgument", "KernelFault", "CudaError", "Unavailable", "IoError",
    "bounds_report", "check_bounds", "library_path", "cli_path", "__version__",
]
