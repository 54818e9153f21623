/* A program outside attune's tree that uses only the installed C API
 * (attune::attune_c, or `pkg-config attune`): a small dense forward
 * attention with grouped-query heads on the emulator backend, whose buffers
 * are host memory with bf16 values stored as uint16_t bit patterns, checked
 * against a naive double-precision softmax(Q K^T scale) V written here.
 * Prints "ok" and returns 0, or the largest error and returns 1. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "runtime/attune_c.h"

enum { kBatch = 2, kSeqQ = 13, kSeqK = 21, kHeadsQ = 4, kHeadsKv = 2, kDim = 32 };
#define TOLERANCE 2e-2 /* absolute, on bf16 outputs of values in [-1, 1] */

/* Element offsets of contiguous [batch, seq, heads, dim] tensors. */
static size_t q_at(int b, int i, int h, int d) { return (size_t)(((b * kSeqQ + i) * kHeadsQ + h) * kDim + d); }
static size_t kv_at(int b, int j, int h, int d) { return (size_t)(((b * kSeqK + j) * kHeadsKv + h) * kDim + d); }

/* The largest |O - softmax(Q K^T scale) V| over every element. */
static double max_error(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* o) {
  const double scale = 1.0 / sqrt((double)kDim);
  double worst = 0;
  for (int b = 0; b < kBatch; ++b) {
    for (int h = 0; h < kHeadsQ; ++h) {
      const int hk = h / (kHeadsQ / kHeadsKv);
      for (int i = 0; i < kSeqQ; ++i) {
        double score[kSeqK];
        double top = -INFINITY;
        for (int j = 0; j < kSeqK; ++j) {
          double dot = 0;
          for (int d = 0; d < kDim; ++d)
            dot += bf16_to_double(q[q_at(b, i, h, d)]) * bf16_to_double(k[kv_at(b, j, hk, d)]);
          score[j] = dot * scale;
          if (score[j] > top) top = score[j];
        }
        double sum = 0;
        for (int j = 0; j < kSeqK; ++j) {
          score[j] = exp(score[j] - top);
          sum += score[j];
        }
        for (int d = 0; d < kDim; ++d) {
          double want = 0;
          for (int j = 0; j < kSeqK; ++j) want += score[j] * bf16_to_double(v[kv_at(b, j, hk, d)]);
          const double error = fabs(bf16_to_double(o[q_at(b, i, h, d)]) - want / sum);
          if (!(error <= worst)) worst = error; /* NaN counts as the worst */
        }
      }
    }
  }
  return worst;
}

int main(void) {
  const size_t q_count = (size_t)kBatch * kSeqQ * kHeadsQ * kDim;
  const size_t kv_count = (size_t)kBatch * kSeqK * kHeadsKv * kDim;
  uint16_t* q = malloc(q_count * sizeof *q);
  uint16_t* k = malloc(kv_count * sizeof *k);
  uint16_t* v = malloc(kv_count * sizeof *v);
  uint16_t* o = malloc(q_count * sizeof *o);
  if (q == NULL || k == NULL || v == NULL || o == NULL) {
    fputs("consumer_c: out of memory\n", stderr);
    return 1;
  }
  fill_bf16(q, q_count, 1);
  fill_bf16(k, kv_count, 2);
  fill_bf16(v, kv_count, 3);
  memset(o, 0xFF, q_count * sizeof *o); /* NaN: every element must be written */

  attune_runtime* runtime = NULL;
  if (attune_runtime_create("emu", 0, &runtime) != ATTUNE_OK) {
    fprintf(stderr, "consumer_c: attune_runtime_create: %s\n", attune_last_error());
    return 1;
  }
  attune_problem problem;
  attune_problem_init(&problem); /* bf16, no mask, contiguous, scale 1/sqrt(dim) */
  problem.batch = kBatch;
  problem.seqlen_q = kSeqQ;
  problem.seqlen_k = kSeqK;
  problem.heads_q = kHeadsQ;
  problem.heads_kv = kHeadsKv;
  problem.head_dim_k = kDim;
  problem.head_dim_v = kDim;
  const attune_status status = attune_forward(runtime, &problem, q, k, v, o, NULL, NULL);
  if (status != ATTUNE_OK) {
    fprintf(stderr, "consumer_c: attune_forward: status %d: %s\n", (int)status, attune_last_error());
    attune_runtime_destroy(runtime);
    return 1;
  }
  attune_runtime_destroy(runtime);

  const double error = max_error(q, k, v, o);
  free(q);
  free(k);
  free(v);
  free(o);
  if (!(error <= TOLERANCE)) {
    printf("consumer_c: max |O - reference| = %g, expected at most %g\n", error, TOLERANCE);
    return 1;
  }
  puts("ok");
  return 0;
}
