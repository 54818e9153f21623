// The online softmax: the running state (m, l, u) of attention rows over the
// keys seen so far, and its one rule. In base 2: m is the largest logit seen
// (-inf before any key), l = sum 2^(s - m), u = sum 2^(s - m) v.
//
// The rule: two states over disjoint keys, (m1, l1, u1) and (m2, l2, u2),
// are one state (m, a1 l1 + a2 l2, a1 u1 + a2 u2) with m = max(m1, m2) and
// a_i = 2^(m_i - m): BOTH l and u are rescaled. A new key tile is such a
// state (its probabilities relative to the common maximum); so are the
// partial states of other warps and of other splits of the keys.
#pragma once

#include "templates/fragment.cuh"
#include "templates/numerics.cuh"

namespace attune {

namespace softmax {

// The factors of the rule for maxima m1 and m2. `ref` is the reference point
// of the exponentials: m, or 0 while no key has been seen (m = -inf), which
// keeps -inf - -inf out of the arithmetic.
struct Rescale {
  float m;
  float ref;
  float a1;  // 2^(m1 - m): the factor of the first state's l and u
  float a2;  // 2^(m2 - m): the factor of the second state's
};

ATTUNE_DEVICE Rescale rescale(float m1, float m2) {
  const float m = max2(m1, m2);
  const float ref = m == -dev::infinity() ? 0.0f : m;
  return {m, ref, dev::exp2_approx(m1 - ref), dev::exp2_approx(m2 - ref)};
}

// One row at the end: O = u / l and LSE = ln(sum e^s) = (m + log2 l) ln 2;
// a row that saw no key (l = 0) gives O = 0 and LSE = -inf, never NaN.
struct RowEnd {
  float inv_l;
  float lse;
};

ATTUNE_DEVICE RowEnd finalize(float m, float l) {
  if (!(l > 0.0f)) return {0.0f, -dev::infinity()};
  return {1.0f / l, (m + dev::log2_approx(l)) * kLn2};
}

// The same with a sink: the state merged with one more term of logit
// `sink_log2` (base 2) and no value, (sink, 1, 0), before normalizing.
// inv_l then scales u (relative to m); a row that saw no key gives O = 0
// and LSE = the sink.
ATTUNE_DEVICE RowEnd finalize_with_sink(float m, float l, float sink_log2) {
  const float top = max2(m, sink_log2);  // finite: the sink is
  const float a = l > 0.0f ? dev::exp2_approx(m - top) : 0.0f;
  const float total = a * l + dev::exp2_approx(sink_log2 - top);
  return {a / total, (top + dev::log2_approx(total)) * kLn2};
}

// One row's partial states merged by a warp, the columns spread over its
// lanes (lane, lane + 32, ...): the split-KV combine and merge_states. A part
// (m_i, l_i, u_i) joins by the same rule as the tiles; the caller skips
// parts with no key.
template <int kColsPerLane>
struct LaneRow {
  float m;
  float l;
  float u[kColsPerLane];

  ATTUNE_DEVICE void init() {
    m = -dev::infinity();
    l = 0.0f;
    ATTUNE_UNROLL
    for (int c = 0; c < kColsPerLane; ++c) u[c] = 0.0f;
  }
  // Joins the part of maximum m_part (base 2) and sum l_part whose column
  // `col` (< cols) is value(col).
  template <class Value>
  ATTUNE_DEVICE void join(float m_part, float l_part, i32 lane, i32 cols, const Value& value) {
    const Rescale r = rescale(m, m_part);
    l = r.a1 * l + r.a2 * l_part;
    ATTUNE_UNROLL
    for (int c = 0; c < kColsPerLane; ++c) {
      const i32 col = lane + c * kWarpSize;
      if (col < cols) u[c] = r.a1 * u[c] + r.a2 * value(col);
    }
    m = r.m;
  }
  // Calls store(col, u_col * inv_l) for this lane's columns below `cols`.
  template <class Store>
  ATTUNE_DEVICE void store(i32 lane, i32 cols, float inv_l, const Store& store) const {
    ATTUNE_UNROLL
    for (int c = 0; c < kColsPerLane; ++c) {
      const i32 col = lane + c * kWarpSize;
      if (col < cols) store(col, u[c] * inv_l);
    }
  }
};

}  // namespace softmax

// The rows a thread holds in the accumulator fragments of a warp's
// kMTiles x kDTiles 16 x 8 output tiles (two rows per m-tile,
// frag::acc_row), with their state. A thread holds a quarter of each row's
// keys; merge_quad() completes l over the four lanes of the row.
template <int kMTiles, int kDTiles>
struct OnlineSoftmax {
  static constexpr int kRows = 2 * kMTiles;  // rows held: r = 2 mt + half
  float m[kMTiles][2];
  float l[kMTiles][2];
  float u[kMTiles][kDTiles][4];

