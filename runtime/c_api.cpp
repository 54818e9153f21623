// The C API (runtime/attune_c.h) over attune::Runtime: exceptions become
// status codes plus a per-thread message.
#include <cmath>
#include <string>

#include "core/error.h"
#include "emulator/report.h"
#include "generator/variants.h"
#include "runtime/attune_c.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/jit/kernel_cache.h"
#include "runtime/runtime.h"

struct attune_runtime {
  std::unique_ptr<attune::Runtime> runtime;
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

attune::TensorStrides strides_of(const int64_t (&s)[3]) { return {.batch = s[0], .seq = s[1], .head = s[2]}; }

bool all_zero(const int64_t (&s)[3]) { return s[0] == 0 && s[1] == 0 && s[2] == 0; }

attune::AttentionProblem to_problem(const attune_problem& c) {
  if (c.dtype != ATTUNE_DTYPE_FP16 && c.dtype != ATTUNE_DTYPE_BF16) {
    throw attune::InvalidArgument("dtype: got " + std::to_string(static_cast<int>(c.dtype)) +
                                  "; expected ATTUNE_DTYPE_FP16 or ATTUNE_DTYPE_BF16");
  }
  attune::AttentionProblem p;
  p.dtype = c.dtype == ATTUNE_DTYPE_FP16 ? attune::DType::kF16 : attune::DType::kBF16;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim_k = c.head_dim_k;
  p.head_dim_v = c.head_dim_v;
  if (c.scale != 0) p.scale = c.scale;
  switch (c.mask) {
    case ATTUNE_MASK_NONE:
      break;
    case ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT:
      p.mask = attune::Mask::causal_bottom_right();
      break;
    case ATTUNE_MASK_CAUSAL_TOP_LEFT:
      p.mask = attune::Mask::causal_top_left();
      break;
    case ATTUNE_MASK_SLIDING_WINDOW:
      p.mask = attune::Mask::window(c.window_left, c.window_right);
      break;
    default:
      throw attune::InvalidArgument("mask: got " + std::to_string(static_cast<int>(c.mask)) +
                                    "; expected one of ATTUNE_MASK_*");
  }
  const auto copy = [&](const int32_t* data, int64_t count) {
    return data == nullptr || count < 0 ? std::vector<int32_t>{} : std::vector<int32_t>(data, data + count);
  };
  p.seqlens_k = copy(c.seqlens_k, c.batch);
  p.cu_seqlens_q = copy(c.cu_seqlens_q, c.batch + 1);
  p.cu_seqlens_k = copy(c.cu_seqlens_k, c.batch + 1);
  if (c.page_size != 0 || c.block_table != nullptr) {
    if (c.block_table == nullptr || c.max_pages < 1 || c.page_size < 1 || c.num_pages < 0) {
      throw attune::InvalidArgument("paged cache: got block_table " + std::string(c.block_table ? "set" : "NULL") +
                                    ", max_pages " + std::to_string(c.max_pages) + ", page_size " +
                                    std::to_string(c.page_size) + ", num_pages " + std::to_string(c.num_pages) +
                                    "; expected a block table with max_pages >= 1, page_size >= 1, num_pages >= 0");
    }
    p.block_table = copy(c.block_table, c.batch * c.max_pages);
    p.page_size = c.page_size;
    p.num_pages = c.num_pages;
  }
  attune::set_contiguous_strides(p);
  if (p.is_paged()) {
    p.k_strides.batch = p.page_size * p.k_strides.seq;  // pools: one page per "batch" entry
    p.v_strides.batch = p.page_size * p.v_strides.seq;
  }
  if (!all_zero(c.q_strides)) p.q_strides = strides_of(c.q_strides);
  if (!all_zero(c.k_strides)) p.k_strides = strides_of(c.k_strides);
  if (!all_zero(c.v_strides)) p.v_strides = strides_of(c.v_strides);
  if (!all_zero(c.o_strides)) p.o_strides = strides_of(c.o_strides);
  if (!all_zero(c.lse_strides)) p.lse_strides = strides_of(c.lse_strides);
  attune::validate(p);
  return p;
}

}  // namespace

extern "C" {

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
  return guarded([&] {
    if (out == nullptr) throw attune::InvalidArgument("out: got NULL; expected a place for the runtime");
    *out = nullptr;
    const auto parsed = attune::parse_backend(backend == nullptr ? "" : backend);
    if (!parsed) {
      throw attune::InvalidArgument(std::string("backend: got '") + (backend == nullptr ? "NULL" : backend) +
                                    "'; expected \"cuda\" or \"emu\"");
    }
    auto runtime = std::make_unique<attune::Runtime>(attune::RuntimeOptions{.backend = *parsed, .device = device});
    *out = new attune_runtime{std::move(runtime)};
  });
}

void attune_runtime_destroy(attune_runtime* runtime) { delete runtime; }

attune_status attune_forward(attune_runtime* runtime, const attune_problem* problem, const void* q, const void* k,
                             const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->forward(to_problem(*problem), {q, k, v, o, lse}, stream);
  });
}

attune_status attune_forward_variant(attune_runtime* runtime, const char* variant_id, const attune_problem* problem,
                                     const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    if (variant_id == nullptr) throw attune::InvalidArgument("variant_id: got NULL; expected a variant id");
    runtime->runtime->forward_variant(attune::parse_variant_id(variant_id), to_problem(*problem), {q, k, v, o, lse},
                                      stream);
  });
}

attune_status attune_decode(attune_runtime* runtime, const attune_problem* problem, int splits, const void* q,
                            const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->decode(to_problem(*problem), {q, k, v, o, lse}, {.splits = splits}, stream);
  });
}

attune_status attune_backward(attune_runtime* runtime, const attune_problem* problem, int deterministic, const void* q,
                              const void* k, const void* v, const void* o, const void* d_o, const float* lse, void* dq,
                              void* dk, void* dv, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->backward(to_problem(*problem), {q, k, v, o, d_o, lse, dq, dk, dv},
                               {.deterministic = deterministic != 0}, stream);
  });
}

const char* attune_explain(attune_runtime* runtime, const attune_problem* problem) {
  const attune_status status = guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    const attune::DispatchChoice choice = runtime->runtime->explain(to_problem(*problem));
    g_explained = choice.variant.id() + " (" + std::string(attune::to_string(choice.rule)) + ": " + choice.detail + ")";
  });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

const char* attune_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
