// The C API (runtime/attune_c.h) over attune::Runtime: exceptions become
// status codes plus a per-thread message.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/version.h"
#include "emulator/report.h"
#include "generator/variants.h"
#include "reference/backward.h"
#include "reference/reference.h"
#include "runtime/attune_c.h"
#include "runtime/c_problem.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/dispatch/db_tuned_source.h"
#include "runtime/jit/kernel_cache.h"
#include "runtime/runtime.h"
#include "templates/dropout.h"
#include "tuning_db/tuning_db.h"

struct attune_runtime {
  // Declared in this order so the runtime goes first: it reads the tuned
  // source, which reads the database.
  std::optional<attune::tuning_db::TuningDb> db;
  std::optional<attune::DbTunedSource> tuned;
  std::unique_ptr<attune::Runtime> runtime;
};

struct attune_plan {
  attune::Plan plan;
};

namespace {

thread_local std::string g_last_error;
thread_local std::string g_explained;

template <typename Body>
attune_status guarded(Body body) {
  try {
    body();
    g_last_error.clear();
    return ATTUNE_OK;
  } catch (const attune::InvalidArgument& e) {
    g_last_error = e.what();
    return ATTUNE_ERROR_INVALID_ARGUMENT;
  } catch (const attune::cuda::DriverUnavailable& e) {
    g_last_error = e.what();
    return ATTUNE_ERROR_UNAVAILABLE;
  } catch (const attune::cuda::CudaError& e) {
    g_last_error = e.what();
    return e.sticky() ? ATTUNE_ERROR_CUDA_STICKY : ATTUNE_ERROR_CUDA;
  } catch (const attune::emu::KernelFault& e) {
    g_last_error = e.what();
    return ATTUNE_ERROR_KERNEL_FAULT;
  } catch (const attune::IoError& e) {
    g_last_error = e.what();
    return ATTUNE_ERROR_IO;
  } catch (const attune::CacheError& e) {
    g_last_error = e.what();
    return ATTUNE_ERROR_IO;
  } catch (const std::exception& e) {
    g_last_error = std::string("internal error: ") + e.what();
    return ATTUNE_ERROR_INTERNAL;
  }
}

attune::Runtime& runtime_of(attune_runtime* runtime) {
  if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
  return *runtime->runtime;
}

const attune_problem& problem_of(const attune_problem* problem) {
  if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
  return *problem;
}

const attune::Plan& plan_of(const attune_plan* plan) {
  if (plan == nullptr) throw attune::InvalidArgument("plan: got NULL; expected one from attune_plan_create");
  return plan->plan;
}

// The C options' op, read as an int (any value may sit in a C enum).
attune::Op op_of(const attune_plan_options& o) {
  int op = 0;
  std::memcpy(&op, &o.op, sizeof op);
  switch (op) {
    case ATTUNE_OP_FORWARD:
      return attune::Op::kForward;
    case ATTUNE_OP_DECODE:
      return attune::Op::kDecode;
    case ATTUNE_OP_BACKWARD:
      return attune::Op::kBackward;
    default:
      throw attune::InvalidArgument("op: got " + std::to_string(op) +
                                    "; expected ATTUNE_OP_FORWARD, ATTUNE_OP_DECODE or ATTUNE_OP_BACKWARD");
  }
}

// The problem of a plan: with device lengths when the options ask for them.
attune::AttentionProblem plan_problem(const attune_problem& c, const attune_plan_options& o) {
  if (o.device_lengths == 0) return attune::problem_from_c(c);
  if (c.cu_seqlens_q != nullptr || c.cu_seqlens_k != nullptr || c.seqlens_k != nullptr || c.block_table != nullptr) {
    throw attune::InvalidArgument(
        "device_lengths: the problem has host length arrays; expected them NULL (the runs pass them)");
  }
  return attune::problem_from_c(c, attune::LengthBounds{.cu_seqlens_q = o.cu_seqlens_q != 0,
                                                        .cu_seqlens_k = o.cu_seqlens_k != 0,
                                                        .seqlens_k = o.seqlens_k != 0,
                                                        .max_seqlen_q = o.max_seqlen_q,
                                                        .max_seqlen_k = o.max_seqlen_k,
                                                        .max_pages = c.max_pages});
}

std::string explained(const attune::Variant& variant, const std::string& reason) {
  return variant.id() + " (" + reason + ")";
}

}  // namespace

