// The seed families of attention problems that every correctness test runs:
// irregular sizes, each mask kind, empty rows, padding, GQA, windows and
// packed variable length, with inputs stored in a 16-bit dtype.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/problem.h"

namespace attune::testing {

struct Family {
  std::string name;
  std::vector<int64_t> q_shape, k_shape, v_shape;
  ProblemOptions options;
  float input_shift = 0.0F;   // added to every Q and K element (large common logits)
  float input_spread = 1.0F;  // standard deviation of Q and K elements (wide logit spans)
};

// Q, K and V of a family as 16-bit patterns of the problem's dtype, in the
// problem's (contiguous) layout.
struct Inputs {
  AttentionProblem problem;
  std::vector<std::uint16_t> q, k, v;
};

inline std::vector<Family> seed_families(DType dtype = DType::kBF16) {
  const auto opts = [dtype](Mask mask) { return ProblemOptions{.dtype = dtype, .mask = mask}; };
  std::vector<Family> f;
  f.push_back({"noncausal_irregular", {1, 5, 1, 4}, {1, 9, 1, 4}, {1, 9, 1, 3}, opts(Mask::none())});
  f.push_back({"square_causal", {1, 7, 1, 5}, {1, 7, 1, 5}, {1, 7, 1, 2}, opts(Mask::causal_bottom_right())});
  f.push_back({"bottom_right_wide", {1, 2, 1, 1}, {1, 6, 1, 1}, {1, 6, 1, 1}, opts(Mask::causal_bottom_right())});
  f.push_back(
      {"bottom_right_empty_prefix", {1, 5, 1, 1}, {1, 2, 1, 1}, {1, 2, 1, 1}, opts(Mask::causal_bottom_right())});
  f.push_back({"top_left_wide", {1, 5, 1, 3}, {1, 8, 1, 3}, {1, 8, 1, 2}, opts(Mask::causal_top_left())});
  f.push_back({"top_left_tall", {1, 8, 1, 3}, {1, 5, 1, 3}, {1, 5, 1, 2}, opts(Mask::causal_top_left())});
  {
    Family pad{"padding_empty_rows", {3, 6, 2, 4}, {3, 10, 2, 4}, {3, 10, 2, 3}, opts(Mask::none())};
    pad.options.seqlens_k = {10, 3, 0};
    f.push_back(pad);
    pad.name = "padding_causal";
    pad.options.mask = Mask::causal_bottom_right();
    f.push_back(pad);
  }
  f.push_back({"empty_key_axis", {1, 4, 1, 4}, {1, 0, 1, 4}, {1, 0, 1, 2}, opts(Mask::none())});
  {
    Family shift{"large_common_shift", {1, 6, 1, 2}, {1, 11, 1, 2}, {1, 11, 1, 3}, opts(Mask::none())};
    shift.input_shift = 30.0F;  // logits near scale * 2 * 900, about 1270
    shift.input_spread = 0.05F;
    f.push_back(shift);
    Family wide{"wide_logit_span", {1, 6, 1, 4}, {1, 11, 1, 4}, {1, 11, 1, 3}, opts(Mask::causal_bottom_right())};
    wide.input_spread = 9.0F;  // logits spread over hundreds
    f.push_back(wide);
  }
  f.push_back({"gqa_3_to_1", {2, 7, 6, 8}, {2, 11, 2, 8}, {2, 11, 2, 5}, opts(Mask::causal_bottom_right())});
  f.push_back({"mqa", {2, 7, 4, 8}, {2, 11, 1, 8}, {2, 11, 1, 5}, opts(Mask::none())});
  f.push_back({"window_2_0", {1, 9, 1, 4}, {1, 12, 1, 4}, {1, 12, 1, 3}, opts(Mask::window(2, 0))});
  f.push_back({"window_3_2_tall", {1, 12, 1, 4}, {1, 9, 1, 4}, {1, 9, 1, 3}, opts(Mask::window(3, 2))});
  f.push_back({"window_0_0", {1, 12, 1, 4}, {1, 9, 1, 4}, {1, 9, 1, 3}, opts(Mask::window(0, 0))});
  f.push_back({"window_left_unbounded", {1, 9, 1, 4}, {1, 12, 1, 4}, {1, 12, 1, 3}, opts(Mask::window(-1, 1))});
  {
    Family packed{"packed_varlen", {9, 4, 6}, {11, 2, 6}, {11, 2, 5}, opts(Mask::none())};
    packed.options.cu_seqlens_q = {0, 3, 3, 9, 9};
    packed.options.cu_seqlens_k = {0, 5, 9, 11, 11};
    f.push_back(packed);
    packed.name = "packed_varlen_causal";
    packed.options.mask = Mask::causal_bottom_right();
    f.push_back(packed);
    packed.name = "packed_varlen_window";
    packed.options.mask = Mask::window(1, 1);
    f.push_back(packed);
  }
  return f;
}

// FlashAttention's odd sequence-length pairs (Sq x Sk), each without a mask
// and with bottom-right causal, at head dims dk, dv; GQA 2:1.
inline std::vector<Family> odd_length_families(DType dtype, int64_t dk, int64_t dv) {
  const std::pair<int64_t, int64_t> pairs[] = {{113, 203}, {128, 217}, {108, 256}, {1, 239}, {3, 799}, {127, 512}};
  std::vector<Family> f;
  for (const auto& [sq, sk] : pairs) {
    for (const Mask& mask : {Mask::none(), Mask::causal_bottom_right()}) {
      f.push_back({std::to_string(sq) + "x" + std::to_string(sk) + "_" + std::string(to_string(mask.kind)),
                   {1, sq, 2, dk},
                   {1, sk, 1, dk},
                   {1, sk, 1, dv},
                   ProblemOptions{.dtype = dtype, .mask = mask}});
    }
  }
  return f;
}

inline std::vector<std::uint16_t> random_bits(int64_t count, DType dtype, float shift, float spread,
                                              std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0F, spread);
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(count));
  for (auto& b : bits) b = float_to_bits(dtype, shift + normal(rng));
  return bits;
}

