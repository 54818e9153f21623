"""The PyTorch side: the array adapter for tensors and the ops registered
with torch.library (schema, one implementation for CPU and CUDA, fake
implementations that compute shapes only, autograd through the backward
op), so torch.compile(fullgraph=True) and torch.export trace them.

    attune::fwd(q, k, v, cu_seqlens_q?, cu_seqlens_k?, seqlens_k?, block_table?, max_seqlen_q, max_seqlen_k,
                scale, mask, window_left, window_right, softcap, alibi_slopes?, num_splits, deterministic,
                sinks?=None, dropout_p=0.0, rng_state?=None, q_descale?=None, k_descale?=None,
                v_descale?=None)
        -> (out, softmax_lse)
    attune::bwd(dout, q, k, v, out, softmax_lse, cu_seqlens_q?, cu_seqlens_k?, seqlens_k?, max_seqlen_q,
                max_seqlen_k, scale, mask, window_left, window_right, softcap, alibi_slopes?, deterministic,
                sinks?=None, dropout_p=0.0, rng_state?=None)
        -> (dq, dk, dv, dsink)

sinks: float32 [Hq] sink logits (docs/contract.md); dsink is their
gradient, an empty tensor without sinks (an op returns tensors, not None).
dropout_p > 0: attention dropout with rng_state, int64 [2] {seed, offset}
on q's device, drawn by the caller from torch's generator (so the op stays
a function of its inputs) and saved for the backward, which regenerates
the forward's mask from it. q_descale, k_descale, v_descale: the descales
of fp8 inputs (_fp8.descales: FlashAttention-3's (batch, kv_heads) float32
tensors, or any layout broadcasting to it); out is then bfloat16 for fp8
queries. fp8 inputs have no backward.

Tensors are [B, S, H, D] or packed [T, H, D]; CPU float16/bfloat16 run on
the emulator (the real kernels), float32/float64 on the fp64 reference;
float8_e4m3fn/float8_e5m2 inputs run the kernels as 16-bit ones do;
CUDA float16/bfloat16 on the GPU, on the current stream of the tensors'
device, without synchronizing.
"""
from typing import Optional, Tuple

import torch

from . import _calls as calls
from . import _engine as engine
from . import _fp8

_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64",
          torch.int32: "int32", torch.int64: "int64", **_fp8.DTYPES}
_TYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
          "int32": torch.int32}


class TorchArrays(calls.Arrays):
    def view(self, x):
        return engine.View(x.data_ptr(), tuple(x.shape), tuple(x.stride()), _NAMES.get(x.dtype, str(x.dtype)),
                           x.device.type, x.device.index or 0)

    def empty(self, shape, dtype, like):
        """A contiguous tensor on like's device; dtype None: like's."""
        return like.new_empty(shape) if dtype is None else like.new_empty(shape, dtype=_TYPES[dtype])

    @staticmethod
    def ptr(x):
        return x.data_ptr()

    def fast_key(self, q, k, v, lengths, alibi, sinks):
        """Everything a prepared call's checks read of its tensors (shapes,
        strides, dtypes, devices), or None where the slow path must convert
        something (a length array not contiguous int32, slopes or sinks not
        contiguous float32) or the call runs on the reference."""
        if q.dtype not in _FAST:
            return None
        key = [q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, k.dtype, v.dtype, q.device,
               k.device, v.device]
        for x in lengths:
            if x is None:
                key.append(None)
            elif not isinstance(x, torch.Tensor) or x.dtype != torch.int32 or not x.is_contiguous():
                return None
            else:
                key.append((x.shape, x.device))
        for x in (alibi, sinks):
            if x is None:
                key.append(None)
            elif x.dtype != torch.float32 or not x.is_contiguous():
                return None
            else:
                key.append((x.shape, x.device))
        return tuple(key)

    def float64(self, x):
        return x.detach().to(device="cpu", dtype=torch.float64).contiguous()

    def float32(self, x):
        return x.detach().to(dtype=torch.float32).contiguous()

    def cast(self, x, like):
        return x.to(like.dtype if isinstance(like, torch.Tensor) else _TYPES[like])

    def int32(self, x):
        if not isinstance(x, torch.Tensor):
            x = torch.tensor(x, dtype=torch.int32)
        return x if x.dtype == torch.int32 and x.is_contiguous() else x.to(torch.int32).contiguous()

    def stream(self, like):
        if not like.is_cuda:
            return None
        return _raw_stream(like.get_device())

    def host(self, x):
        if not isinstance(x, torch.Tensor):
            return x
        return x.numpy() if x.device.type == "cpu" else None

    def gather_pages(self, cache, block_table, page_size):
        pages = cache[block_table.long()]  # [B, max_pages, page_size, H, D]
        b, p = block_table.shape
        return pages.reshape(b, p * page_size, cache.shape[2], cache.shape[3])