extern "C" {

int attune_abi_version(void) { return ATTUNE_ABI_VERSION; }

const char* attune_version(void) { return attune::attune_version(); }

void attune_runtime_options_init(attune_runtime_options* options) {
  if (options != nullptr) *options = attune_runtime_options{};
}

attune_status attune_runtime_create_with(const attune_runtime_options* options, attune_runtime** out) {
  return guarded([&] {
    if (out == nullptr) throw attune::InvalidArgument("out: got NULL; expected a place for the runtime");
    *out = nullptr;
    attune_runtime_options o{};
    if (options != nullptr) o = *options;
    const char* backend = o.backend == nullptr ? "cuda" : o.backend;
    const auto parsed = attune::parse_backend(backend);
    if (!parsed) {
      throw attune::InvalidArgument(std::string("backend: got '") + backend + "'; expected \"cuda\" or \"emu\"");
    }
    auto made = std::make_unique<attune_runtime>();
    if (o.tuning_db == nullptr) {
      const std::filesystem::path path = attune::tuning_db::TuningDb::default_path();
      if (std::filesystem::exists(path)) made->db.emplace(attune::tuning_db::TuningDb::open(path));
    } else if (*o.tuning_db != '\0') {
      made->db.emplace(attune::tuning_db::TuningDb::open(o.tuning_db));
    }
    if (made->db) made->tuned.emplace(*made->db);
    made->runtime = std::make_unique<attune::Runtime>(attune::RuntimeOptions{
        .backend = *parsed,
        .device = o.device,
        .cache_directory = o.cache_directory == nullptr ? std::filesystem::path() : o.cache_directory,
        .tuned = made->tuned ? &*made->tuned : nullptr});
    *out = made.release();
  });
}

void attune_problem_init(attune_problem* problem) {
  if (problem == nullptr) return;
  *problem = attune_problem{};
  problem->dtype = ATTUNE_DTYPE_BF16;
  problem->batch = 1;
  problem->heads_q = 1;
  problem->heads_kv = 1;
  problem->mask = ATTUNE_MASK_NONE;
  problem->window_left = -1;
  problem->window_right = -1;
}

attune_status attune_runtime_create(const char* backend, int device, attune_runtime** out) {
  if (backend == nullptr) {
    g_last_error = "backend: got 'NULL'; expected \"cuda\" or \"emu\"";
    if (out != nullptr) *out = nullptr;
    return ATTUNE_ERROR_INVALID_ARGUMENT;
  }
  attune_runtime_options options{};
  options.backend = backend;
  options.device = device;
  return attune_runtime_create_with(&options, out);
}

void attune_runtime_destroy(attune_runtime* runtime) { delete runtime; }

attune_status attune_forward(attune_runtime* runtime, const attune_problem* problem, const void* q, const void* k,
                             const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->forward(attune::problem_from_c(*problem),
                              attune::with_descales({q, k, v, o, lse, problem->sinks, problem->alibi_slopes}, *problem),
                              stream);
  });
}

attune_status attune_forward_variant(attune_runtime* runtime, const char* variant_id, const attune_problem* problem,
                                     const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    if (variant_id == nullptr) throw attune::InvalidArgument("variant_id: got NULL; expected a variant id");
    runtime->runtime->forward_variant(
        attune::parse_variant_id(variant_id), attune::problem_from_c(*problem),
        attune::with_descales({q, k, v, o, lse, problem->sinks, problem->alibi_slopes}, *problem), stream);
  });
}

attune_status attune_decode(attune_runtime* runtime, const attune_problem* problem, int splits, const void* q,
                            const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->decode(attune::problem_from_c(*problem),
                             attune::with_descales({q, k, v, o, lse, problem->sinks, problem->alibi_slopes}, *problem),
                             {.splits = splits}, stream);
  });
}

attune_status attune_backward(attune_runtime* runtime, const attune_problem* problem, int deterministic, const void* q,
                              const void* k, const void* v, const void* o, const void* d_o, const float* lse, void* dq,
                              void* dk, void* dv, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->backward(
        attune::problem_from_c(*problem),
        {q, k, v, o, d_o, lse, dq, dk, dv, problem->sinks, problem->alibi_slopes, problem->dsink},
        {.deterministic = deterministic != 0}, stream);
  });
}

