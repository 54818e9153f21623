/* The C API of attune, for foreign-function callers (Python ctypes, Rust,
 * Julia). Every call returns an attune_status; on failure
 * attune_last_error() holds the message (per thread).
 *
 * Example:
 *   attune_runtime* rt = NULL;
 *   if (attune_runtime_create("cuda", 0, &rt) != ATTUNE_OK) puts(attune_last_error());
 *   attune_problem p;
 *   attune_problem_init(&p);
 *   p.batch = 2; p.seqlen_q = 128; p.seqlen_k = 128; p.heads_q = 8; p.heads_kv = 8;
 *   p.head_dim_k = 64; p.head_dim_v = 64; p.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
 *   attune_forward(rt, &p, q, k, v, o, lse, stream);
 *   attune_runtime_destroy(rt);
 */
#ifndef ATTUNE_C_H_
#define ATTUNE_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A C header: C naming and typedefs. NOLINTBEGIN(modernize-use-using,readability-identifier-naming) */

typedef enum {
  ATTUNE_OK = 0,
  ATTUNE_ERROR_INVALID_ARGUMENT = 1, /* the problem, a pointer or an option breaks the contract */
  ATTUNE_ERROR_IO = 2,               /* a file (cache, database) could not be used */
  ATTUNE_ERROR_UNAVAILABLE = 3,      /* the backend cannot run here (no driver) */
  ATTUNE_ERROR_CUDA = 4,             /* a CUDA call failed */
  ATTUNE_ERROR_CUDA_STICKY = 5,      /* ... and the context is unusable: restart the process */
  ATTUNE_ERROR_KERNEL_FAULT = 6,     /* the emulator found a bug in the kernel */
  ATTUNE_ERROR_INTERNAL = 7
} attune_status;

typedef enum { ATTUNE_DTYPE_FP16 = 0, ATTUNE_DTYPE_BF16 = 1 } attune_dtype;

typedef enum {
  ATTUNE_MASK_NONE = 0,
  ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT = 1,
  ATTUNE_MASK_CAUSAL_TOP_LEFT = 2,
  ATTUNE_MASK_SLIDING_WINDOW = 3
} attune_mask;

/* The operator contract (docs/contract.md). Strides are in elements, in the
 * order [batch, seq, head] (the last dimension is contiguous); all zero
 * means contiguous. Length arrays are host memory; NULL when unused. */
typedef struct {
  attune_dtype dtype;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim_k, head_dim_v;
  double scale; /* 0: 1/sqrt(head_dim_k) */
  attune_mask mask;
  int64_t window_left, window_right; /* ATTUNE_MASK_SLIDING_WINDOW; -1: unbounded */
  const int32_t* seqlens_k;          /* [batch] key padding */
  const int32_t* cu_seqlens_q;       /* [batch + 1] packed; seqlen_q is then the total rows */
  const int32_t* cu_seqlens_k;       /* [batch + 1] packed; seqlen_k is then the total keys */
  int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3];
  int64_t lse_strides[3]; /* [batch, seq, head] */
  /* Paged KV cache (page_size > 0): k and v are page pools [num_pages,
   * page_size, heads_kv, D]; block_table [batch, max_pages] (host memory)
   * names each sequence's pages; seqlen_k is then max_pages * page_size and
   * seqlens_k the cache lengths. Only attune_decode (and attune_forward,
   * which runs decode for it) reads pages. */
  const int32_t* block_table;
  int64_t max_pages, page_size, num_pages;
  /* Score modifiers (docs/contract.md), off when 0 / NULL. The tensors are
   * float32 in the backend's memory (device memory on cuda, host on emu). */
  double softcap;            /* c > 0: scores s become c * tanh(s / c) */
  const float* sinks;        /* [heads_q]: one sink logit per query head */
  const float* alibi_slopes; /* [heads_q], or [batch, heads_q] with alibi_per_batch != 0 */
  int alibi_per_batch;
  float* dsink; /* attune_backward with sinks: the gradient of the sinks, [heads_q] */
} attune_problem;

typedef struct attune_runtime attune_runtime;

/* Fills a problem with defaults: bf16, no mask, contiguous, no modifiers. */
void attune_problem_init(attune_problem* problem);

/* backend: "cuda" or "emu". */
attune_status attune_runtime_create(const char* backend, int device, attune_runtime** out);
void attune_runtime_destroy(attune_runtime* runtime);

/* O (and LSE when lse is not NULL). Pointers are device memory (cuda) or
 * host memory (emu); stream is a CUstream or NULL. */
attune_status attune_forward(attune_runtime* runtime, const attune_problem* problem, const void* q, const void* k,
                             const void* v, void* o, float* lse, void* stream);

/* The same with a given variant id (as `attune variants list` prints it)
 * instead of the dispatcher's choice. */
attune_status attune_forward_variant(attune_runtime* runtime, const char* variant_id, const attune_problem* problem,
                                     const void* q, const void* k, const void* v, void* o, float* lse, void* stream);

/* Split-KV decode: few query rows against a long contiguous or paged KV
 * cache, the keys split across `splits` CTAs (0: the dispatcher's choice,
 * tuned or a heuristic that fills the GPU in whole waves). */
attune_status attune_decode(attune_runtime* runtime, const attune_problem* problem, int splits, const void* q,
                            const void* k, const void* v, void* o, float* lse, void* stream);
/* Backward: dq, dk, dv (laid out like q, k, v) from q, k, v, the forward's o
 * and lse, and d_o (laid out like o). deterministic != 0: dQ summed in a
 * fixed order, bitwise-repeatable (more workspace). */
attune_status attune_backward(attune_runtime* runtime, const attune_problem* problem, int deterministic, const void* q,
                              const void* k, const void* v, const void* o, const void* d_o, const float* lse, void* dq,
                              void* dk, void* dv, void* stream);
/* The variant forward would run and the rule that chose it, as
 * "flash_fwd/d64.bm64.bn64.wm4.wn1.st2 (heuristic: ...)"; valid until the
 * next call on this thread. NULL on error. */
const char* attune_explain(attune_runtime* runtime, const attune_problem* problem);

/* The message of the last failure on this thread ("" if none). */
const char* attune_last_error(void);

/* NOLINTEND(modernize-use-using,readability-identifier-naming) */

#ifdef __cplusplus
}
#endif

#endif /* ATTUNE_C_H_ */
