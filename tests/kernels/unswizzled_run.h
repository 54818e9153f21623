// The kept unswizzled copy of flash_fwd (tests/kernels/mutants) run on the
// emulator over one CTA of queries and `tiles` key tiles, as
// profile::emulate_per_key_tile runs the kernels: the "before" of the
// shared-traffic checks and of docs/perf/layouts.md.
#pragma once

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "emulator/emulator.h"
#include "mutants/unswizzled.cuh"
#include "runtime/launch/flash_fwd_params.h"

namespace attune::testing {

template <int kD, int kBlockM, int kBlockN, int kWarpsM, int kWarpsN, int kStages, int kQRegs, class D>
emu::LaunchCounters run_unswizzled(const Variant& variant, DType dtype, int tiles) {
  const std::int64_t sk = static_cast<std::int64_t>(tiles) * kBlockN;
  const AttentionProblem p =
      make_problem(std::vector<std::int64_t>{1, kBlockM, 1, kD}, std::vector<std::int64_t>{1, sk, 1, kD},
                   std::vector<std::int64_t>{1, sk, 1, kD}, {.dtype = dtype});
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const auto random = [&](std::int64_t n) {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(n));
    for (auto& x : out) x = float_to_bits(dtype, normal(rng));
    return out;
  };
  const auto q = random(q_extent(p));
  const auto k = random(k_extent(p));
  const auto v = random(v_extent(p));
  std::vector<std::uint16_t> o(static_cast<std::size_t>(o_extent(p)));
  emu::Emulator emulator;
  emulator.register_buffer("Q", q.data(), q.size() * 2);
  emulator.register_buffer("K", k.data(), k.size() * 2);
  emulator.register_buffer("V", v.data(), v.size() * 2);
  emulator.register_buffer("O", o.data(), o.size() * 2);
  const FlashFwdParams params = flash_fwd_params(p, {q.data(), k.data(), v.data(), o.data(), nullptr}, {});
  emulator.launch(&unswizzled::flash_fwd<kD, kBlockM, kBlockN, kWarpsM, kWarpsN, kStages, kQRegs, D, 0, 0, 0, 0>,
                  flash_fwd_launch(p, variant), std::bit_cast<unswizzled::FlashFwdParams>(params));
  return emulator.counters();
}

}  // namespace attune::testing