attune_status attune_reference_forward(const attune_problem* problem, const double* q, const double* k, const double* v,
                                       double* o, double* lse) {
  return guarded([&] {
    const attune_problem& c = problem_of(problem);
    if (q == nullptr || k == nullptr || v == nullptr || o == nullptr) {
      throw attune::InvalidArgument("reference: q, k, v and o must not be NULL");
    }
    const attune::AttentionProblem p = attune::problem_from_c(c);
    if (p.is_paged()) throw attune::InvalidArgument("reference: a paged cache; expected contiguous K and V");
    if (p.has_fp8()) {
      throw attune::InvalidArgument(
          "reference: fp8 inputs; expected fp16 or bf16 (the fp64 reference takes the values)");
    }
    const attune::ReferenceOutput out = attune::reference_forward(p, q, k, v, {c.sinks, c.alibi_slopes});
    std::copy(out.o.begin(), out.o.end(), o);
    if (lse != nullptr) std::copy(out.lse.begin(), out.lse.end(), lse);
  });
}

attune_status attune_reference_backward(const attune_problem* problem, const double* q, const double* k,
                                        const double* v, const double* d_o, double* dq, double* dk, double* dv) {
  return guarded([&] {
    const attune_problem& c = problem_of(problem);
    if (q == nullptr || k == nullptr || v == nullptr || d_o == nullptr || dq == nullptr || dk == nullptr ||
        dv == nullptr) {
      throw attune::InvalidArgument("reference backward: q, k, v, d_o, dq, dk and dv must not be NULL");
    }
    const attune::AttentionProblem p = attune::problem_from_c(c);
    if (p.is_paged()) throw attune::InvalidArgument("reference backward: a paged cache; expected contiguous K and V");
    if (p.modifiers.sinks && c.dsink == nullptr) {
      throw attune::InvalidArgument("reference backward: the problem has sinks; expected dsink [heads_q] floats");
    }
    const attune::ReferenceGradients g = attune::reference_backward(p, q, k, v, d_o, {c.sinks, c.alibi_slopes});
    std::copy(g.dq.begin(), g.dq.end(), dq);
    std::copy(g.dk.begin(), g.dk.end(), dk);
    std::copy(g.dv.begin(), g.dv.end(), dv);
    for (std::size_t h = 0; h < g.dsink.size(); ++h) c.dsink[h] = static_cast<float>(g.dsink[h]);
  });
}

const char* attune_explain(attune_runtime* runtime, const attune_problem* problem) {
  const attune_status status = guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    const attune::DispatchChoice choice = runtime->runtime->explain(attune::problem_from_c(*problem));
    g_explained = choice.variant.id() + " (" + std::string(attune::to_string(choice.rule)) + ": " + choice.detail + ")";
  });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

const char* attune_explain_decode(attune_runtime* runtime, const attune_problem* problem, int splits) {
  const attune_status status = guarded([&] {
    const attune::DecodeChoice choice =
        runtime_of(runtime).explain_decode(attune::problem_from_c(problem_of(problem)), {.splits = splits});
    g_explained = explained(choice.variant, std::to_string(choice.splits) + " splits; " + choice.reason);
  });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

const char* attune_explain_backward(attune_runtime* runtime, const attune_problem* problem, int deterministic) {
  const attune_status status = guarded([&] {
    const attune::DispatchChoice choice = runtime_of(runtime).explain_backward(
        attune::problem_from_c(problem_of(problem)), {.deterministic = deterministic != 0});
    g_explained = explained(choice.variant, std::string(attune::to_string(choice.rule)) + ": " + choice.detail);
  });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

void attune_plan_options_init(attune_plan_options* options) {
  if (options != nullptr) *options = attune_plan_options{};
}

attune_status attune_plan_create(attune_runtime* runtime, const attune_problem* problem,
                                 const attune_plan_options* options, attune_plan** out) {
  return guarded([&] {
    if (out == nullptr) throw attune::InvalidArgument("out: got NULL; expected a place for the plan");
    *out = nullptr;
    attune::Runtime& rt = runtime_of(runtime);
    attune_plan_options o{};
    if (options != nullptr) o = *options;
    const attune::Op op = op_of(o);
    const attune::AttentionProblem p = plan_problem(problem_of(problem), o);
    const attune::PlanOptions plan_options{
        .splits = o.splits, .split_size = o.split_size, .deterministic = o.deterministic != 0};
    attune::Plan plan;
    if (o.variant != nullptr) {
      const attune::Variant variant = attune::parse_variant_id(o.variant);
      plan = rt.plan_variant(variant, p, plan_options);
      const bool paged_forward = op == attune::Op::kForward && p.is_paged();
      if (plan.op() != op && !(paged_forward && plan.op() == attune::Op::kDecode)) {
        throw attune::InvalidArgument("variant " + variant.id() + ": a " + std::string(attune::to_string(plan.op())) +
                                      " variant; expected one of op " + std::string(attune::to_string(op)));
      }
    } else {
      plan = rt.plan(p, op, plan_options);
    }
    *out = new attune_plan{std::move(plan)};
  });
}

attune_status attune_plan_workspace_size(const attune_plan* plan, size_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) throw attune::InvalidArgument("bytes: got NULL; expected a place for the size");
    *bytes = plan_of(plan).workspace_bytes();
  });
}

