// What attune-gen parses the templates against instead of the CUDA headers:
// the declarations the primitives use, in clang's CUDA device mode. Parsing
// only; nothing is generated from it.
#pragma once

// clang defines this only in its CUDA wrapper headers, which we leave out:
// it makes the templates pick templates/primitives/cuda.h, as NVRTC does.
#define __CUDACC__ 1
// Lets the templates annotate declarations for attune-gen (ATTUNE_TUNABLE_OF).
#define ATTUNE_GEN 1

#define __host__ __attribute__((host))
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __grid_constant__  // clang 16 does not know it; NVRTC checks it

struct __attune_uint3 {
  unsigned x, y, z;
};
extern const __device__ __attune_uint3 threadIdx;
extern const __device__ __attune_uint3 blockIdx;
extern const __device__ __attune_uint3 blockDim;
extern const __device__ __attune_uint3 gridDim;

__device__ void __syncthreads();
__device__ void __threadfence_system();
__device__ unsigned atomicMax(unsigned* address, unsigned value);
__device__ float __int_as_float(int);
__device__ float __uint_as_float(unsigned);
__device__ unsigned __float_as_uint(float);
__device__ unsigned long long __cvta_generic_to_shared(const void*);
__device__ unsigned long long __cvta_generic_to_global(const void*);
template <class T>
__device__ T __shfl_xor_sync(unsigned mask, T value, int lane_mask);
template <class T>
__device__ T __shfl_sync(unsigned mask, T value, int src_lane);
