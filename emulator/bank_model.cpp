#include "emulator/bank_model.h"

#include <algorithm>
#include <array>
#include <vector>

namespace attune::emu {

namespace {

constexpr int kBanks = 32;
constexpr std::uint64_t kBankBytes = 4;
constexpr std::uint64_t kWavefrontBytes = kBanks * kBankBytes;  // 128

// Wavefronts of one phase: the most distinct words any bank serves.
std::uint64_t phase_wavefronts(const std::vector<std::pair<std::uint64_t, std::uint32_t>>& accesses) {
  std::array<std::vector<std::uint64_t>, kBanks> words;
  for (const auto& [offset, bytes] : accesses) {
    for (std::uint64_t word = offset / kBankBytes; word * kBankBytes < offset + bytes; ++word) {
      auto& bank = words[static_cast<std::size_t>(word % kBanks)];
      if (std::find(bank.begin(), bank.end(), word) == bank.end()) bank.push_back(word);
    }
  }
  std::uint64_t most = 0;
  for (const auto& bank : words) most = std::max<std::uint64_t>(most, bank.size());
  return most;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

}  // namespace

Wavefronts access_wavefronts(std::span<const LaneAccess> lanes) {
  Wavefronts w;
  if (lanes.empty()) return w;
  std::uint32_t width = 0;
  for (const LaneAccess& a : lanes) width = std::max(width, a.bytes);
  const int lanes_per_phase = width <= 4 ? 32 : width == 8 ? 16 : 8;
  std::uint64_t bytes = 0;
  for (int phase = 0; phase * lanes_per_phase < 32; ++phase) {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> in_phase;
    for (const LaneAccess& a : lanes) {
      if (a.lane / lanes_per_phase == phase) in_phase.emplace_back(a.offset, a.bytes);
    }
    if (in_phase.empty()) continue;
    w.actual += phase_wavefronts(in_phase);
  }
  for (const LaneAccess& a : lanes) bytes += a.bytes;
  w.ideal = ceil_div(bytes, kWavefrontBytes);
  return w;
}

Wavefronts ldmatrix_wavefronts(std::span<const std::uint64_t> row_offsets) {
  Wavefronts w;
  for (std::size_t m = 0; m * 8 < row_offsets.size(); ++m) {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> rows;
    for (std::size_t r = 0; r < 8 && m * 8 + r < row_offsets.size(); ++r) rows.emplace_back(row_offsets[m * 8 + r], 16);
    w.actual += phase_wavefronts(rows);
    w.ideal += 1;  // 8 rows of 16 bytes: one wavefront's worth
  }
  return w;
}

}  // namespace attune::emu
