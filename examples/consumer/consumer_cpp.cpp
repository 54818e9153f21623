// A program outside attune's tree that uses the installed C++ API
// (attune::attune): a small dense forward attention with grouped-query heads
// on the emulator backend, whose buffers are host memory with bf16 values
// stored as uint16_t bit patterns, checked against a naive double-precision
// softmax(Q K^T scale) V written here. Prints "ok" and returns 0, or the
// largest error and returns 1.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/error.h"
#include "runtime/runtime.h"

namespace {

constexpr int64_t kBatch = 2;
constexpr int64_t kSeqQ = 13;
constexpr int64_t kSeqK = 21;
constexpr int64_t kHeadsQ = 4;
constexpr int64_t kHeadsKv = 2;
constexpr int64_t kDim = 32;
constexpr double kTolerance = 2e-2;  // absolute, on bf16 outputs of values in [-1, 1]

// Deterministic values in [-1, 1), rounded to bf16 by attune's own conversion.
std::vector<std::uint16_t> make_values(int64_t count, std::uint32_t seed) {
  std::vector<std::uint16_t> data(static_cast<std::size_t>(count));
  for (std::uint16_t& element : data) {
    seed = seed * 1664525U + 1013904223U;
    element = attune::float_to_bfloat16_bits(static_cast<float>(seed >> 8) / static_cast<float>(1U << 23) - 1.0F);
  }
  return data;
}

double value(const std::vector<std::uint16_t>& tensor, std::size_t at) {
  return attune::bfloat16_bits_to_float(tensor[at]);
}

// Element offsets of contiguous [batch, seq, heads, dim] tensors.
std::size_t q_at(int64_t b, int64_t i, int64_t h, int64_t d) {
  return static_cast<std::size_t>(((b * kSeqQ + i) * kHeadsQ + h) * kDim + d);
}
std::size_t kv_at(int64_t b, int64_t j, int64_t h, int64_t d) {
  return static_cast<std::size_t>(((b * kSeqK + j) * kHeadsKv + h) * kDim + d);
}

// The largest |O - softmax(Q K^T scale) V| over every element (NaN counts as the worst).
double max_error(const std::vector<std::uint16_t>& q, const std::vector<std::uint16_t>& k,
                 const std::vector<std::uint16_t>& v, const std::vector<std::uint16_t>& o) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  double worst = 0;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h = 0; h < kHeadsQ; ++h) {
      const int64_t hk = h / (kHeadsQ / kHeadsKv);
      for (int64_t i = 0; i < kSeqQ; ++i) {
        std::vector<double> weight(static_cast<std::size_t>(kSeqK));
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kSeqK; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < kDim; ++d) dot += value(q, q_at(b, i, h, d)) * value(k, kv_at(b, j, hk, d));
          weight[static_cast<std::size_t>(j)] = dot * scale;
          top = std::max(top, dot * scale);
        }
        double sum = 0;
        for (double& w : weight) {
          w = std::exp(w - top);
          sum += w;
        }
        for (int64_t d = 0; d < kDim; ++d) {
          double want = 0;
          for (int64_t j = 0; j < kSeqK; ++j)
            want += weight[static_cast<std::size_t>(j)] * value(v, kv_at(b, j, hk, d));
          const double error = std::abs(value(o, q_at(b, i, h, d)) - want / sum);
          if (!(error <= worst)) worst = error;
        }
      }
    }
  }
  return worst;
}

}  // namespace

int main() {
  const std::vector<std::uint16_t> q = make_values(kBatch * kSeqQ * kHeadsQ * kDim, 1);
  const std::vector<std::uint16_t> k = make_values(kBatch * kSeqK * kHeadsKv * kDim, 2);
  const std::vector<std::uint16_t> v = make_values(kBatch * kSeqK * kHeadsKv * kDim, 3);
  std::vector<std::uint16_t> o(q.size(), 0xFFFF);  // NaN: every element must be written
  try {
    attune::Runtime runtime({.backend = attune::Backend::kEmu});
    const int64_t q_shape[] = {kBatch, kSeqQ, kHeadsQ, kDim};
    const int64_t kv_shape[] = {kBatch, kSeqK, kHeadsKv, kDim};
    const attune::AttentionProblem problem =
        attune::make_problem(q_shape, kv_shape, kv_shape, {.dtype = attune::DType::kBF16});
    runtime.forward(problem, {.q = q.data(), .k = k.data(), .v = v.data(), .o = o.data()});
  } catch (const attune::Error& error) {
    std::fprintf(stderr, "consumer_cpp: %s\n", error.what());
    return 1;
  }
  const double error = max_error(q, k, v, o);
  if (!(error <= kTolerance)) {
    std::printf("consumer_cpp: max |O - reference| = %g, expected at most %g\n", error, kTolerance);
    return 1;
  }
  std::puts("ok");
  return 0;
}
