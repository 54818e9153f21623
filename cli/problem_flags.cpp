#include "cli/problem_flags.h"

#include <charconv>
#include <cstdint>

#include "core/error.h"
#include "tuner/sweep.h"

namespace attune::cli {

namespace {

std::int64_t parse_window_side(const std::string& whole, std::string_view text) {
  std::int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < -1) {
    bad_flag("--window", whole, "LEFT,RIGHT with each an integer >= 0, or -1 for unbounded");
  }
  return value;
}

}  // namespace

void bad_flag(const std::string& flag, const std::string& seen, const std::string& expected) {
  throw InvalidArgument(flag + ": got '" + seen + "'; expected " + expected);
}

DType parse_dtype_flag(const std::string& text) {
  if (auto dtype = parse_dtype(text)) return *dtype;
  bad_flag("--dtype", text, "fp16, bf16, e4m3 or e5m2");
}

Mask parse_mask(const std::string& causal, const std::string& window) {
  if (!causal.empty() && causal != "bottom-right" && causal != "top-left") {
    bad_flag("--causal", causal, "bottom-right or top-left");
  }
  if (window.empty()) {
    if (causal == "bottom-right") return Mask::causal_bottom_right();
    if (causal == "top-left") return Mask::causal_top_left();
    return Mask::none();
  }
  const std::size_t comma = window.find(',');
  if (comma == std::string::npos) bad_flag("--window", window, "LEFT,RIGHT (two integers, -1 for unbounded)");
  const std::string_view text = window;
  const std::int64_t left = parse_window_side(window, text.substr(0, comma));
  std::int64_t right = parse_window_side(window, text.substr(comma + 1));
  if (causal == "top-left") {
    bad_flag("--causal", "top-left with --window",
             "--window alone or with --causal bottom-right (windows are bottom-right aligned)");
  }
  if (causal == "bottom-right" && right != 0) right = 0;  // causal caps the right side
  return Mask::window(left, right);
}

ScoreModifiers parse_modifiers(const std::string& names, std::optional<double> softcap) {
  std::uint8_t bits = 0;
  if (!names.empty()) {
    const std::optional<std::uint8_t> parsed = parse_modifier_names(names);
    if (!parsed) {
      bad_flag("--modifiers", names, "none, or softcap, sinks, alibi and dropout joined by '+', e.g. softcap+sinks");
    }
    bits = *parsed;
  }
  if (softcap) bits |= kModSoftcap;
  // The sweep's values of a named set (c 30, ALiBi per head, dropout 0.1):
  // dropout's p and seed change no choice of kernel, any p > 0 names it.
  return tuner::sweep_modifiers(bits, softcap.value_or(tuner::SweepSpec{}.softcap));
}

std::optional<tuning_db::TuningDb> open_db_for_dispatch(const std::string& flag) {
  if (!flag.empty()) return tuning_db::TuningDb::open(flag);
  const std::filesystem::path path = tuning_db::TuningDb::default_path();
  if (!std::filesystem::exists(path)) return std::nullopt;
  return tuning_db::TuningDb::open(path);
}

}  // namespace attune::cli
