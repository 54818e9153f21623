#include "cli/merge_states_command.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "cli/npy_inputs.h"
#include "cli/problem_flags.h"
#include "core/error.h"
#include "io/npy.h"
#include "reference/online_softmax.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/runtime.h"

namespace attune::cli {

namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// [rows, heads, dim], or with a leading batch of 1 (a dense forward's O).
std::vector<std::int64_t> drop_unit_batch(std::vector<std::int64_t> shape, std::size_t rank) {
  if (shape.size() == rank + 1 && shape.front() == 1) shape.erase(shape.begin());
  return shape;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Partial i as the emulator and the reference read it.
struct Partial {
  std::vector<std::uint16_t> o;
  std::vector<float> lse;
};

// The fp64 merge (--backend reference): the reference's state merge, each
// partial a finished state (m = LSE, l = 1, u = O).
void merge_on_host(const MergeProblem& m, const std::vector<Partial>& parts, DType dtype, std::vector<double>& out,
                   std::vector<double>& out_lse) {
  const std::int64_t slots = m.rows * m.heads;
  const auto dim = static_cast<std::size_t>(m.head_dim);
  out.assign(static_cast<std::size_t>(slots) * dim, 0.0);
  out_lse.assign(static_cast<std::size_t>(slots), -std::numeric_limits<double>::infinity());
  std::vector<double> o(dim);
  for (std::int64_t s = 0; s < slots; ++s) {
    const auto lse_at = static_cast<std::size_t>((s % m.heads) * m.rows + s / m.heads);
    const auto first = static_cast<std::size_t>(s) * dim;
    SoftmaxState<double> state(m.head_dim);
    for (const Partial& p : parts) {
      for (std::size_t d = 0; d < dim; ++d) o[d] = bits_to_float(dtype, p.o[first + d]);
      state.merge(SoftmaxState<double>::of_result(o, p.lse[lse_at]));
    }
    const SoftmaxState<double>::Result merged = state.finalize();
    std::copy(merged.o.begin(), merged.o.end(), out.begin() + static_cast<std::ptrdiff_t>(first));
    out_lse[lse_at] = merged.lse;
  }
}

}  // namespace

CLI::App* add_merge_states_command(CLI::App& app, MergeStatesOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "merge-states", "Merge partial attention results over disjoint keys (cascade attention, context parallelism)");
  cmd->add_option("--o", o.o_paths, "Partial O files, comma-separated: float [rows,heads,dim] (or [1,rows,heads,dim])")
      ->required();
  cmd->add_option("--lse", o.lse_paths, "Their LSE files, in the same order: float32 [heads,rows] (or [1,heads,rows])")
      ->required();
  cmd->add_option("--out", o.out_path, "Merged O output: float32, shaped like the partials' O")->required();
  cmd->add_option("--out-lse", o.out_lse_path, "Merged LSE output: float32, shaped like the partials' LSE");
  cmd->add_option("--backend", o.backend, "emu (the kernel on the CPU emulator), cuda, or reference (fp64)")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype, "Storage dtype the partial O are rounded to: fp16 or bf16")
      ->capture_default_str();
  return cmd;
}

