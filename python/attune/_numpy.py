"""The array adapter for NumPy: attune without torch. float16 arrays run on
the emulator, float32 and float64 on the fp64 reference (NumPy has no
bfloat16); arrays are on the CPU, so there is no stream."""
import numpy as np

from . import _calls as calls
from . import _engine as engine

_NAMES = {np.dtype(np.float16): "fp16", np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64",
          np.dtype(np.int32): "int32", np.dtype(np.int64): "int64"}
_TYPES = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "int32": np.int32}


class NumpyArrays(calls.Arrays):
    def view(self, x):
        item = x.itemsize
        return engine.View(x.ctypes.data, tuple(x.shape), tuple(s // item for s in x.strides),
                           _NAMES.get(x.dtype, str(x.dtype)), "cpu", 0)

    def empty(self, shape, dtype, like):
        if dtype is None:
            return np.empty(shape, dtype=like.dtype)
        return np.empty(shape, dtype=_TYPES[dtype])

    @staticmethod
    def ptr(x):
        return x.ctypes.data

    def fast_key(self, q, k, v, lengths, alibi, sinks):
        return None  # NumPy calls take the checked path every time

    def float64(self, x):
        return np.ascontiguousarray(x, dtype=np.float64)

    def float32(self, x):
        return np.ascontiguousarray(x, dtype=np.float32)

    def cast(self, x, like):
        return x.astype(like.dtype if isinstance(like, np.ndarray) else _TYPES[like], copy=False)

    def int32(self, x):
        return np.ascontiguousarray(x, dtype=np.int32)

    def stream(self, like):
        return None

    def host(self, x):
        return np.asarray(x)

    def gather_pages(self, cache, block_table, page_size):
        pages = cache[np.asarray(block_table, dtype=np.int64)]
        b, p = block_table.shape
        return pages.reshape(b, p * page_size, cache.shape[2], cache.shape[3])


ARRAYS = NumpyArrays()
