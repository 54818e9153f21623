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

#include <stddef.h>
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

/* fp8 (E4M3, E5M2) stores inputs only: Q, K and V (O is then bf16), or a
 * KV cache under fp16 / bf16 queries (attune_problem.kv_dtype). */
typedef enum {
  ATTUNE_DTYPE_FP16 = 0,
  ATTUNE_DTYPE_BF16 = 1,
  ATTUNE_DTYPE_E4M3 = 2,
  ATTUNE_DTYPE_E5M2 = 3
} attune_dtype;

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
   * seqlens_k the cache lengths. attune_forward reads them with the forward
   * kernel when a sequence may bring 128 query rows or more (chunked
   * prefill), with the decode kernel otherwise. */
  const int32_t* block_table;
  int64_t max_pages, page_size, num_pages;
  /* Score modifiers (docs/contract.md), off when 0 / NULL. The tensors are
   * float32 in the backend's memory (device memory on cuda, host on emu). */
  double softcap;            /* c > 0: scores s become c * tanh(s / c) */
  const float* sinks;        /* [heads_q]: one sink logit per query head */
  const float* alibi_slopes; /* [heads_q], or [batch, heads_q] with alibi_per_batch != 0 */
  int alibi_per_batch;
  float* dsink; /* attune_backward with sinks: the gradient of the sinks, [heads_q] */
  /* Attention dropout (docs/contract.md, "Dropout"), off when dropout_p is
   * 0: each probability is kept with probability 1 - dropout_p (and scaled
   * by 1 / (1 - dropout_p)) or zeroed, decided by Philox-4x32-10 from (seed,
   * offset) and the element's position (batch, query head, query row, key)
   * within its sequence. The backward must get the forward's seed and
   * offset (it regenerates the mask); attune_buffers.rng_state passes them
   * in backend memory instead. The LSE is the one without dropout. */
  double dropout_p; /* in [0, 1) */
  uint64_t seed, offset;
  /* FP8 inputs (docs/contract.md, "FP8 inputs"). kv_dtype ATTUNE_DTYPE_E4M3
   * or _E5M2: K and V (a KV cache) stored so under fp16 / bf16 queries; any
   * other value: K and V in dtype. Each fp8 input is its stored value times
   * its descale, a float32 in the backend's memory at [b, kv_head] with
   * descale_strides {batch, head} (elements; {0, 0}: one per tensor); NULL:
   * 1. attune_buffers carries them for plan runs. */
  attune_dtype kv_dtype;
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t descale_strides[2];
} attune_problem;

typedef struct attune_runtime attune_runtime;

/* The ABI of this header: attune_abi_version() of the loaded library must
 * equal it (a caller built against another header must not call in). */
#define ATTUNE_ABI_VERSION 4
int attune_abi_version(void);
/* The library's version, "0.1.0". */
const char* attune_version(void);

/* Fills a problem with defaults: bf16, no mask, contiguous, no modifiers. */
void attune_problem_init(attune_problem* problem);

typedef struct {
  const char* backend; /* "cuda" (the default when NULL) or "emu" */
  int device;          /* CUDA device ordinal */
  /* Tuned results to dispatch from: NULL, the tuning database at the CLI's
   * default path ($ATTUNE_TUNING_DB, else $XDG_DATA_HOME/attune/tuning.db)
   * when it exists; a path, that database; "" none (heuristics only). */
  const char* tuning_db;
  const char* cache_directory; /* NVRTC kernel cache; NULL: the default */
} attune_runtime_options;

void attune_runtime_options_init(attune_runtime_options* options);
/* A runtime with `options` (NULL: the defaults). */
attune_status attune_runtime_create_with(const attune_runtime_options* options, attune_runtime** out);
/* backend: "cuda" or "emu"; the default tuning database as above. */
attune_status attune_runtime_create(const char* backend, int device, attune_runtime** out);
void attune_runtime_destroy(attune_runtime* runtime);

/* -- Plans: everything decided and loaded once, then runs that only launch --
 *
 * attune_plan_create validates the problem, dispatches, fixes the split
 * count, compiles and loads every kernel and sizes the workspace;
 * attune_plan_run launches and nothing else: no allocation, copy,
 * synchronization or compile, so it can be captured in a CUDA graph. Length
 * arrays (cu_seqlens, seqlens_k, block_table) are device memory passed to
 * each run; the plan holds host upper bounds, so one plan serves every step
 * whose batch fits it.
 *
 *   attune_plan_options po; attune_plan_options_init(&po);
 *   po.op = ATTUNE_OP_DECODE; po.device_lengths = 1; po.cu_seqlens_q = 1; po.seqlens_k = 1;
 *   po.max_seqlen_q = 512; po.max_seqlen_k = 32768;    // p.block_table NULL, p.max_pages set
 *   attune_plan* plan; attune_plan_create(rt, &p, &po, &plan);
 *   size_t bytes; attune_plan_workspace_size(plan, &bytes);    // allocate once
 *   attune_buffers b = {q, k, v, o, lse};  attune_metadata m = {d_cu_q, NULL, d_lens, d_table, -1};
 *   attune_plan_run(rt, plan, &b, &m, workspace, bytes, stream);  // every step
 */