const char* attune_plan_describe(const attune_plan* plan) {
  const attune_status status = guarded([&] { g_explained = plan_of(plan).describe(); });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

attune_status attune_plan_run(attune_runtime* runtime, const attune_plan* plan, const attune_buffers* buffers,
                              const attune_metadata* metadata, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    attune::Runtime& rt = runtime_of(runtime);
    const attune::Plan& p = plan_of(plan);
    if (buffers == nullptr) throw attune::InvalidArgument("buffers: got NULL; expected an attune_buffers");
    attune::DeviceMetadata m;
    if (metadata != nullptr) {
      m = {metadata->cu_seqlens_q, metadata->cu_seqlens_k, metadata->seqlens_k, metadata->block_table, metadata->batch};
    }
    const attune::Workspace w{workspace, workspace_bytes};
    const attune_buffers& b = *buffers;
    if (p.op() == attune::Op::kBackward) {
      rt.run_backward(
          p, {b.q, b.k, b.v, b.o, b.d_o, b.lse, b.dq, b.dk, b.dv, b.sinks, b.alibi_slopes, b.dsink, b.rng_state}, m, w,
          stream);
    } else {
      rt.run(p,
             {b.q, b.k, b.v, b.o, b.lse, b.sinks, b.alibi_slopes, b.rng_state, b.q_descale, b.k_descale, b.v_descale},
             m, w, stream);
    }
  });
}

void attune_plan_destroy(attune_plan* plan) { delete plan; }

attune_status attune_merge_states(attune_runtime* runtime, attune_dtype dtype, int64_t rows, int64_t heads,
                                  int64_t head_dim, int count, const void* const* o, const float* const* lse,
                                  void* out_o, float* out_lse, void* stream) {
  return guarded([&] {
    attune::Runtime& rt = runtime_of(runtime);
    int type = 0;
    std::memcpy(&type, &dtype, sizeof type);
    if (type != ATTUNE_DTYPE_FP16 && type != ATTUNE_DTYPE_BF16) {
      throw attune::InvalidArgument("dtype: got " + std::to_string(type) +
                                    "; expected ATTUNE_DTYPE_FP16 or ATTUNE_DTYPE_BF16");
    }
    if (count < 1 || o == nullptr || lse == nullptr) {
      throw attune::InvalidArgument("partials: got count " + std::to_string(count) +
                                    (o == nullptr || lse == nullptr ? " with a NULL array" : "") +
                                    "; expected count >= 1 with arrays of count O and LSE pointers");
    }
    const auto n = static_cast<std::size_t>(count);
    rt.merge_states({.dtype = type == ATTUNE_DTYPE_FP16 ? attune::DType::kF16 : attune::DType::kBF16,
                     .rows = rows,
                     .heads = heads,
                     .head_dim = head_dim,
                     .parts = count},
                    std::span<const void* const>(o, n), std::span<const float* const>(lse, n), out_o, out_lse, stream);
  });
}

