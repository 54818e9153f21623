// The backward's row kernels, one warp per query row around flash_bwd
// (templates/flash_bwd.cuh): the preprocess (D = rowsum(dO * O), the dQ
// accumulator cleared), the dQ convert, and the sinks' gradient.
#pragma once

#include "templates/flash_bwd.cuh"

namespace attune {

namespace bwd_detail {

// The query row of one head a warp of the row kernels (preprocess, dQ
// convert) owns: grid (row blocks, Hq, B), kWarps rows per block.
struct WarpRow {
  i32 batch;
  i32 head;
  i64 row;  // within the sequence
  BwdSequence seq;

  // False past the sequence's last row: whole warps leave together.
  ATTUNE_DEVICE bool owns_a_row() const { return row < seq.q_len; }
  // Where the row's accumulators of one column start (the dQ accumulator).
  ATTUNE_DEVICE i64 accumulator_offset(const FlashBwdParams& p) const {
    return ((seq.row_base + row) * p.heads_q + head) * p.head_dim_k;
  }
};

template <int kWarps>
ATTUNE_DEVICE WarpRow warp_row(const FlashBwdParams& p) {
  const i32 batch = dev::block_index().z;
  return {batch, dev::block_index().y, static_cast<i64>(dev::block_index().x) * kWarps + dev::warp_id(),
          sequence(p, batch)};
}

}  // namespace bwd_detail

// One warp per query row of one head.
struct FlashBwdPreprocessTunables : WarpPerRowTunables {};

// Grid: (ceil(most query rows of a sequence / kWarps), Hq, B); block:
// kWarps x 32 threads. D_i = dO_i . O_i in fp32 from the stored O and dO;
// zeroes the row's dQ accumulator when there is one, and the turn counter
// of the query tile it starts.
template <int kWarps, class DType>
ATTUNE_KERNEL void flash_bwd_preprocess(FlashBwdParams p) {
  using D = DType;
  const bwd_detail::WarpRow w = bwd_detail::warp_row<kWarps>(p);
  if (!w.owns_a_row()) return;
  const i32 lane = dev::lane_id();
  const i64 global_row = w.seq.q_begin + w.row;
  const u16* o_row = p.o + w.batch * p.o_batch_stride + global_row * p.o_row_stride + w.head * p.o_head_stride;
  const u16* do_row = p.d_o + w.batch * p.do_batch_stride + global_row * p.do_row_stride + w.head * p.do_head_stride;
  float sum = 0.0f;
  for (i32 col = lane; col < p.head_dim_v; col += kWarpSize) {
    sum += dev::to_float<D>(dev::load_global(o_row + col)) * dev::to_float<D>(dev::load_global(do_row + col));
  }
  sum = dev::warp::reduce_sum(sum);
  if (lane == 0) dev::store_global(p.d + w.head * p.rows + w.seq.row_base + w.row, sum);
  if (p.dq_accum != nullptr) {
    float* accum = p.dq_accum + w.accumulator_offset(p);
    for (i32 col = lane; col < p.head_dim_k; col += kWarpSize) dev::store_global(accum + col, 0.0f);
  }
  // The first row of a query tile clears the tile's turn counter.
  if (p.dq_turns != nullptr && lane == 0 && w.row % kDqTileRows == 0) {
    dev::store_global(
        p.dq_turns + (static_cast<i64>(w.batch) * p.heads_q + w.head) * p.dq_turn_tiles + w.row / kDqTileRows, 0);
  }
}

// One warp per query row of one head.
struct FlashBwdDqConvertTunables : WarpPerRowTunables {};

// Grid: (ceil(most query rows of a sequence / kWarps), Hq, B); block:
// kWarps x 32 threads. dQ = scale x the atomic accumulator, or scale x the
// sum, in key-block order, of the slices of the key blocks the row sees
// (exactly the blocks whose CTA wrote the row: a fixed order, so the result
// is the same bits on every run). A row that sees no key gets 0.
template <int kWarps, class DType>
ATTUNE_KERNEL void flash_bwd_dq_convert(FlashBwdParams p) {
  const bwd_detail::WarpRow w = bwd_detail::warp_row<kWarps>(p);
  if (!w.owns_a_row()) return;
  const i64 at = w.accumulator_offset(p);
  // The slices' key blocks (partial_keys is set only where slices exist).
  i64 first_block = 0;
  i64 end_block = 0;
  if (p.dq_partial != nullptr) {
    const KeyBounds bounds = key_bounds(p.mask, w.row, w.seq.q_len, w.seq.k_len);
    first_block = bounds.begin / p.partial_keys;
    end_block = bounds.end > bounds.begin ? (bounds.end + p.partial_keys - 1) / p.partial_keys : first_block;
  }
  const i64 slice = p.rows * p.heads_q * p.head_dim_k;
  u16* dq_row =
      p.dq + w.batch * p.dq_batch_stride + (w.seq.q_begin + w.row) * p.dq_row_stride + w.head * p.dq_head_stride;
  for (i32 col = dev::lane_id(); col < p.head_dim_k; col += kWarpSize) {
    float sum = 0.0f;
    if (p.dq_partial != nullptr) {
      for (i64 n = first_block; n < end_block; ++n) sum += dev::load_global(p.dq_partial + n * slice + at + col);
    } else {
      sum = dev::load_global(p.dq_accum + at + col);
    }
    dev::store_global(dq_row + col, dev::to_bits<DType>(sum * p.scale));
  }
}

// One warp per query head.
struct FlashBwdDsinkTunables : WarpPerRowTunables {};

// Grid: (ceil(Hq / kWarps)); block: kWarps x 32 threads. With sinks, after
// flash_bwd_preprocess: dsink_h = -sum over the rows i of head h of
// e^(sink_h - LSE_i) D_i (LSE holds the sink, so e^(sink - LSE) is the sink's
// probability; an empty row has D = 0). Sequence by sequence, lane l sums
// rows l, l + 32, ... in order, then a fixed butterfly: the same bits on
// every run.
template <int kWarps, class DType>
ATTUNE_KERNEL void flash_bwd_dsink(FlashBwdParams p) {
  const i32 head = dev::block_index().x * kWarps + dev::warp_id();
  if (head >= p.heads_q) return;  // whole warps leave together
  const i32 lane = dev::lane_id();
  const float sink_log2 = dev::load_global(p.mods.sinks + head) * kLog2e;
  const bool packed = p.cu_seqlens_q != nullptr;
  float sum = 0.0f;
  for (i32 batch = 0; batch < p.sequences; ++batch) {
    const bwd_detail::BwdSequence seq = bwd_detail::sequence(p, batch);
    const i64 lse_batch = packed ? 0 : batch;  // packed: one batch of Tq rows
    for (i64 row = lane; row < seq.q_len; row += kWarpSize) {
      const float lse = dev::load_global(p.lse + lse_batch * p.lse_batch_stride + head * p.lse_head_stride +
                                         (seq.q_begin + row) * p.lse_row_stride);
      const float row_d = dev::load_global(p.d + head * p.rows + seq.row_base + row);
      sum += dev::exp2_approx(sink_log2 - lse * kLog2e) * row_d;
    }
  }
  sum = dev::warp::reduce_sum(sum);
  if (lane == 0) dev::store_global(p.dsink + head, -sum);
}

}  // namespace attune