void run_merge_states(const MergeStatesOptions& o) {
  const std::vector<std::string> o_paths = split_commas(o.o_paths);
  const std::vector<std::string> lse_paths = split_commas(o.lse_paths);
  if (o_paths.size() != lse_paths.size()) {
    bad_flag("--lse", o.lse_paths,
             std::to_string(o_paths.size()) + " LSE files, one per O file of --o (got " +
                 std::to_string(lse_paths.size()) + ")");
  }
  const bool reference = o.backend == "reference";
  Backend backend = Backend::kEmu;
  if (!reference) {
    const std::optional<Backend> parsed = parse_backend(o.backend);
    if (!parsed) bad_flag("--backend", o.backend, "emu, cuda or reference");
    backend = *parsed;
  }
  const DType dtype = parse_dtype_flag(o.dtype);

  std::vector<Partial> parts;
  std::vector<std::int64_t> o_shape;
  std::vector<std::int64_t> lse_shape;
  for (std::size_t i = 0; i < o_paths.size(); ++i) {
    const npy::Array oa = read_floats(o_paths[i], "partial O");
    const npy::Array la = read_floats(lse_paths[i], "partial LSE");
    const std::vector<std::int64_t> os = drop_unit_batch(oa.shape, 3);
    const std::vector<std::int64_t> ls = drop_unit_batch(la.shape, 2);
    if (os.size() != 3) bad_flag("--o", o_paths[i], "a float array [rows, heads, dim], got " + shape_text(oa.shape));
    if (ls.size() != 2 || ls[0] != os[1] || ls[1] != os[0]) {
      bad_flag("--lse", lse_paths[i],
               "float32 [heads, rows] = [" + std::to_string(os[1]) + ", " + std::to_string(os[0]) + "] for " +
                   o_paths[i] + ", got " + shape_text(la.shape));
    }
    if (i == 0) {
      o_shape = oa.shape;
      lse_shape = la.shape;
    } else if (os != drop_unit_batch(o_shape, 3)) {
      bad_flag("--o", o_paths[i],
               "the shape of " + o_paths[0] + " " + shape_text(o_shape) + ", got " + shape_text(oa.shape));
    }
    parts.push_back({to_storage(oa, dtype), la.to_float32()});
  }
  const std::vector<std::int64_t> dims = drop_unit_batch(o_shape, 3);
  const MergeProblem m{
      .dtype = dtype, .rows = dims[0], .heads = dims[1], .head_dim = dims[2], .parts = static_cast<int>(parts.size())};

  std::vector<double> out;
  std::vector<double> out_lse;
  if (reference) {
    merge_on_host(m, parts, dtype, out, out_lse);
  } else {
    Runtime runtime({.backend = backend});
    std::vector<std::uint16_t> merged(parts[0].o.size());
    std::vector<float> merged_lse(parts[0].lse.size());
    std::vector<const void*> op;
    std::vector<const float*> lp;
    if (backend == Backend::kEmu) {
      for (const Partial& p : parts) {
        op.push_back(p.o.data());
        lp.push_back(p.lse.data());
      }
      runtime.merge_states(m, op, lp, merged.data(), merged_lse.data());
    } else {
      cuda::Driver& driver = cuda::Driver::get();
      std::vector<cuda::DeviceBuffers::Spec> specs;
      for (const Partial& p : parts) {
        specs.push_back({p.o.data(), p.o.size() * 2});
        specs.push_back({p.lse.data(), p.lse.size() * sizeof(float)});
      }
      specs.push_back({nullptr, merged.size() * 2});
      specs.push_back({nullptr, merged_lse.size() * sizeof(float)});
      const cuda::DeviceBuffers device(driver, specs);
      for (std::size_t i = 0; i < parts.size(); ++i) {
        op.push_back(device.at(2 * i));
        lp.push_back(static_cast<const float*>(device.at(2 * i + 1)));
      }
      void* out_o = device.at(2 * parts.size());
      auto* out_l = static_cast<float*>(device.at(2 * parts.size() + 1));
      runtime.merge_states(m, op, lp, out_o, out_l);
      driver.synchronize(nullptr);
      driver.copy_to_host(merged.data(), out_o, merged.size() * 2);
      driver.copy_to_host(merged_lse.data(), out_l, merged_lse.size() * sizeof(float));
    }
    out = widen_bits<double>(dtype, merged);
    out_lse.assign(merged_lse.begin(), merged_lse.end());
  }
  npy::write(o.out_path, o_shape, to_float32(out));
  if (!o.out_lse_path.empty()) npy::write(o.out_lse_path, lse_shape, to_float32(out_lse));
}

}  // namespace attune::cli
