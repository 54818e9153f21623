"""`with attune.record() as r: model(x)`: the problems a model's attention
calls dispatch, collected for `attune.tune`."""
import threading
from dataclasses import dataclass

from . import _native as native

_MASKS = {native.MASK_NONE: "none", native.MASK_CAUSAL_BOTTOM_RIGHT: "causal",
          native.MASK_CAUSAL_TOP_LEFT: "causal-top-left", native.MASK_SLIDING_WINDOW: "window"}


@dataclass(frozen=True)
class Problem:
    """One dispatched problem: the sizes its key buckets, as a sweep names them."""
    op: str  # "fwd", "bwd" or "decode"
    dtype: str  # "bf16", "fp16", ("fp32", "fp64": the reference, never tuned)
    batch: int
    seqlen_q: int  # the longest sequence's query rows
    seqlen_k: int  # ... and keys
    heads_q: int
    heads_kv: int
    head_dim_k: int
    head_dim_v: int
    mask: str  # "none", "causal", "causal-top-left", "window"
    softcap: bool = False
    alibi: bool = False
    sinks: bool = False
    dropout: bool = False


class Recorder:
    def __init__(self):
        self._seen = {}

    @property
    def problems(self):
        """The distinct problems, in the order first seen."""
        return list(self._seen)

    def add(self, problem):
        self._seen.setdefault(problem, None)


_active = []
_lock = threading.Lock()


class record:
    """Collects the problems of every attention call made inside it (any
    thread), in `.problems`."""

    def __enter__(self):
        self.recorder = Recorder()
        with _lock:
            _active.append(self.recorder)
        return self.recorder

    def __exit__(self, *exc):
        with _lock:
            _active.remove(self.recorder)
        return False


def problem_of(op, dtype, shape, spec, lengths):
    """The recorded form of a call's problem."""
    seqlen_q = lengths.max_seqlen_q if shape.packed_q and lengths.max_seqlen_q > 0 else shape.seqlen_q
    seqlen_k = lengths.max_seqlen_k if lengths.max_seqlen_k > 0 else shape.seqlen_k
    return Problem(op, dtype, shape.batch, int(seqlen_q), int(seqlen_k), shape.heads_q, shape.heads_kv,
                   shape.head_dim_k, shape.head_dim_v, _MASKS.get(spec.mask, "none"), spec.softcap > 0,
                   spec.has_alibi, spec.has_sinks, spec.dropout_p > 0)


def active():
    return bool(_active)


def add(problem):
    """Adds a call's problem to every open recorder."""
    if not _active:
        return
    with _lock:
        for r in _active:
            r.add(problem)


def note(op, dtype, shape, spec, lengths):
    if _active:
        add(problem_of(op, dtype, shape, spec, lengths))
