"""The library's typed errors as Python exceptions, each carrying its one-line
message (attune_last_error)."""


class Error(RuntimeError):
    """Any failure reported by libattune."""


class InvalidArgument(Error, ValueError):
    """A problem, tensor or option breaks the contract (what was wrong, the
    value seen, what was expected)."""


class KernelFault(Error):
    """The emulator found a bug in a kernel (block, thread, source line)."""


class CudaError(Error):
    """A CUDA call failed. `sticky` is True when the context is lost: every
    later call fails with the same error until the process restarts."""

    def __init__(self, message, sticky=False):
        super().__init__(message)
        self.sticky = sticky


class Unavailable(Error):
    """The backend cannot run here (no CUDA driver, no NVRTC)."""


class IoError(Error, OSError):
    """A file (kernel cache, tuning database) could not be used."""


# attune_status codes (runtime/attune_c.h)
_INVALID_ARGUMENT, _IO, _UNAVAILABLE, _CUDA, _CUDA_STICKY, _KERNEL_FAULT = 1, 2, 3, 4, 5, 6


def error_for_status(status, message):
    if status == _INVALID_ARGUMENT:
        return InvalidArgument(message)
    if status == _IO:
        return IoError(message)
    if status == _UNAVAILABLE:
        return Unavailable(message)
    if status in (_CUDA, _CUDA_STICKY):
        return CudaError(message, sticky=status == _CUDA_STICKY)
    if status == _KERNEL_FAULT:
        return KernelFault(message)
    return Error(message)