typedef enum { ATTUNE_OP_FORWARD = 0, ATTUNE_OP_DECODE = 1, ATTUNE_OP_BACKWARD = 2 } attune_op;

typedef struct {
  attune_op op;        /* a forward over a paged cache with few query rows plans the decode kernel */
  const char* variant; /* a variant id (its kernel must match op); NULL: dispatched */
  int splits;          /* decode: CTAs along the keys; 0: tuned or built-in */
  int64_t split_size;  /* decode: fixed keys per split (batch invariant); 0: off */
  int deterministic;   /* backward: dQ summed in a fixed order */
  /* Lengths passed in device memory at each run, with the problem's host
   * arrays NULL: say which arrays the runs pass and bound their contents.
   * A paged problem (page_size > 0) passes block_table [batch, max_pages].
   * With device_lengths 0 and host arrays in the problem, the plan is made
   * for their bounds and the runs pass device copies of them. */
  int device_lengths;
  int cu_seqlens_q, cu_seqlens_k, seqlens_k; /* nonzero: runs pass this array */
  int64_t max_seqlen_q;                      /* the most query rows of one sequence */
  int64_t max_seqlen_k;                      /* the most keys of one sequence */
} attune_plan_options;

typedef struct attune_plan attune_plan;

/* Tensors of one run (the backend's memory). Forward and decode read q, k,
 * v and write o (and lse when not NULL); backward reads q, k, v, o, d_o and
 * lse and writes dq, dk, dv. The modifiers' tensors as in attune_problem.
 * rng_state: with dropout, {seed, offset} in the backend's memory, read by
 * the kernels at each run in place of the problem's (so a captured CUDA
 * graph's replays can draw new ones); NULL: the problem's. A backward gets
 * the forward's. */
typedef struct {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  const void* d_o;
  void* dq;
  void* dk;
  void* dv;
  const float* sinks;
  const float* alibi_slopes;
  float* dsink;
  const uint64_t* rng_state; /* [2]: seed, offset */
  const float* q_descale;    /* fp8 inputs: as in attune_problem */
  const float* k_descale;
  const float* v_descale;
} attune_buffers;

/* The length arrays of one run (the backend's memory) and its batch. */
typedef struct {
  const int32_t* cu_seqlens_q; /* [batch + 1] */
  const int32_t* cu_seqlens_k; /* [batch + 1] */
  const int32_t* seqlens_k;    /* [batch] */
  const int32_t* block_table;  /* [batch, max_pages] */
  int64_t batch;               /* sequences of this run, at most the plan's; -1: the plan's */
} attune_metadata;

void attune_plan_options_init(attune_plan_options* options);
/* options NULL: a forward, dispatched. */
attune_status attune_plan_create(attune_runtime* runtime, const attune_problem* problem,
                                 const attune_plan_options* options, attune_plan** out);
attune_status attune_plan_workspace_size(const attune_plan* plan, size_t* bytes);
/* What the plan runs, as "decode flash_decode/... , 4 splits, workspace N
 * bytes (tuned: ...)"; valid until the next call on this thread. */
const char* attune_plan_describe(const attune_plan* plan);
/* workspace: at least attune_plan_workspace_size bytes, 16-byte aligned
 * (NULL when that is 0). metadata NULL: none. */
attune_status attune_plan_run(attune_runtime* runtime, const attune_plan* plan, const attune_buffers* buffers,
                              const attune_metadata* metadata, void* workspace, size_t workspace_bytes, void* stream);
void attune_plan_destroy(attune_plan* plan);

/* -- Merging partial results over disjoint keys (cascade attention, context
 * parallelism): out = softmax-merge of `count` partials (O_i, LSE_i), each
 * O [rows, heads, head_dim] in the storage dtype with LSE [heads, rows]
 * float32 (natural log; -inf: an empty partial, skipped). A row that every
 * partial leaves empty gets O = 0 and LSE = -inf. out_lse may be NULL. */
attune_status attune_merge_states(attune_runtime* runtime, attune_dtype dtype, int64_t rows, int64_t heads,
                                  int64_t head_dim, int count, const void* const* o, const float* const* lse,
                                  void* out_o, float* out_lse, void* stream);

/* -- Appending a step's keys and values to a KV cache (flash-attn's
 * flash_attn_with_kvcache(k=, v=, rotary_cos=, rotary_sin=) before its
 * attention): new key t of sequence b goes to position cache_seqlens[b] + t
 * of its row, contiguous [cache_batch, seqlen_cache, heads_kv, D] or paged
 * (page_size > 0: pools [num_pages, page_size, heads_kv, D], block_table
 * [batch, max_pages]); seqlens_out[b] = cache_seqlens[b] + seqlen_new. With
 * rotary_dim > 0 the stored keys are rotated (cos and sin contiguous
 * [seqlen_ro, rotary_dim / 2], pairs (2j, 2j+1) when interleaved, else (j,
 * j + rotary_dim / 2)), and with seqlen_q > 0 Q is rotated into q_rot: row i
 * at cache_seqlens[b] + i when q_per_row (causal or local attention), else
 * every row at cache_seqlens[b]. Strides are [batch, seq, head] in elements
 * (the batch stride of a pool is its page stride). One launch; all pointers
 * in backend memory. Attention then runs over q_rot (or q) with seqlens_out
 * as the cache lengths. */
