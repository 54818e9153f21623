"""Correctness for the GPU check: the fp64 oracle, FlashAttention's accuracy
rule, and diagnostics a developer without a GPU can act on.

The rule is reference/accuracy.h's: O error <= 2 x the error of attention
computed naively in the storage dtype + 1e-5, LSE error relative, empty rows
(LSE -inf, O 0) matching, no NaN. On a mismatch `diagnose` says where the
error lives: NaN/Inf counts, the worst element with its (batch, row, head,
column), the worst error per 64 x 16 block of O and per 8 x 8 group folded
over the 64 x 64 tiles (fragment and swizzle bugs show as a pattern there),
and the fraction of rows that are wrong.
"""
import math


def sequences(q_len, k_len, cu_q=None, cu_k=None, batch=1):
    """[(q_begin, q_len, k_begin, k_len)] per sequence."""
    if cu_q is None:
        return [(0, q_len, 0, k_len)] * batch
    return [(cu_q[b], cu_q[b + 1] - cu_q[b], cu_k[b], cu_k[b + 1] - cu_k[b]) for b in range(len(cu_q) - 1)]


def attention(q, k, v, mask, scale, cu_q=None, cu_k=None, storage=None, weights=None, p_storage=None):
    """O [..., Hq, Dv] and LSE [B, Hq, Sq] (packed: [Hq, T]) of the contract.
    q, k, v: [B, S, H, D] (or packed [T, H, D]) in any float dtype; the math
    runs in float64 (storage None) or, with storage = the input dtype, the
    naive way: scores and probabilities rounded to it, fp32 accumulation.
    weights [B, Hq, Sq, Sk] (dense only): dropout's, 0 or 1 / (1 - p), on P
    after the softmax (LSE without them). p_storage (with storage): the
    probabilities rounded to it first, as fp8 attention's P V takes them
    (docs/contract.md, "FP8 inputs")."""
    import torch
    packed = cu_q is not None
    if not packed:
        batch, sq, hq, _ = q.shape
        sk = k.shape[1]
        qs, ks, vs = q, k, v
    else:
        batch, sq, sk, hq = len(cu_q) - 1, None, None, q.shape[1]
    work = torch.float64 if storage is None else torch.float32
    hkv = k.shape[-2]
    group = hq // hkv
    o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=work, device=q.device)
    lse_shape = (hq, q.shape[0]) if packed else (batch, hq, sq)
    lse = torch.full(lse_shape, -math.inf, dtype=work, device=q.device)
    for b, (q0, ql, k0, kl) in enumerate(sequences(sq, sk, cu_q, cu_k, batch)):
        if packed:
            qb, kb, vb = q[q0:q0 + ql], k[k0:k0 + kl], v[k0:k0 + kl]
        else:
            qb, kb, vb = qs[b], ks[b], vs[b]
        if ql == 0 or kl == 0:
            continue
        qh = qb.permute(1, 0, 2).to(work)                                       # [Hq, ql, D]
        kh = kb.permute(1, 0, 2).to(work).repeat_interleave(group, dim=0)        # [Hq, kl, D]
        vh = vb.permute(1, 0, 2).to(work).repeat_interleave(group, dim=0)
        s = torch.matmul(qh, kh.transpose(1, 2)) * scale
        if storage is not None:
            s = s.to(storage).to(work)
        if mask == "causal":
            i = torch.arange(ql, device=q.device).view(-1, 1)
            j = torch.arange(kl, device=q.device).view(1, -1)
            s = s.masked_fill(j > i + (kl - ql), -math.inf)
        m = s.amax(-1, keepdim=True)
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m_safe)
        l = e.sum(-1, keepdim=True)
        p = e / torch.where(l > 0, l, torch.ones_like(l))
        if storage is not None and p_storage is not None:
            p = p.to(p_storage).to(work)
        if storage is not None:
            p = p.to(storage).to(work)
        if weights is not None:
            p = p * weights[b].to(work)
            if storage is not None:
                p = p.to(storage).to(work)
        ob = torch.matmul(p, vh).permute(1, 0, 2)                              # [ql, Hq, Dv]
        row_lse = torch.where(l[..., 0] > 0, m_safe[..., 0] + torch.log(l[..., 0]),
                              torch.full_like(l[..., 0], -math.inf))
        if storage is not None:
            ob = ob.to(storage).to(work)
        if packed:
            o[q0:q0 + ql] = ob
            lse[:, q0:q0 + ql] = row_lse
        else:
            o[b] = ob
            lse[b] = row_lse
    return o, lse


def errors(o, lse, want_o, want_lse):
    """(max |O err|, max relative LSE err, mismatch text or "")."""
    import torch
    of = o.to(torch.float64)
    nan = torch.isnan(of)
    if nan.any():
        idx = torch.nonzero(nan)[0].tolist()
        return math.inf, math.inf, "O%s is NaN (%d NaN in O)" % (idx, int(nan.sum()))
    lf = lse.to(torch.float64)
    got_empty = torch.isneginf(lf)
    want_empty = torch.isneginf(want_lse)
    bad = torch.isnan(lf) | (got_empty != want_empty)
    if bad.any():
        idx = torch.nonzero(bad)[0]
        return math.inf, math.inf, "LSE%s = %s, want %s (%d such entries)" % (
            idx.tolist(), lf[tuple(idx)].item(), want_lse[tuple(idx)].item(), int(bad.sum()))
    o_err = (of - want_o).abs().max().item() if of.numel() else 0.0
    finite = ~want_empty
    lse_err = ((lf - want_lse).abs() / (1 + want_lse.abs()))[finite].max().item() if finite.any() else 0.0
    return o_err, lse_err, ""


