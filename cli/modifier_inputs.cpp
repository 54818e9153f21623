#include "cli/modifier_inputs.h"

#include <sstream>

#include "cli/npy_inputs.h"
#include "core/error.h"

namespace attune::cli {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i != 0 ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::vector<float> read_values(const std::string& path, const char* name, std::vector<int64_t>& shape) {
  const npy::Array array = read_floats(path, name);
  shape = array.shape;
  return array.to_float32();
}

}  // namespace

ModifierInputs read_modifier_inputs(const std::optional<double>& softcap, const std::string& sinks_path,
                                    const std::string& slopes_path, ProblemOptions& options) {
  ModifierInputs in;
  in.softcap = softcap;
  in.sinks_path = sinks_path;
  in.slopes_path = slopes_path;
  if (softcap) {
    if (!(*softcap > 0)) {
      std::ostringstream seen;
      seen << *softcap;
      throw InvalidArgument("--softcap: got " + seen.str() +
                            "; expected a finite value > 0 (scores become c * tanh(s / c))");
    }
    options.modifiers.softcap = *softcap;
  }
  if (!sinks_path.empty()) {
    in.sinks = read_values(sinks_path, "sinks", in.sinks_shape);
    if (in.sinks_shape.size() != 1) {
      throw InvalidArgument("--sinks " + sinks_path + ": got shape " + shape_text(in.sinks_shape) +
                            "; expected a 1-D float array [Hq], one sink logit per query head");
    }
    options.modifiers.sinks = true;
  }
  if (!slopes_path.empty()) {
    in.alibi_slopes = read_values(slopes_path, "alibi_slopes", in.slopes_shape);
    if (in.slopes_shape.size() != 1 && in.slopes_shape.size() != 2) {
      throw InvalidArgument("--alibi-slopes " + slopes_path + ": got shape " + shape_text(in.slopes_shape) +
                            "; expected a float array [Hq] or [B, Hq]");
    }
    options.modifiers.alibi = in.slopes_shape.size() == 1 ? AlibiSlopes::kPerHead : AlibiSlopes::kPerBatchHead;
  }
  return in;
}

void check_modifier_inputs(const ModifierInputs& in, const AttentionProblem& p) {
  if (!in.sinks_path.empty() && in.sinks_shape != std::vector<int64_t>{p.heads_q}) {
    throw InvalidArgument("--sinks " + in.sinks_path + ": got shape " + shape_text(in.sinks_shape) +
                          "; expected [Hq] = [" + std::to_string(p.heads_q) + "]");
  }
  if (!in.slopes_path.empty()) {
    const std::vector<int64_t> want =
        in.slopes_shape.size() == 1 ? std::vector<int64_t>{p.heads_q} : std::vector<int64_t>{p.batch, p.heads_q};
    if (in.slopes_shape != want) {
      throw InvalidArgument("--alibi-slopes " + in.slopes_path + ": got shape " + shape_text(in.slopes_shape) +
                            "; expected [Hq] = [" + std::to_string(p.heads_q) + "] or [B, Hq] = [" +
                            std::to_string(p.batch) + ", " + std::to_string(p.heads_q) + "]");
    }
  }
  try {
    check_modifier_values(p, in.host());
  } catch (const InvalidArgument& e) {
    const std::string file = std::string(e.what()).rfind("sinks", 0) == 0 ? in.sinks_path : in.slopes_path;
    throw InvalidArgument(file + ": " + e.what());
  }
}

}  // namespace attune::cli
