"""Tuning from Python: which variant a call runs and why (`explain`), and
`tune`, which runs the CLI's tuner over the problems a model dispatched
(`record`), each candidate in an isolated worker, with progress. After
`tune`, this process dispatches from the new results."""
import os
import subprocess
import sys
import tempfile
from collections import namedtuple

from . import _calls as calls
from . import _engine as engine
from . import _interface as interface
from . import _native as native
from ._errors import InvalidArgument

# copies: the inputs the call copies before the kernels read them, each with why
Choice = namedtuple("Choice", "variant rule detail copies", defaults=((),))


def _arrays(x):
    if type(x).__module__ == "numpy":
        from . import _numpy
        return _numpy.ARRAYS
    from . import _torch
    return _torch.ARRAYS


def explain(q, k, v, *, causal=False, window_size=(-1, -1), softmax_scale=None, softcap=0.0, op="fwd",
            cu_seqlens_q=None, cu_seqlens_k=None, cache_seqlens=None, block_table=None, max_seqlen_q=0,
            max_seqlen_k=0, num_splits=0, deterministic=False):
    """Choice(variant, rule, detail, copies): the variant a call with these
    arguments runs on its device, the rule that chose it ("tuned",
    "nearest-tuned", "heuristic"), and the inputs the call copies first
    (a strided last dimension; for the backward, any input that is not
    contiguous), each with why. op: "fwd", "decode" (a KV cache) or "bwd".
    Length arrays are read, so they must be on the CPU."""
    if op not in ("fwd", "decode", "bwd"):
        raise InvalidArgument(f"op: got {op!r}; expected fwd, decode or bwd")
    # The same copies the call makes, so the plan explained is the one it runs.
    q, k, v, copies = interface.contiguous_rows(q, k, v, copy_kv=op != "decode")
    if op == "bwd":
        q, k, v, more = _contiguous_for_backward(q, k, v)
        copies += more
    mask, window = engine.mask_of(causal, window_size)
    spec = engine.Spec(scale=engine.default_scale(q.shape[-1]) if softmax_scale is None else float(softmax_scale),
                       mask=mask, window=window, softcap=float(softcap))
    variant, rule, detail = calls.explain(_arrays(q), q, k, v, spec, op=op, cu_seqlens_q=cu_seqlens_q,
                                          cu_seqlens_k=cu_seqlens_k, seqlens_k=cache_seqlens,
                                          block_table=block_table, max_seqlen_q=max_seqlen_q,
                                          max_seqlen_k=max_seqlen_k, num_splits=num_splits,
                                          deterministic=deterministic)
    return Choice(variant, rule, detail, copies)


