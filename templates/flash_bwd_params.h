// The params of a backward call, shared by the backward kernel families
// (flash_bwd and its row kernels, flash_bwd_sm90), and where a sequence's
// rows and keys are as the backward sees them.
#pragma once

#include "templates/dropout.h"
#include "templates/flash_tile.cuh"

namespace attune {

// One backward call (device memory), shared by the three kernels. Strides
// are in elements; index arrays are null when unused. The gradients have
// the layouts of their tensors (dQ like Q, dK like K, dV like V, dO like O).
struct FlashBwdParams {
  const u16* q;       // [B, Sq, Hq, Dk] or packed [Tq, Hq, Dk]
  const u16* k;       // [B, Sk, Hkv, Dk]
  const u16* v;       // [B, Sk, Hkv, Dv]
  const u16* o;       // [B, Sq, Hq, Dv]: the forward's output
  const u16* d_o;     // [B, Sq, Hq, Dv]: gradient of the loss with respect to O
  const float* lse;   // [B, Hq, Sq] or packed [Hq, Tq]: the forward's LSE (natural log, -inf for empty rows)
  u16* dq;            // like Q
  u16* dk;            // like K
  u16* dv;            // like V
  float* d;           // workspace [Hq, rows]: D_i = dO_i . O_i
  float* dq_accum;    // workspace [rows, Hq, Dk]: sum_j dS_ij k_j by atomics; null when not used
  float* dq_partial;  // workspace [key blocks, rows, Hq, Dk]: each key block's part; null when not used
  i64 q_batch_stride, q_row_stride, q_head_stride;
  i64 k_batch_stride, k_row_stride, k_head_stride;
  i64 v_batch_stride, v_row_stride, v_head_stride;
  i64 o_batch_stride, o_row_stride, o_head_stride;
  i64 do_batch_stride, do_row_stride, do_head_stride;
  i64 lse_batch_stride, lse_row_stride, lse_head_stride;
  i64 dq_batch_stride, dq_row_stride, dq_head_stride;
  i64 dk_batch_stride, dk_row_stride, dk_head_stride;
  i64 dv_batch_stride, dv_row_stride, dv_head_stride;
  i64 rows;                 // query rows of the workspaces: B x round_up(Sq, 64), or round_up(Tq + 64 B, 64) packed
  const i32* cu_seqlens_q;  // [B+1] packed row offsets
  const i32* cu_seqlens_k;  // [B+1]
  const i32* seqlens_k;     // [B] real keys per sequence (padding)
  i32 seqlen_q;             // dense Sq
  i32 seqlen_k;             // dense Sk
  i32 heads_q;
  i32 group_size;  // Hq / Hkv
  i32 head_dim_k;
  i32 head_dim_v;
  MaskParams mask;
  float scale;                                             // softmax scale: dQ and dK carry it
  float scale_log2;                                        // scale * log2(e): probabilities are computed in base 2
  i32 partial_keys ATTUNE_TUNABLE_OF(flash_bwd, kBlockN);  // keys per dq_partial slice
  i32 vectorized;       // 1: Q, K, V and dO rows start 16-byte aligned, so tiles load with cp.async
  ScoreModParams mods;  // read only by variants that compile modifiers in
  float* dsink;         // [Hq] with sinks: the gradient of the sink logits
  // Added at the end, so variants without it keep their code.
  DropoutParams dropout;  // the forward's, read only by variants with kDropout
  // flash_bwd_sm90's deterministic dQ: one counter per (sequence, query
  // head, query tile of 64 rows), [B, Hq, dq_turn_tiles], cleared by the
  // preprocess; the key blocks add to the tile's accumulator rows in block
  // order, each after the counter reaches its turn. Null when not used.
  i32* dq_turns;
  i32 dq_turn_tiles;
  i32 sequences;  // B: the batch, or the packed sequences (the row kernels' grid z)
};

// The rows of a dQ tile (flash_bwd_sm90's kBlockM): the turn counters'
// unit, and the alignment of every sequence's rows in the workspaces.
inline constexpr i32 kDqTileRows = 64;

namespace bwd_detail {

// A sequence as the backward sees it: where its rows and keys are, and
// where its rows are in the workspaces (dPsum, the dQ accumulator): local
// query row i is workspace row row_base + i. Every sequence's workspace
// rows start on a multiple of kDqTileRows and its last tile ends before the
// next sequence's rows, so a whole-tile write (flash_bwd_sm90's TMA
// reduction of dQ) stays inside its sequence: dense, B x round_up(Sq, 64)
// rows; packed, row_base = round_down(q_begin + 64 b, 64), in round_up(Tq + 64 B, 64)
// rows.
struct BwdSequence : Sequence {
  i64 row_base;
};

ATTUNE_DEVICE BwdSequence sequence(const FlashBwdParams& p, i32 batch) {
  const Sequence s =
      sequence_of<LengthCut::kQuiet>({p.cu_seqlens_q, p.cu_seqlens_k, p.seqlens_k, p.seqlen_q, p.seqlen_k}, batch);
  constexpr i64 kTile = kDqTileRows;
  return {s, p.cu_seqlens_q != nullptr ? (s.q_begin + kTile * batch) / kTile * kTile
                                       : batch * ((p.seqlen_q + kTile - 1) / kTile * kTile)};
}

// The LSE in base 2 and D of local query row `row` of head `head`: +inf and
// 0 for rows past the sequence and rows that saw no key (LSE = -inf), so
// their probabilities are exactly 0, never -inf - -inf.
struct RowStats {
  float lse_log2;
  float d;
};

ATTUNE_DEVICE RowStats row_stats(const FlashBwdParams& p, const BwdSequence& seq, i64 batch, i64 head, i64 row) {
  RowStats r{dev::infinity(), 0.0f};
  if (row < seq.q_len) {
    const float x = dev::load_global(p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride +
                                     (seq.q_begin + row) * p.lse_row_stride);
    r.lse_log2 = x == -dev::infinity() ? dev::infinity() : x * kLog2e;
    r.d = dev::load_global(p.d + head * p.rows + seq.row_base + row);
  }
  return r;
}

}  // namespace bwd_detail
}  // namespace attune
