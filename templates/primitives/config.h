// What every template sees first: which implementation of the primitives is
// in use, the function qualifiers, and fixed-width types that need no
// standard headers (NVRTC has none by default).
//
//   ATTUNE_CUDA       defined when compiling device code (NVRTC or nvcc)
//   ATTUNE_EMULATOR   defined when compiling for the CPU emulator
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTUNE_CUDA 1
#define ATTUNE_DEVICE __device__ __forceinline__
#define ATTUNE_HOST_DEVICE __host__ __device__
// C++ linkage, so kernels can be templates; the runtime finds the lowered
// name of an instantiation through NVRTC name expressions.
#define ATTUNE_KERNEL __global__
#define ATTUNE_UNROLL _Pragma("unroll")
// A loop kept rolled: its iterations' work is not interleaved by the
// scheduler (nor their registers piled up).
#define ATTUNE_ROLLED _Pragma("unroll 1")
// A kernel's register cap at entry (setmaxnreg needs one), and a parameter
// read through its address (a TMA tensor map).
#define ATTUNE_LAUNCH_BOUNDS(threads, blocks) __launch_bounds__(threads, blocks)
#define ATTUNE_GRID_CONSTANT __grid_constant__
#else
#define ATTUNE_EMULATOR 1
#define ATTUNE_DEVICE inline
#define ATTUNE_HOST_DEVICE
// The emulator calls the kernel body once per thread, as a plain function.
#define ATTUNE_KERNEL inline
#define ATTUNE_UNROLL
#define ATTUNE_ROLLED
#define ATTUNE_LAUNCH_BOUNDS(threads, blocks)
#define ATTUNE_GRID_CONSTANT
#endif

// Marks a params field that carries a tunable of a kernel (a value one
// kernel needs at run time that is another kernel's template parameter,
// e.g. the key block of flash_bwd for its dQ convert): attune-gen checks
// that the kernel and tunable exist and generates the code that fills the
// field from that kernel's typed shape (fill_tunable_fields).
#if defined(ATTUNE_GEN)
#define ATTUNE_TUNABLE_OF(kernel, tunable) __attribute__((annotate("attune_tunable_of " #kernel " " #tunable)))
#else
#define ATTUNE_TUNABLE_OF(kernel, tunable)
#endif

namespace attune {

using i32 = int;
using u8 = unsigned char;
using u16 = unsigned short;
using u32 = unsigned int;
using i64 = long long;
using u64 = unsigned long long;

static_assert(sizeof(u8) == 1 && sizeof(u16) == 2 && sizeof(u32) == 4 && sizeof(u64) == 8, "fixed-width types");

// Block and grid coordinates, as CUDA's dim3.
struct Dim3 {
  i32 x = 1;
  i32 y = 1;
  i32 z = 1;
};

// 16 bytes moved by one vectorized access or one cp.async.
struct alignas(16) Vec16 {
  u32 w[4];
};

// Storage dtype tags of the kernels' 16-bit inputs.
struct Fp16 {};
struct Bf16 {};

inline constexpr i32 kWarpSize = 32;

}  // namespace attune