attune_status attune_append_kv(attune_runtime* runtime, const attune_append_problem* problem,
                               const attune_append_buffers* buffers, void* stream) {
  return guarded([&] {
    attune::Runtime& rt = runtime_of(runtime);
    if (problem == nullptr || buffers == nullptr) {
      throw attune::InvalidArgument("append: got a NULL problem or buffers; expected both");
    }
    const attune_append_problem& c = *problem;
    int type = 0;
    std::memcpy(&type, &c.dtype, sizeof type);
    if (type != ATTUNE_DTYPE_FP16 && type != ATTUNE_DTYPE_BF16) {
      throw attune::InvalidArgument("dtype: got " + std::to_string(type) +
                                    "; expected ATTUNE_DTYPE_FP16 or ATTUNE_DTYPE_BF16");
    }
    const auto strides = [](const int64_t(&s)[3]) { return attune::TensorStrides{s[0], s[1], s[2]}; };
    const attune::AppendProblem p{.dtype = type == ATTUNE_DTYPE_FP16 ? attune::DType::kF16 : attune::DType::kBF16,
                                  .batch = c.batch,
                                  .seqlen_new = c.seqlen_new,
                                  .heads_kv = c.heads_kv,
                                  .head_dim_k = c.head_dim_k,
                                  .head_dim_v = c.head_dim_v,
                                  .k_new_strides = strides(c.k_new_strides),
                                  .v_new_strides = strides(c.v_new_strides),
                                  .cache_batch = c.cache_batch,
                                  .seqlen_cache = c.seqlen_cache,
                                  .page_size = c.page_size,
                                  .num_pages = c.num_pages,
                                  .max_pages = c.max_pages,
                                  .k_cache_strides = strides(c.k_cache_strides),
                                  .v_cache_strides = strides(c.v_cache_strides),
                                  .rotary_dim = c.rotary_dim,
                                  .seqlen_ro = c.seqlen_ro,
                                  .rotary_interleaved = c.rotary_interleaved != 0,
                                  .seqlen_q = c.seqlen_q,
                                  .heads_q = c.heads_q,
                                  .q_strides = strides(c.q_strides),
                                  .q_rot_strides = strides(c.q_rot_strides),
                                  .q_per_row = c.q_per_row != 0};
    const attune_append_buffers& b = *buffers;
    rt.append_kv(p,
                 {.k_new = b.k_new,
                  .v_new = b.v_new,
                  .k_cache = b.k_cache,
                  .v_cache = b.v_cache,
                  .q = b.q,
                  .q_rot = b.q_rot,
                  .rotary_cos = b.rotary_cos,
                  .rotary_sin = b.rotary_sin,
                  .cache_seqlens = b.cache_seqlens,
                  .seqlens_out = b.seqlens_out,
                  .block_table = b.block_table},
                 stream);
  });
}

attune_status attune_dropout_keep_mask(double dropout_p, uint64_t seed, uint64_t offset, int64_t batch, int64_t heads_q,
                                       int64_t seqlen_q, int64_t seqlen_k, uint8_t* keep) {
  return guarded([&] {
    if (!(dropout_p >= 0 && dropout_p < 1)) {
      std::ostringstream seen;
      seen << dropout_p;
      throw attune::InvalidArgument("dropout_p: got " + seen.str() + "; expected a probability in [0, 1)");
    }
    const int64_t sizes[] = {batch, heads_q, seqlen_q, seqlen_k};
    const char* names[] = {"batch", "heads_q", "seqlen_q", "seqlen_k"};
    for (int i = 0; i < 4; ++i) {
      if (sizes[i] < 0) {
        throw attune::InvalidArgument(std::string("keep mask: ") + names[i] + " got " + std::to_string(sizes[i]) +
                                      "; expected >= 0");
      }
    }
    if (keep == nullptr && batch * heads_q * seqlen_q * seqlen_k > 0) {
      throw attune::InvalidArgument("keep: got NULL; expected [batch, heads_q, seqlen_q, seqlen_k] bytes");
    }
    const attune::DropoutParams d = attune::dropout_params(dropout_p, seed, offset);
    std::size_t at = 0;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads_q; ++h) {
        for (int64_t i = 0; i < seqlen_q; ++i) {
          for (int64_t j = 0; j < seqlen_k; ++j) keep[at++] = attune::dropout_keeps(d, b, h, heads_q, i, j) ? 1 : 0;
        }
      }
    }
  });
}

const char* attune_last_error(void) { return g_last_error.c_str(); }

const char* attune_bounds_report(int clear) {
  thread_local std::string report;
  report = attune::bounds_report();
  if (clear != 0) attune::clear_bounds_report();
  return report.c_str();
}

const char* attune_wait_report(void) {
  thread_local std::string report;
  report = attune::cuda::wait_report();
  return report.c_str();
}

}  // extern "C"
