/* A serving-engine style call through the installed C API: one plan for a
 * batch of mixed prefill and decode sequences over a paged KV cache, run
 * with the lengths and block table passed per run, as device arrays would
 * be on a GPU (the emulator's memory is the host's). Checked against a
 * naive double-precision attention over the gathered pages, bottom-right
 * causal per sequence. Prints "ok" and returns 0, or the error and 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "runtime/attune_c.h"

enum { kBatch = 3, kHeadsQ = 4, kHeadsKv = 2, kDim = 64, kPage = 16, kMaxPages = 8, kPool = 3 * kMaxPages + 2 };
#define TOLERANCE 2e-2 /* absolute, on bf16 outputs of values in [-1, 1] */

static const int32_t kQueryLens[kBatch] = {1, 23, 4}; /* decode, chunked prefill, decode with draft tokens */
static const int32_t kCacheLens[kBatch] = {100, 37, 128};

/* Key j of sequence b, head h, element d, through the block table. */
static size_t key_at(const int32_t* table, int b, int j, int h, int d) {
  const int page = table[b * kMaxPages + j / kPage];
  return (size_t)(((page * kPage + j % kPage) * kHeadsKv + h) * kDim + d);
}

static double max_error(const int32_t* cu, const int32_t* table, const uint16_t* q, const uint16_t* k,
                        const uint16_t* v, const uint16_t* o) {
  const double scale = 1.0 / sqrt((double)kDim);
  double worst = 0;
  for (int b = 0; b < kBatch; ++b) {
    const int len_q = cu[b + 1] - cu[b];
    const int len_k = kCacheLens[b];
    for (int h = 0; h < kHeadsQ; ++h) {
      const int hk = h / (kHeadsQ / kHeadsKv);
      for (int i = 0; i < len_q; ++i) {
        const int row = cu[b] + i;
        const int visible = i + len_k - len_q + 1; /* keys j <= i + Sk - Sq */
        double score[kMaxPages * kPage];
        double top = -INFINITY;
        for (int j = 0; j < visible; ++j) {
          double dot = 0;
          for (int d = 0; d < kDim; ++d) {
            dot += bf16_to_double(q[((size_t)row * kHeadsQ + h) * kDim + d]) *
                   bf16_to_double(k[key_at(table, b, j, hk, d)]);
          }
          score[j] = dot * scale;
          if (score[j] > top) top = score[j];
        }
        double sum = 0;
        for (int j = 0; j < visible; ++j) {
          score[j] = exp(score[j] - top);
          sum += score[j];
        }
        for (int d = 0; d < kDim; ++d) {
          double want = 0;
          for (int j = 0; j < visible; ++j) want += score[j] * bf16_to_double(v[key_at(table, b, j, hk, d)]);
          const double error = fabs(bf16_to_double(o[((size_t)row * kHeadsQ + h) * kDim + d]) - want / sum);
          if (!(error <= worst)) worst = error;
        }
      }
    }
  }
  return worst;
}

int main(void) {
  int32_t cu[kBatch + 1] = {0};
  for (int b = 0; b < kBatch; ++b) cu[b + 1] = cu[b] + kQueryLens[b];
  const int rows = cu[kBatch];
  int32_t table[kBatch * kMaxPages];
  for (int i = 0; i < kBatch * kMaxPages; ++i) table[i] = (i * 5 + 1) % kPool; /* scattered pages */
  const size_t q_count = (size_t)rows * kHeadsQ * kDim;
  const size_t pool_count = (size_t)kPool * kPage * kHeadsKv * kDim;
  uint16_t* q = malloc(q_count * sizeof *q);
  uint16_t* k = malloc(pool_count * sizeof *k);
  uint16_t* v = malloc(pool_count * sizeof *v);
  uint16_t* o = malloc(q_count * sizeof *o);
  if (q == NULL || k == NULL || v == NULL || o == NULL) return 1;
  fill_bf16(q, q_count, 4);
  fill_bf16(k, pool_count, 5);
  fill_bf16(v, pool_count, 6);
  memset(o, 0xFF, q_count * sizeof *o);

  attune_runtime* runtime = NULL;
  if (attune_runtime_create("emu", 0, &runtime) != ATTUNE_OK) {
    fprintf(stderr, "consumer_plan: attune_runtime_create: %s\n", attune_last_error());
    return 1;
  }
  attune_problem problem;
  attune_problem_init(&problem);
  problem.batch = kBatch;
  problem.seqlen_q = rows; /* packed query rows */
  problem.seqlen_k = kMaxPages * kPage;
  problem.heads_q = kHeadsQ;
  problem.heads_kv = kHeadsKv;
  problem.head_dim_k = kDim;
  problem.head_dim_v = kDim;
  problem.mask = ATTUNE_MASK_CAUSAL_BOTTOM_RIGHT;
  problem.page_size = kPage;
  problem.max_pages = kMaxPages;
  problem.num_pages = kPool;

  attune_plan_options options;
  attune_plan_options_init(&options);
  options.op = ATTUNE_OP_FORWARD;
  options.device_lengths = 1; /* lengths and block table arrive with each run */
  options.cu_seqlens_q = 1;
  options.seqlens_k = 1;
  options.max_seqlen_q = 24;
  options.max_seqlen_k = kMaxPages * kPage;
  options.splits = 2;
  attune_plan* plan = NULL;
  if (attune_plan_create(runtime, &problem, &options, &plan) != ATTUNE_OK) {
    fprintf(stderr, "consumer_plan: attune_plan_create: %s\n", attune_last_error());
    return 1;
  }
  size_t bytes = 0;
  attune_plan_workspace_size(plan, &bytes);
  void* workspace = bytes > 0 ? aligned_alloc(16, (bytes + 15) / 16 * 16) : NULL;
  attune_buffers buffers;
  memset(&buffers, 0, sizeof buffers);
  buffers.q = q;
  buffers.k = k;
  buffers.v = v;
  buffers.o = o;
  const attune_metadata metadata = {cu, NULL, kCacheLens, table, -1};
  const attune_status status = attune_plan_run(runtime, plan, &buffers, &metadata, workspace, bytes, NULL);
  if (status != ATTUNE_OK) {
    fprintf(stderr, "consumer_plan: attune_plan_run: status %d: %s\n", (int)status, attune_last_error());
    return 1;
  }
  fprintf(stderr, "consumer_plan: %s\n", attune_plan_describe(plan));
  attune_plan_destroy(plan);
  attune_runtime_destroy(runtime);
  free(workspace);

  const double error = max_error(cu, table, q, k, v, o);
  free(q);
  free(k);
  free(v);
  free(o);
  if (!(error <= TOLERANCE)) {
    printf("consumer_plan: max |O - reference| = %g, expected at most %g\n", error, TOLERANCE);
    return 1;
  }
  puts("ok");
  return 0;
}
