// The C API (runtime/attune_c.h) over attune::Runtime: exceptions become
// status codes plus a per-thread message.
#include <cmath>
#include <string>

#include "core/error.h"
#include "emulator/report.h"
#include "generator/variants.h"
#include "runtime/attune_c.h"
#include "runtime/c_problem.h"
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
    runtime->runtime->forward(attune::problem_from_c(*problem),
                              {q, k, v, o, lse, problem->sinks, problem->alibi_slopes}, stream);
  });
}

attune_status attune_forward_variant(attune_runtime* runtime, const char* variant_id, const attune_problem* problem,
                                     const void* q, const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    if (variant_id == nullptr) throw attune::InvalidArgument("variant_id: got NULL; expected a variant id");
    runtime->runtime->forward_variant(attune::parse_variant_id(variant_id), attune::problem_from_c(*problem),
                                      {q, k, v, o, lse, problem->sinks, problem->alibi_slopes}, stream);
  });
}

attune_status attune_decode(attune_runtime* runtime, const attune_problem* problem, int splits, const void* q,
                            const void* k, const void* v, void* o, float* lse, void* stream) {
  return guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    runtime->runtime->decode(attune::problem_from_c(*problem), {q, k, v, o, lse, problem->sinks, problem->alibi_slopes},
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

const char* attune_explain(attune_runtime* runtime, const attune_problem* problem) {
  const attune_status status = guarded([&] {
    if (runtime == nullptr) throw attune::InvalidArgument("runtime: got NULL; expected one from attune_runtime_create");
    if (problem == nullptr) throw attune::InvalidArgument("problem: got NULL; expected an attune_problem");
    const attune::DispatchChoice choice = runtime->runtime->explain(attune::problem_from_c(*problem));
    g_explained = choice.variant.id() + " (" + std::string(attune::to_string(choice.rule)) + ": " + choice.detail + ")";
  });
  return status == ATTUNE_OK ? g_explained.c_str() : nullptr;
}

const char* attune_last_error(void) { return g_last_error.c_str(); }

}  // extern "C"