_KERNEL = (torch.float16, torch.bfloat16)
_FAST = _KERNEL + tuple(_fp8.DTYPES)  # the dtypes of q whose calls run the kernels


def _raw_stream(device):
    """The current CUDA stream of a device as an address (what inductor's
    generated code asks; no Stream object made)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return get(device) if get is not None else torch.cuda.current_stream(device).cuda_stream
ARRAYS = TorchArrays()


def _spec(scale, mask, window_left, window_right, softcap, alibi_slopes, sinks=None, dropout_p=0.0,
          descale_strides=(0, 0)):
    if alibi_slopes is None and sinks is None and not dropout_p and descale_strides == (0, 0):
        return engine.Spec(scale, mask, (window_left, window_right), softcap)
    return engine.Spec(scale, mask, (window_left, window_right), softcap,
                       alibi_slopes is not None and alibi_slopes.dim() == 2, alibi_slopes is not None,
                       sinks is not None, float(dropout_p), descale_strides)


def _out_dtype(q):
    return torch.bfloat16 if q.dtype in _fp8.DTYPES else q.dtype


def _lse_dtype(q):
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def fwd_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor],
             cu_seqlens_k: Optional[torch.Tensor], seqlens_k: Optional[torch.Tensor],
             block_table: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, scale: float, mask: int,
             window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
             num_splits: int, deterministic: bool, sinks: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
             rng_state: Optional[torch.Tensor] = None, q_descale: Optional[torch.Tensor] = None,
             k_descale: Optional[torch.Tensor] = None, v_descale: Optional[torch.Tensor] = None
             ) -> Tuple[torch.Tensor, torch.Tensor]:
    # num_splits: 0 the forward (a paged cache picks its kernel), -1 decode
    # with the built-in split count, N > 0 decode with N splits.
    descales, strides = None, (0, 0)
    if q_descale is not None or k_descale is not None or v_descale is not None:
        batch = len(cu_seqlens_q) - 1 if q.dim() == 3 and cu_seqlens_q is not None else q.shape[0]
        descales, strides = _fp8.descales(q, k, v, batch, q_descale, k_descale, v_descale)
    spec = _spec(scale, mask, window_left, window_right, softcap, alibi_slopes, sinks, dropout_p, strides)
    out, lse = calls.forward(ARRAYS, q, k, v, spec, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                             seqlens_k=seqlens_k, block_table=block_table, max_seqlen_q=max_seqlen_q,
                             max_seqlen_k=max_seqlen_k, alibi_slopes=alibi_slopes, sinks=sinks,
                             num_splits=num_splits if num_splits > 0 else 0, decode=num_splits != 0,
                             rng_state=rng_state, descales=descales)
    return out, (lse if lse.dtype == _lse_dtype(q) else lse.to(_lse_dtype(q)))


fwd = torch.library.custom_op("attune::fwd", mutates_args=())(fwd_impl)


@fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, max_seqlen_q, max_seqlen_k, scale, mask,
              window_left, window_right, softcap, alibi_slopes, num_splits, deterministic, sinks=None, dropout_p=0.0,
              rng_state=None, q_descale=None, k_descale=None, v_descale=None):
    if q.dim() == 3:  # packed [T, H, D]
        out = q.new_empty((q.shape[0], q.shape[1], v.shape[-1]), dtype=_out_dtype(q))
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=_lse_dtype(q))
    else:
        out = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[-1]), dtype=_out_dtype(q))
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=_lse_dtype(q))
    return out, lse


def bwd_impl(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
             softmax_lse: torch.Tensor, cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
             seqlens_k: Optional[torch.Tensor], max_seqlen_q: int, max_seqlen_k: int, scale: float, mask: int,
             window_left: int, window_right: int, softcap: float, alibi_slopes: Optional[torch.Tensor],
             deterministic: bool, sinks: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
             rng_state: Optional[torch.Tensor] = None
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    spec = _spec(scale, mask, window_left, window_right, softcap, alibi_slopes, sinks, dropout_p)
    if q.dtype in _KERNEL:
        # The kernels write the gradients laid out like q, k and v, and read
        # dO laid out like O and the forward's float32 LSE.
        q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
        out, softmax_lse = out.contiguous(), softmax_lse.to(torch.float32).contiguous()
    dq, dk, dv, dsink = calls.backward(ARRAYS, dout, q, k, v, out, softmax_lse, spec, cu_seqlens_q=cu_seqlens_q,
                                       cu_seqlens_k=cu_seqlens_k, seqlens_k=seqlens_k, max_seqlen_q=max_seqlen_q,
                                       max_seqlen_k=max_seqlen_k, alibi_slopes=alibi_slopes, sinks=sinks,
                                       deterministic=deterministic, rng_state=rng_state)
    return dq, dk, dv, dsink if dsink is not None else _no_dsink(q)


def _no_dsink(q):
    return q.new_empty((0,), dtype=torch.float32)


bwd = torch.library.custom_op("attune::bwd", mutates_args=())(bwd_impl)


@bwd.register_fake
def _bwd_fake(dout, q, k, v, out, softmax_lse, cu_seqlens_q, cu_seqlens_k, seqlens_k, max_seqlen_q, max_seqlen_k,
              scale, mask, window_left, window_right, softcap, alibi_slopes, deterministic, sinks=None, dropout_p=0.0,
              rng_state=None):
    dsink = sinks.new_empty(sinks.shape, dtype=torch.float32) if sinks is not None else _no_dsink(q)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), dsink


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, seqlens_k, block_table, max_seqlen_q, max_seqlen_k, scale, mask,
     window_left, window_right, softcap, alibi_slopes, num_splits, deterministic, *rest) = inputs
    sinks, dropout_p, rng_state = (tuple(rest) + (None, 0.0, None)[len(rest):])[:3]  # then the descales: no gradient
    out, lse = output
    # rng_state is saved with the tensors: the backward regenerates the mask from the same {seed, offset}.
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqlens_k, alibi_slopes, sinks, rng_state)
    ctx.inputs = len(inputs)  # the trailing arguments may be left out (their defaults)
    ctx.args = (max_seqlen_q, max_seqlen_k, scale, mask, window_left, window_right, softcap, deterministic)
    ctx.dropout_p = float(dropout_p)
    ctx.paged = block_table is not None
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, dlse):
    if ctx.paged:
        raise NotImplementedError("attune: backward through a paged KV cache (block_table) is not supported; "
                                  "expected contiguous or packed K and V")
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqlens_k, alibi_slopes, sinks, rng_state = ctx.saved_tensors
    (max_seqlen_q, max_seqlen_k, scale, mask, window_left, window_right, softcap, deterministic) = ctx.args
    extra = (sinks,) if not ctx.dropout_p else (sinks, ctx.dropout_p, rng_state)
    dq, dk, dv, dsink = bwd(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqlens_k, max_seqlen_q,
                            max_seqlen_k, scale, mask, window_left, window_right, softcap, alibi_slopes,
                            deterministic, *extra)
    return ((dq, dk, dv) + (None,) * 14 + ((dsink if sinks is not None else None),) + (None,) * 5)[:ctx.inputs]


fwd.register_autograd(_backward, setup_context=_setup_context)


class _Attention(torch.autograd.Function):
    """The eager path of the op with autograd: the same implementations
    without the dispatcher's per-call cost (torch.library's autograd wrapper
    costs hundreds of microseconds a call). torch.compile and torch.export
    trace the registered op instead (call())."""

    @staticmethod
    def forward(ctx, *args):
        out, lse = fwd_impl(*args)
        _setup_context(ctx, args, (out, lse))
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        return _backward(ctx, dout, dlse)


_is_compiling = torch.compiler.is_compiling
_SINKS = 17  # the position of sinks among attune::fwd's arguments


def call(*args):
    """attune::fwd on these arguments: the registered op while tracing
    (torch.compile, torch.export), the implementation directly in eager
    mode (through _Attention when autograd needs a node)."""
    if _is_compiling():
        return fwd(*args)
    if torch.is_grad_enabled() and (args[0].requires_grad or args[1].requires_grad or args[2].requires_grad or (
            len(args) > _SINKS and args[_SINKS] is not None and args[_SINKS].requires_grad)):
        return _Attention.apply(*args)
    return fwd_impl(*args)