inline Inputs make_inputs(const Family& family, unsigned seed = 1234) {
  Inputs in{make_problem(family.q_shape, family.k_shape, family.v_shape, family.options), {}, {}, {}};
  std::mt19937 rng(seed);
  const AttentionProblem& p = in.problem;
  in.q = random_bits(q_extent(p), p.dtype, family.input_shift, family.input_spread, rng);
  in.k = random_bits(k_extent(p), p.k_dtype(), family.input_shift, family.input_spread, rng);
  in.v = random_bits(v_extent(p), p.k_dtype(), 0.0F, 1.0F, rng);
  return in;
}

// Largest |scale * q.k| over every query and key of the same batch entry and
// head, masked or not: sets the scale of rounding errors in the logits.
inline double max_abs_logit(const Inputs& in) {
  const AttentionProblem& p = in.problem;
  double worst = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SequenceExtent s = p.sequence(b);
    for (int64_t h = 0; h < p.heads_q; ++h)
      for (int64_t i = 0; i < s.q_len; ++i)
        for (int64_t j = 0; j < s.k_len; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < p.head_dim_k; ++d) {
            dot +=
                static_cast<double>(bits_to_float(
                    p.dtype, in.q[static_cast<std::size_t>(element_offset(p.q_strides, b, s.q_begin + i, h) + d)])) *
                bits_to_float(
                    p.dtype,
                    in.k[static_cast<std::size_t>(element_offset(p.k_strides, b, s.k_begin + j, p.kv_head_of(h)) + d)]);
          }
          worst = std::max(worst, std::abs(p.softmax_scale() * dot));
        }
  }
  return worst;
}

}  // namespace attune::testing