typedef struct {
  attune_dtype dtype;
  int64_t batch, seqlen_new, heads_kv, head_dim_k, head_dim_v;
  int64_t k_new_strides[3], v_new_strides[3];
  int64_t cache_batch, seqlen_cache;       /* a contiguous cache */
  int64_t page_size, num_pages, max_pages; /* a paged one (page_size 0: contiguous) */
  int64_t k_cache_strides[3], v_cache_strides[3];
  int64_t rotary_dim, seqlen_ro; /* rotary_dim 0: no rotary */
  int rotary_interleaved;
  int64_t seqlen_q, heads_q; /* seqlen_q 0: Q is not rotated */
  int64_t q_strides[3], q_rot_strides[3];
  int q_per_row;
} attune_append_problem;

typedef struct {
  const void *k_new, *v_new;
  void *k_cache, *v_cache;
  const void* q;
  void* q_rot;
  const void *rotary_cos, *rotary_sin;
  const int32_t* cache_seqlens;
  int32_t* seqlens_out;
  const int32_t* block_table;
} attune_append_buffers;

attune_status attune_append_kv(attune_runtime* runtime, const attune_append_problem* problem,
                               const attune_append_buffers* buffers, void* stream);

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
/* The same for a split-KV decode (with its split count; splits 0: the
 * dispatcher's) and a backward. */
const char* attune_explain_decode(attune_runtime* runtime, const attune_problem* problem, int splits);
const char* attune_explain_backward(attune_runtime* runtime, const attune_problem* problem, int deterministic);

/* -- The fp64 reference (docs/contract.md) on the host: the exact function
 * in double precision, for callers that want it rather than a kernel
 * (Python's float32 and float64 tensors, gradient checks). q, k and v are
 * doubles in host memory read with the problem's strides (no paged cache);
 * its length arrays and modifier tensors are host memory. o [B, Sq, Hq, Dv]
 * (packed [Tq, Hq, Dv]) and lse [B, Hq, Sq] (packed [Hq, Tq]) are written
 * contiguous; lse may be NULL. */
attune_status attune_reference_forward(const attune_problem* problem, const double* q, const double* k, const double* v,
                                       double* o, double* lse);
/* The gradients of sum(d_o * O): d_o contiguous like o above; dq, dk and dv
 * written contiguous ([B, S, H, D], packed [T, H, D]); with sinks, the sinks'
 * gradient goes to problem->dsink ([heads_q] floats). */
attune_status attune_reference_backward(const attune_problem* problem, const double* q, const double* k,
                                        const double* v, const double* d_o, double* dq, double* dk, double* dv);

/* The keep mask of attention dropout as the kernels and the reference draw
 * it: keep[((b * heads_q + h) * seqlen_q + i) * seqlen_k + j] = 1 when
 * element (query row i, key j) of sequence b, query head h is kept under
 * (dropout_p, seed, offset), else 0. Rows and keys are positions within
 * the sequence (varlen: give the longest lengths; each sequence's mask is
 * the top-left block of its [seqlen_q, seqlen_k]). Host memory. For
 * checking a run (Python's S_dmask), not for running one. */
attune_status attune_dropout_keep_mask(double dropout_p, uint64_t seed, uint64_t offset, int64_t batch, int64_t heads_q,
                                       int64_t seqlen_q, int64_t seqlen_k, uint8_t* keep);

/* The message of the last failure on this thread ("" if none). */
const char* attune_last_error(void);

/* With $ATTUNE_WAIT_BOUND_MS set, kernels give up an mbarrier wait after
 * that many ms and trap; this is what the first one wrote (block, thread,
 * barrier, parity, the barrier's word), as one line, readable after the
 * context is lost; "" when none gave up. */
const char* attune_wait_report(void);

/* Runs that read lengths and block tables from device memory (plans with
 * device lengths, CUDA graph replays) cannot be checked on the host: a
 * kernel given a length past its block-table row (or Sk), or a page outside
 * the pool, clamps it (nothing outside the pool or the table is read) and
 * records the first such event. This is it, as one line ("" when none since
 * the last clear; valid until the next call on this thread); a report means
 * some run's output is wrong. clear != 0 clears it after reading. Host
 * memory only: read it once the runs are complete. */
const char* attune_bounds_report(int clear);

/* NOLINTEND(modernize-use-using,readability-identifier-naming) */

#ifdef __cplusplus
}
#endif

#endif /* ATTUNE_C_H_ */