  // No key yet: m = -inf, l = 0, u = 0.
  ATTUNE_DEVICE void init() {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        m[mt][half] = -dev::infinity();
        l[mt][half] = 0.0f;
      }
    }
    fill(u, 0.0f);
  }

  // Takes a tile of scaled, masked logits (base 2, -inf where masked) in the
  // accumulator layout of kNTiles 16 x 8 tiles per m-tile: the new maximum
  // of each row (over the quad), l and u rescaled to it, and the tile's mass
  // added to l. On return `s` holds the tile's probabilities relative to the
  // new maximum, ready for u += P V.
  template <int kNTiles>
  ATTUNE_DEVICE void update(float (&s)[kMTiles][kNTiles][4]) {
    float factor[kMTiles][2];
    update_scores(s, factor);
    rescale_u(factor);
  }

  // update() in two steps, for kernels whose u is still being accumulated
  // by an asynchronous P V when the next tile's scores arrive (Hopper's
  // wgmma): the scores, m and l now, and the factor by which u must be
  // multiplied before the tile's P V is added to it.
  //
  // With `scale` (> 0), `s` holds scores whose logits are s * scale: the
  // maximum is taken on them and the scale folded into the exponent, one
  // FFMA per score (exp2(s scale - m), FlashAttention's form). At 1 the
  // multiplications fold away.
  template <int kNTiles>
  ATTUNE_DEVICE void update_scores(float (&s)[kMTiles][kNTiles][4], float (&factor)[kMTiles][2], float scale = 1.0f) {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        float tile_max = -dev::infinity();
        ATTUNE_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          tile_max = max2(tile_max, max2(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        }
        // The four lanes of a quad hold the same row.
        tile_max = max2(tile_max, dev::warp::shfl_xor(tile_max, 1));
        tile_max = max2(tile_max, dev::warp::shfl_xor(tile_max, 2));
        const softmax::Rescale r = softmax::rescale(m[mt][half], tile_max * scale);
        float mass = 0.0f;
        ATTUNE_UNROLL
        for (int nt = 0; nt < kNTiles; ++nt) {
          ATTUNE_UNROLL
          for (int e = 0; e < 2; ++e) {
            const float p = dev::exp2_approx(s[mt][nt][2 * half + e] * scale - r.ref);
            s[mt][nt][2 * half + e] = p;
            mass += p;
          }
        }
        l[mt][half] = r.a1 * l[mt][half] + mass;
        factor[mt][half] = r.a1;
        m[mt][half] = r.m;
      }
    }
  }

  // u *= factor, row by row (the second step of update()).
  ATTUNE_DEVICE void rescale_u(const float (&factor)[kMTiles][2]) {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        ATTUNE_UNROLL
        for (int dt = 0; dt < kDTiles; ++dt) {
          u[mt][dt][2 * half] *= factor[mt][half];
          u[mt][dt][2 * half + 1] *= factor[mt][half];
        }
      }
    }
  }

  // Completes each row's l over the four lanes of its quad (after the key loop).
  ATTUNE_DEVICE void merge_quad() {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        l[mt][half] += dev::warp::shfl_xor(l[mt][half], 1);
        l[mt][half] += dev::warp::shfl_xor(l[mt][half], 2);
      }
    }
  }

  // Merges, into each row this thread holds, another state of the same row
  // over disjoint keys: source(row) gives it as an object with members `m`
  // and `l` and a function u(col) for its u at head-dim column `col` (`row`
  // counted from the warp's first row). An empty state (l = 0) is skipped
  // explicitly.
  template <class Source>
  ATTUNE_DEVICE void merge_rows(i32 lane, const Source& source) {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        const auto other = source(mt * 16 + frag::acc_row(lane, half));
        if (!(other.l > 0.0f)) continue;
        const softmax::Rescale r = softmax::rescale(m[mt][half], other.m);
        l[mt][half] = r.a1 * l[mt][half] + r.a2 * other.l;
        ATTUNE_UNROLL
        for (int dt = 0; dt < kDTiles; ++dt) {
          ATTUNE_UNROLL
          for (int e = 0; e < 2; ++e) {
            u[mt][dt][2 * half + e] = r.a1 * u[mt][dt][2 * half + e] + r.a2 * other.u(column(lane, dt, e));
          }
        }
        m[mt][half] = r.m;
      }
    }
  }

  // One held row for the epilogue: its state and its u elements, element
  // (dt, e) at head-dim column column(lane, dt, e).
  struct Row {
    float m;
    float l;
    float u[kDTiles][2];
  };
  ATTUNE_DEVICE static i32 column(i32 lane, int dt, int e) { return dt * 8 + frag::acc_col(lane, e); }

  // Calls fn(row, Row) for each row this thread holds, `row` counted from
  // the warp's first row.
  template <class Fn>
  ATTUNE_DEVICE void for_each_row(i32 lane, const Fn& fn) const {
    ATTUNE_UNROLL
    for (int mt = 0; mt < kMTiles; ++mt) {
      ATTUNE_UNROLL
      for (int half = 0; half < 2; ++half) {
        Row row;
        row.m = m[mt][half];
        row.l = l[mt][half];
        ATTUNE_UNROLL
        for (int dt = 0; dt < kDTiles; ++dt) {
          ATTUNE_UNROLL
          for (int e = 0; e < 2; ++e) row.u[dt][e] = u[mt][dt][2 * half + e];
        }
        fn(mt * 16 + frag::acc_row(lane, half), row);
      }
    }
  }
};

// update() for kernels whose P V runs asynchronously (Hopper's wgmma): step()
// takes a tile's scores at once (m, l and P) and leaves u's factor owed,
// because the previous tile's P V may still be adding into u. The factor is
// paid exactly once before the tile's own P V is issued: by settle() at a
// point where no P V is in flight, or, with `pay_in_turn`, by before_pv()
// right before that P V's issue (behind the next S GEMM).
template <int kMTiles, int kDTiles>
struct DeferredRescale {
  using Softmax = OnlineSoftmax<kMTiles, kDTiles>;
  bool pay_in_turn;
  float factor[kMTiles][2];

  template <int kNTiles>
  ATTUNE_DEVICE void step(Softmax& softmax, float (&s)[kMTiles][kNTiles][4], float scale = 1.0f) {
    softmax.update_scores(s, factor, scale);
  }
  ATTUNE_DEVICE void settle(Softmax& softmax) const {
    if (!pay_in_turn) softmax.rescale_u(factor);
  }
  ATTUNE_DEVICE void before_pv(Softmax& softmax) const {
    if (pay_in_turn) softmax.rescale_u(factor);
  }
};

}  // namespace attune
