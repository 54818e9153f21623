/* bf16 values as uint16_t bit patterns, for the C examples: the emulator's
 * buffers are host memory holding the storage dtype's bits. */
#ifndef ATTUNE_EXAMPLE_BF16_H_
#define ATTUNE_EXAMPLE_BF16_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t float_to_bf16(float value) { /* round to nearest even; the inputs are finite */
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return (uint16_t)(bits >> 16);
}

static inline double bf16_to_double(uint16_t stored) {
  const uint32_t bits = (uint32_t)stored << 16;
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* Deterministic values in [-1, 1), already rounded to bf16. */
static inline void fill_bf16(uint16_t* data, size_t count, uint32_t seed) {
  for (size_t i = 0; i < count; ++i) {
    seed = seed * 1664525u + 1013904223u;
    data[i] = float_to_bf16((float)(seed >> 8) / (float)(1u << 23) - 1.0f);
  }
}

#endif /* ATTUNE_EXAMPLE_BF16_H_ */