def within_rule(got, ref, naive, factor=2.0):
    """(ok, text, numbers) of FlashAttention's rule for (O, LSE) pairs."""
    g_o, g_l, g_why = errors(got[0], got[1], ref[0], ref[1])
    n_o, n_l, _ = errors(naive[0], naive[1], ref[0], ref[1])
    o_limit, l_limit = factor * n_o + 1e-5, factor * n_l + 1e-5
    numbers = {"o_error": g_o, "o_limit": o_limit, "lse_error": g_l, "lse_limit": l_limit}
    if g_why:
        return False, g_why, numbers
    ok = g_o <= o_limit and g_l <= l_limit
    text = "O error %.2e (limit %.2e), LSE error %.2e (limit %.2e)" % (g_o, o_limit, g_l, l_limit)
    return ok, text, numbers


def _blocks(err, rows, cols):
    """Max of err [R, C] over blocks of rows x cols: [ceil(R/rows), ceil(C/cols)]."""
    import torch
    r, c = err.shape
    pad = torch.zeros(((r + rows - 1) // rows) * rows, ((c + cols - 1) // cols) * cols, dtype=err.dtype,
                      device=err.device)
    pad[:r, :c] = err
    return pad.view(pad.shape[0] // rows, rows, pad.shape[1] // cols, cols).amax(dim=(1, 3))


def diagnose(o, want_o, limit, packed=False):
    """Where O is wrong: a dict for the record and lines for the report.
    o, want_o: [B, S, H, D] (packed [T, H, D])."""
    import torch
    of = o.to(torch.float64)
    want = want_o.to(torch.float64)
    if packed:
        of, want = of.unsqueeze(0), want.unsqueeze(0)
    b, s, h, d = of.shape
    err = (of - want).abs()
    nan, inf = int(torch.isnan(of).sum()), int(torch.isinf(of).sum())
    err = torch.where(torch.isfinite(of), err, torch.full_like(err, math.inf))
    flat = int(torch.argmax(torch.nan_to_num(err, posinf=1e300)))
    wb, rem = divmod(flat, s * h * d)
    wr, rem = divmod(rem, h * d)
    wh, wc = divmod(rem, d)
    worst = err.view(-1)[flat].item()
    rows_bad = (err > limit).any(dim=-1)  # [B, S, H]
    # One (row, column) plane per (batch, head): rows of the sequence, columns of D.
    per_plane = err.permute(0, 2, 1, 3)  # [B, H, S, D]
    blocks = torch.stack([_blocks(per_plane[i, j], 64, 16) for i in range(b) for j in range(h)]).amax(0)
    # 8 x 8 groups of a 64 x 64 tile, folded over every tile of every (batch, head).
    pad_s, pad_d = (s + 63) // 64 * 64, (d + 63) // 64 * 64
    folded = torch.zeros(b, h, pad_s, pad_d, dtype=err.dtype, device=err.device)
    folded[:, :, :s, :d] = torch.nan_to_num(per_plane, posinf=1e300)
    groups = folded.view(b, h, pad_s // 64, 8, 8, pad_d // 64, 8, 8).amax(dim=(0, 1, 2, 4, 5, 7))
    record = {
        "nan": nan, "inf": inf, "worst": worst, "worst_at": {"batch": wb, "row": wr, "head": wh, "column": wc},
        "got": of[wb, wr, wh, wc].item(), "want": want[wb, wr, wh, wc].item(),
        "wrong_row_fraction": float(rows_bad.float().mean()), "limit": limit,
        "block_64x16_max": blocks.tolist(), "group_8x8_max": groups.tolist(),
    }
    lines = ["NaN %d, Inf %d in O; worst |err| %.3e at (batch %d, row %d, head %d, column %d): got %.5g, want %.5g; "
             "%.1f%% of rows wrong (limit %.2e)" % (nan, inf, worst, wb, wr, wh, wc, record["got"], record["want"],
                                                    100 * record["wrong_row_fraction"], limit)]
    lines.append("worst |err| per 64 x 16 block (rows down, columns across; '.' <= limit, '#' > 10x):")
    for r in blocks.tolist():
        lines.append("  " + "".join("." if x <= limit else ("#" if x > 10 * limit else "o") for x in r))
    lines.append("worst |err| per 8 x 8 group of a 64 x 64 tile, folded over all tiles:")
    for r in groups.tolist():
        lines.append("  " + " ".join("%8.1e" % x for x in r))
    return record, lines


def verdict(gpu_ok, emu_ok, gpu_vs_emu):
    """What a failing case's comparison with the emulator means."""
    if gpu_ok:
        return "GPU passes"
    if emu_ok is None:
        return "not compared with the emulator"
    if not emu_ok and gpu_vs_emu:
        return "GPU = emulator (logic bug: the emulator fails the same way; reproduce on a CPU)"
    if emu_ok:
        return "GPU != emulator (model bug: the emulator passes; the hardware disagrees with its model)"
    return "GPU != emulator, both wrong (two bugs, or a race)"