def _contiguous_for_backward(q, k, v):
    """What attune::bwd does to its inputs (the packed functions' views, for
    one): the backward writes each gradient laid out like its input, and
    the gradients are contiguous tensors."""
    inputs, copies = [q, k, v], []
    for i, name in enumerate(("q", "k", "v")):
        x = inputs[i]
        if type(x).__module__ == "numpy":
            import numpy as np
            if x.flags.c_contiguous:
                continue
            strides = [s // x.itemsize for s in x.strides]
            inputs[i] = np.ascontiguousarray(x)
        else:
            if x.is_contiguous():
                continue
            strides = list(x.stride())
            inputs[i] = x.contiguous()
        copies.append(f"{name}: strides {strides}, copied contiguous for the backward (its gradient is written "
                      "laid out like it)")
    return (*inputs, tuple(copies))


def _pow2(n):
    p = 1
    while p < n:
        p *= 2
    return p


def sweeps(problems):
    """Sweep files (tuner/sweep.h) covering recorded problems: one per op,
    dtype, head dim, mask and modifier set, over the problems' sequence
    lengths and batch x heads, each rounded up to its key's power-of-two
    bucket (the dispatcher keys by bucket). Problems the tuner has no axis
    for are left out, with the reason."""
    groups, skipped = {}, []
    for p in problems:
        if p.dtype in ("fp32", "fp64"):
            skipped.append((p, f"{p.dtype} runs on the fp64 reference, which is not tuned"))
            continue
        if p.dtype not in ("bf16", "fp16"):
            skipped.append((p, f"{p.dtype}: the sweeps made here tune 16-bit inputs, not fp8 ones"))
            continue
        if p.head_dim_k != p.head_dim_v:
            skipped.append((p, "Dk != Dv: the tuner's sweeps tune Dk = Dv"))
            continue
        if p.mask == "window":
            skipped.append((p, "sliding windows are not a sweep axis"))
            continue
        on = (("softcap", p.softcap), ("sinks", p.sinks), ("alibi", p.alibi), ("dropout", p.dropout))
        mods = "+".join(m for m, used in on if used) or "none"
        key = (p.op, p.dtype, p.head_dim_k, p.mask, mods)
        g = groups.setdefault(key, {"seqlens": set(), "batch_heads": set(), "queries": set(), "gqa": set()})
        if p.op == "decode":
            g["seqlens"].add(_pow2(p.seqlen_k))
            g["queries"].add(p.seqlen_q)
            g["gqa"].add(p.heads_q // max(p.heads_kv, 1))
            g["batch_heads"].add((p.batch, p.heads_kv))
        else:
            g["seqlens"].add(_pow2(max(p.seqlen_q, p.seqlen_k)))
            g["batch_heads"].add((p.batch, p.heads_q))
    files = []
    for (op, dtype, d, mask, mods), g in groups.items():
        lines = [f"op = {op}", f"dtypes = {dtype}", f"head_dims = {d}", f"masks = {mask}",
                 f"modifiers = {mods}", "seqlens = " + ", ".join(str(s) for s in sorted(g["seqlens"])),
                 "batch_heads = " + ", ".join(f"{b}x{h}" for b, h in sorted(g["batch_heads"]))]
        if op == "decode":
            lines.append("queries = " + ", ".join(str(x) for x in sorted(g["queries"])))
            if len(g["gqa"]) > 1:
                skipped.append((None, f"decode with several GQA ratios {sorted(g['gqa'])}: tuned with the largest"))
            lines.append(f"gqa = {max(g['gqa'])}")
        files.append("\n".join(lines) + "\n")
    return files, skipped


def _default_backend():
    out = subprocess.run([native.cli_path(), "doctor"], capture_output=True, text=True)
    return "cuda" if any(line.startswith("gpu use:") and "ready" in line for line in out.stdout.splitlines()) \
        else "emu"


def tune(problems, backend=None, db=None, max_variants=None, isolate=True, progress=True, extra_args=()):
    """Tunes `problems` (attune.record's) with `attune tune`, one sweep per
    problem class, into `db` (None: the default database). backend: "cuda",
    "emu", or None for the GPU when one is usable. Progress lines go to
    stderr; a failed sweep raises with the tuner's message. Afterwards the
    runtimes of this process dispatch from the database (attune.reset())."""
    problems = list(problems)
    if not problems:
        raise InvalidArgument("tune: no problems; expected those of attune.record() (run the model inside it)")
    backend = backend or _default_backend()
    if backend not in ("cuda", "emu"):
        raise InvalidArgument(f"backend: got {backend!r}; expected cuda or emu")
    files, skipped = sweeps(problems)
    for p, why in skipped:
        print(f"attune.tune: skipped {p}: {why}" if p else f"attune.tune: {why}", file=sys.stderr)
    cli = native.cli_path()
    with tempfile.TemporaryDirectory(prefix="attune_tune_") as tmp:
        for i, text in enumerate(files):
            path = os.path.join(tmp, f"sweep{i}.txt")
            with open(path, "w") as f:
                f.write(text)
            args = [cli, "tune", "--backend", backend, "--sweep", path, "--isolate", "yes" if isolate else "no"]
            if db is not None:
                args += ["--db", os.fspath(db)]
            if max_variants is not None:
                args += ["--max-variants", str(int(max_variants))]
            args += list(extra_args)
            if progress:
                print(f"attune.tune: sweep {i + 1}/{len(files)}: " + text.replace("\n", "; ").strip("; "),
                      file=sys.stderr)
            r = subprocess.run(args, stdout=subprocess.PIPE, stderr=None if progress else subprocess.PIPE,
                               text=True)
            if r.returncode != 0:
                raise RuntimeError(f"attune tune failed (exit {r.returncode}): {(r.stderr or '').strip()}"
                                   f" {r.stdout.strip()}")
            if progress:
                print(r.stdout.strip(), file=sys.stderr)
    if db is not None and engine._tuning_db is None:
        engine.set_tuning_db(db)
    else:
        engine.reset()
    return len(files)
