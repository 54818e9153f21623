// CUDA implementation of Hopper's primitives (sm_90a): warpgroup MMA with
// operands in shared memory (matrix descriptors, hopper_layout.h), the
// tensor-memory accelerator, mbarriers, named barriers, elect.sync and
// setmaxnreg, as inline PTX (PTX ISA 8.0+). Included only by Hopper
// templates, compiled for sm_90a; sm_80 kernels never see it.
//
// API (all in attune::dev; D is Fp16 or Bf16; bar is a u64 in shared memory):
//   warpgroup::index(), warpgroup::thread()            // warp-uniform; 0..127
//   wgmma::fence(); wgmma::commit(); wgmma::wait<N>();  // .fence/.commit_group/.wait_group
//   wgmma::fence_operands(float (&)[R])                // a compiler fence on registers
//   wgmma::mma_ss<D, N, kTransA, kTransB>(float (&d)[N/2], u64 desc_a, u64 desc_b, i32 accumulate)
//   wgmma::mma_rs<D, N, kTransB>(float (&d)[N/2], const u32 (&a)[4], u64 desc_b, i32 accumulate)
//   (both also take d as mma.sync's C fragment of a warp, float (&d)[1][N/8][4])
//   wgmma::descriptor(const void* smem, lbo, sbo, Swizzle)   // sm90::encode_descriptor
//   registers::increase<R>(), registers::decrease<R>()  // setmaxnreg.{inc,dec}
//   mbarrier::init(bar, count), arrive(bar), arrive_expect_tx(bar, bytes), expect_tx(bar, bytes),
//     try_wait(bar, parity) -> bool, wait(bar, parity), invalidate(bar); fence_init()
//   fence_proxy_async()                                 // fence.proxy.async.shared::cta
//   named_barrier::sync(id, threads), named_barrier::arrive(id, threads)
//   elect_one() -> bool                                 // elect.sync: one lane of the warp
//   tma::load<2..5>(smem, const TensorMap*, bar, coords...), tma::store<2..5>(const TensorMap*, smem, coords...),
//   tma::commit(), tma::wait_read<N>(), tma::prefetch(const TensorMap*)
//
// Built with -DATTUNE_WAIT_BOUND_MS=N, mbarrier::wait gives up after N ms:
// the first thread to give up writes a WaitReport (wait_report.h) through
// `attune_wait_report` and traps, so a hang becomes a failed launch that
// names its barrier.
#pragma once

#include "templates/primitives/cuda.h"
#include "templates/primitives/hopper_layout.h"
#include "templates/primitives/wait_report.h"

// attune-gen only reads the templates (for sm_80): no code is generated.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(ATTUNE_GEN)
#error "templates/primitives/hopper_cuda.h: wgmma and setmaxnreg need sm_90a (compile with --gpu-architecture=sm_90a)"
#endif

// The operand lists of wgmma.mma_async for every N (8..256 by 8): N/2
// accumulators %0..%(N/2-1), then the descriptors or A registers, the
// accumulate flag and the transposition immediates.
#define ATTUNE_WGMMA_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define ATTUNE_WGMMA_OUT_8 ATTUNE_WGMMA_D4(0)
#define ATTUNE_WGMMA_OUT_16 ATTUNE_WGMMA_OUT_8, ATTUNE_WGMMA_D4(4)
#define ATTUNE_WGMMA_OUT_24 ATTUNE_WGMMA_OUT_16, ATTUNE_WGMMA_D4(8)
#define ATTUNE_WGMMA_OUT_32 ATTUNE_WGMMA_OUT_24, ATTUNE_WGMMA_D4(12)
#define ATTUNE_WGMMA_OUT_40 ATTUNE_WGMMA_OUT_32, ATTUNE_WGMMA_D4(16)
#define ATTUNE_WGMMA_OUT_48 ATTUNE_WGMMA_OUT_40, ATTUNE_WGMMA_D4(20)
#define ATTUNE_WGMMA_OUT_56 ATTUNE_WGMMA_OUT_48, ATTUNE_WGMMA_D4(24)
#define ATTUNE_WGMMA_OUT_64 ATTUNE_WGMMA_OUT_56, ATTUNE_WGMMA_D4(28)
#define ATTUNE_WGMMA_OUT_72 ATTUNE_WGMMA_OUT_64, ATTUNE_WGMMA_D4(32)
#define ATTUNE_WGMMA_OUT_80 ATTUNE_WGMMA_OUT_72, ATTUNE_WGMMA_D4(36)
#define ATTUNE_WGMMA_OUT_88 ATTUNE_WGMMA_OUT_80, ATTUNE_WGMMA_D4(40)
#define ATTUNE_WGMMA_OUT_96 ATTUNE_WGMMA_OUT_88, ATTUNE_WGMMA_D4(44)
#define ATTUNE_WGMMA_OUT_104 ATTUNE_WGMMA_OUT_96, ATTUNE_WGMMA_D4(48)
#define ATTUNE_WGMMA_OUT_112 ATTUNE_WGMMA_OUT_104, ATTUNE_WGMMA_D4(52)
#define ATTUNE_WGMMA_OUT_120 ATTUNE_WGMMA_OUT_112, ATTUNE_WGMMA_D4(56)
#define ATTUNE_WGMMA_OUT_128 ATTUNE_WGMMA_OUT_120, ATTUNE_WGMMA_D4(60)
#define ATTUNE_WGMMA_OUT_136 ATTUNE_WGMMA_OUT_128, ATTUNE_WGMMA_D4(64)
#define ATTUNE_WGMMA_OUT_144 ATTUNE_WGMMA_OUT_136, ATTUNE_WGMMA_D4(68)
#define ATTUNE_WGMMA_OUT_152 ATTUNE_WGMMA_OUT_144, ATTUNE_WGMMA_D4(72)
#define ATTUNE_WGMMA_OUT_160 ATTUNE_WGMMA_OUT_152, ATTUNE_WGMMA_D4(76)
#define ATTUNE_WGMMA_OUT_168 ATTUNE_WGMMA_OUT_160, ATTUNE_WGMMA_D4(80)
#define ATTUNE_WGMMA_OUT_176 ATTUNE_WGMMA_OUT_168, ATTUNE_WGMMA_D4(84)
#define ATTUNE_WGMMA_OUT_184 ATTUNE_WGMMA_OUT_176, ATTUNE_WGMMA_D4(88)
#define ATTUNE_WGMMA_OUT_192 ATTUNE_WGMMA_OUT_184, ATTUNE_WGMMA_D4(92)
#define ATTUNE_WGMMA_OUT_200 ATTUNE_WGMMA_OUT_192, ATTUNE_WGMMA_D4(96)
#define ATTUNE_WGMMA_OUT_208 ATTUNE_WGMMA_OUT_200, ATTUNE_WGMMA_D4(100)
#define ATTUNE_WGMMA_OUT_216 ATTUNE_WGMMA_OUT_208, ATTUNE_WGMMA_D4(104)
#define ATTUNE_WGMMA_OUT_224 ATTUNE_WGMMA_OUT_216, ATTUNE_WGMMA_D4(108)
#define ATTUNE_WGMMA_OUT_232 ATTUNE_WGMMA_OUT_224, ATTUNE_WGMMA_D4(112)
#define ATTUNE_WGMMA_OUT_240 ATTUNE_WGMMA_OUT_232, ATTUNE_WGMMA_D4(116)
#define ATTUNE_WGMMA_OUT_248 ATTUNE_WGMMA_OUT_240, ATTUNE_WGMMA_D4(120)
#define ATTUNE_WGMMA_OUT_256 ATTUNE_WGMMA_OUT_248, ATTUNE_WGMMA_D4(124)
#define ATTUNE_WGMMA_REGS_8 "%0, %1, %2, %3"
#define ATTUNE_WGMMA_REGS_16 ATTUNE_WGMMA_REGS_8 ", %4, %5, %6, %7"
#define ATTUNE_WGMMA_REGS_24 ATTUNE_WGMMA_REGS_16 ", %8, %9, %10, %11"
#define ATTUNE_WGMMA_REGS_32 ATTUNE_WGMMA_REGS_24 ", %12, %13, %14, %15"
#define ATTUNE_WGMMA_REGS_40 ATTUNE_WGMMA_REGS_32 ", %16, %17, %18, %19"
#define ATTUNE_WGMMA_REGS_48 ATTUNE_WGMMA_REGS_40 ", %20, %21, %22, %23"
#define ATTUNE_WGMMA_REGS_56 ATTUNE_WGMMA_REGS_48 ", %24, %25, %26, %27"
#define ATTUNE_WGMMA_REGS_64 ATTUNE_WGMMA_REGS_56 ", %28, %29, %30, %31"
#define ATTUNE_WGMMA_REGS_72 ATTUNE_WGMMA_REGS_64 ", %32, %33, %34, %35"
#define ATTUNE_WGMMA_REGS_80 ATTUNE_WGMMA_REGS_72 ", %36, %37, %38, %39"
#define ATTUNE_WGMMA_REGS_88 ATTUNE_WGMMA_REGS_80 ", %40, %41, %42, %43"
#define ATTUNE_WGMMA_REGS_96 ATTUNE_WGMMA_REGS_88 ", %44, %45, %46, %47"
#define ATTUNE_WGMMA_REGS_104 ATTUNE_WGMMA_REGS_96 ", %48, %49, %50, %51"
#define ATTUNE_WGMMA_REGS_112 ATTUNE_WGMMA_REGS_104 ", %52, %53, %54, %55"
#define ATTUNE_WGMMA_REGS_120 ATTUNE_WGMMA_REGS_112 ", %56, %57, %58, %59"
#define ATTUNE_WGMMA_REGS_128 ATTUNE_WGMMA_REGS_120 ", %60, %61, %62, %63"
#define ATTUNE_WGMMA_REGS_136 ATTUNE_WGMMA_REGS_128 ", %64, %65, %66, %67"
#define ATTUNE_WGMMA_REGS_144 ATTUNE_WGMMA_REGS_136 ", %68, %69, %70, %71"
#define ATTUNE_WGMMA_REGS_152 ATTUNE_WGMMA_REGS_144 ", %72, %73, %74, %75"
#define ATTUNE_WGMMA_REGS_160 ATTUNE_WGMMA_REGS_152 ", %76, %77, %78, %79"
#define ATTUNE_WGMMA_REGS_168 ATTUNE_WGMMA_REGS_160 ", %80, %81, %82, %83"
#define ATTUNE_WGMMA_REGS_176 ATTUNE_WGMMA_REGS_168 ", %84, %85, %86, %87"
#define ATTUNE_WGMMA_REGS_184 ATTUNE_WGMMA_REGS_176 ", %88, %89, %90, %91"
#define ATTUNE_WGMMA_REGS_192 ATTUNE_WGMMA_REGS_184 ", %92, %93, %94, %95"
#define ATTUNE_WGMMA_REGS_200 ATTUNE_WGMMA_REGS_192 ", %96, %97, %98, %99"
#define ATTUNE_WGMMA_REGS_208 ATTUNE_WGMMA_REGS_200 ", %100, %101, %102, %103"
#define ATTUNE_WGMMA_REGS_216 ATTUNE_WGMMA_REGS_208 ", %104, %105, %106, %107"
#define ATTUNE_WGMMA_REGS_224 ATTUNE_WGMMA_REGS_216 ", %108, %109, %110, %111"
#define ATTUNE_WGMMA_REGS_232 ATTUNE_WGMMA_REGS_224 ", %112, %113, %114, %115"
#define ATTUNE_WGMMA_REGS_240 ATTUNE_WGMMA_REGS_232 ", %116, %117, %118, %119"
#define ATTUNE_WGMMA_REGS_248 ATTUNE_WGMMA_REGS_240 ", %120, %121, %122, %123"
#define ATTUNE_WGMMA_REGS_256 ATTUNE_WGMMA_REGS_248 ", %124, %125, %126, %127"
#define ATTUNE_WGMMA_SS_SETP_8 "setp.ne.b32 p, %6, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_8 "}, %4, %5, p, 1, 1, %7, %8;\n"
#define ATTUNE_WGMMA_SS_SETP_16 "setp.ne.b32 p, %10, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_16 "}, %8, %9, p, 1, 1, %11, %12;\n"
#define ATTUNE_WGMMA_SS_SETP_24 "setp.ne.b32 p, %14, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_24 "}, %12, %13, p, 1, 1, %15, %16;\n"
#define ATTUNE_WGMMA_SS_SETP_32 "setp.ne.b32 p, %18, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_32 "}, %16, %17, p, 1, 1, %19, %20;\n"
#define ATTUNE_WGMMA_SS_SETP_40 "setp.ne.b32 p, %22, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_40 "}, %20, %21, p, 1, 1, %23, %24;\n"
#define ATTUNE_WGMMA_SS_SETP_48 "setp.ne.b32 p, %26, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_48 "}, %24, %25, p, 1, 1, %27, %28;\n"
#define ATTUNE_WGMMA_SS_SETP_56 "setp.ne.b32 p, %30, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_56 "}, %28, %29, p, 1, 1, %31, %32;\n"
#define ATTUNE_WGMMA_SS_SETP_64 "setp.ne.b32 p, %34, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_64 "}, %32, %33, p, 1, 1, %35, %36;\n"
#define ATTUNE_WGMMA_SS_SETP_72 "setp.ne.b32 p, %38, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_72 "}, %36, %37, p, 1, 1, %39, %40;\n"
#define ATTUNE_WGMMA_SS_SETP_80 "setp.ne.b32 p, %42, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_80 "}, %40, %41, p, 1, 1, %43, %44;\n"
#define ATTUNE_WGMMA_SS_SETP_88 "setp.ne.b32 p, %46, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_88 "}, %44, %45, p, 1, 1, %47, %48;\n"
#define ATTUNE_WGMMA_SS_SETP_96 "setp.ne.b32 p, %50, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_96 "}, %48, %49, p, 1, 1, %51, %52;\n"
#define ATTUNE_WGMMA_SS_SETP_104 "setp.ne.b32 p, %54, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_104 "}, %52, %53, p, 1, 1, %55, %56;\n"
#define ATTUNE_WGMMA_SS_SETP_112 "setp.ne.b32 p, %58, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_112 "}, %56, %57, p, 1, 1, %59, %60;\n"
#define ATTUNE_WGMMA_SS_SETP_120 "setp.ne.b32 p, %62, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_120 "}, %60, %61, p, 1, 1, %63, %64;\n"
#define ATTUNE_WGMMA_SS_SETP_128 "setp.ne.b32 p, %66, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_128 "}, %64, %65, p, 1, 1, %67, %68;\n"
#define ATTUNE_WGMMA_SS_SETP_136 "setp.ne.b32 p, %70, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_136 "}, %68, %69, p, 1, 1, %71, %72;\n"
#define ATTUNE_WGMMA_SS_SETP_144 "setp.ne.b32 p, %74, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_144 "}, %72, %73, p, 1, 1, %75, %76;\n"
#define ATTUNE_WGMMA_SS_SETP_152 "setp.ne.b32 p, %78, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_152 "}, %76, %77, p, 1, 1, %79, %80;\n"
#define ATTUNE_WGMMA_SS_SETP_160 "setp.ne.b32 p, %82, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_160 "}, %80, %81, p, 1, 1, %83, %84;\n"
#define ATTUNE_WGMMA_SS_SETP_168 "setp.ne.b32 p, %86, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_168 "}, %84, %85, p, 1, 1, %87, %88;\n"
#define ATTUNE_WGMMA_SS_SETP_176 "setp.ne.b32 p, %90, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_176 "}, %88, %89, p, 1, 1, %91, %92;\n"
#define ATTUNE_WGMMA_SS_SETP_184 "setp.ne.b32 p, %94, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_184 "}, %92, %93, p, 1, 1, %95, %96;\n"
#define ATTUNE_WGMMA_SS_SETP_192 "setp.ne.b32 p, %98, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_192 "}, %96, %97, p, 1, 1, %99, %100;\n"
#define ATTUNE_WGMMA_SS_SETP_200 "setp.ne.b32 p, %102, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_200 "}, %100, %101, p, 1, 1, %103, %104;\n"
#define ATTUNE_WGMMA_SS_SETP_208 "setp.ne.b32 p, %106, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_208 "}, %104, %105, p, 1, 1, %107, %108;\n"
#define ATTUNE_WGMMA_SS_SETP_216 "setp.ne.b32 p, %110, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_216 "}, %108, %109, p, 1, 1, %111, %112;\n"
#define ATTUNE_WGMMA_SS_SETP_224 "setp.ne.b32 p, %114, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_224 "}, %112, %113, p, 1, 1, %115, %116;\n"
#define ATTUNE_WGMMA_SS_SETP_232 "setp.ne.b32 p, %118, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_232 "}, %116, %117, p, 1, 1, %119, %120;\n"
#define ATTUNE_WGMMA_SS_SETP_240 "setp.ne.b32 p, %122, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_240 "}, %120, %121, p, 1, 1, %123, %124;\n"
#define ATTUNE_WGMMA_SS_SETP_248 "setp.ne.b32 p, %126, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_248 "}, %124, %125, p, 1, 1, %127, %128;\n"
#define ATTUNE_WGMMA_SS_SETP_256 "setp.ne.b32 p, %130, 0;\n"
#define ATTUNE_WGMMA_SS_TAIL_256 "}, %128, %129, p, 1, 1, %131, %132;\n"
#define ATTUNE_WGMMA_RS_SETP_8 "setp.ne.b32 p, %9, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_8 "}, {%4, %5, %6, %7}, %8, p, 1, 1, %10;\n"
#define ATTUNE_WGMMA_RS_SETP_16 "setp.ne.b32 p, %13, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_16 "}, {%8, %9, %10, %11}, %12, p, 1, 1, %14;\n"
#define ATTUNE_WGMMA_RS_SETP_24 "setp.ne.b32 p, %17, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_24 "}, {%12, %13, %14, %15}, %16, p, 1, 1, %18;\n"
#define ATTUNE_WGMMA_RS_SETP_32 "setp.ne.b32 p, %21, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_32 "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n"
#define ATTUNE_WGMMA_RS_SETP_40 "setp.ne.b32 p, %25, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_40 "}, {%20, %21, %22, %23}, %24, p, 1, 1, %26;\n"
#define ATTUNE_WGMMA_RS_SETP_48 "setp.ne.b32 p, %29, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_48 "}, {%24, %25, %26, %27}, %28, p, 1, 1, %30;\n"
#define ATTUNE_WGMMA_RS_SETP_56 "setp.ne.b32 p, %33, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_56 "}, {%28, %29, %30, %31}, %32, p, 1, 1, %34;\n"
#define ATTUNE_WGMMA_RS_SETP_64 "setp.ne.b32 p, %37, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_64 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
#define ATTUNE_WGMMA_RS_SETP_72 "setp.ne.b32 p, %41, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_72 "}, {%36, %37, %38, %39}, %40, p, 1, 1, %42;\n"
#define ATTUNE_WGMMA_RS_SETP_80 "setp.ne.b32 p, %45, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_80 "}, {%40, %41, %42, %43}, %44, p, 1, 1, %46;\n"
#define ATTUNE_WGMMA_RS_SETP_88 "setp.ne.b32 p, %49, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_88 "}, {%44, %45, %46, %47}, %48, p, 1, 1, %50;\n"
#define ATTUNE_WGMMA_RS_SETP_96 "setp.ne.b32 p, %53, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_96 "}, {%48, %49, %50, %51}, %52, p, 1, 1, %54;\n"
#define ATTUNE_WGMMA_RS_SETP_104 "setp.ne.b32 p, %57, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_104 "}, {%52, %53, %54, %55}, %56, p, 1, 1, %58;\n"
#define ATTUNE_WGMMA_RS_SETP_112 "setp.ne.b32 p, %61, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_112 "}, {%56, %57, %58, %59}, %60, p, 1, 1, %62;\n"
#define ATTUNE_WGMMA_RS_SETP_120 "setp.ne.b32 p, %65, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_120 "}, {%60, %61, %62, %63}, %64, p, 1, 1, %66;\n"
#define ATTUNE_WGMMA_RS_SETP_128 "setp.ne.b32 p, %69, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_128 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
#define ATTUNE_WGMMA_RS_SETP_136 "setp.ne.b32 p, %73, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_136 "}, {%68, %69, %70, %71}, %72, p, 1, 1, %74;\n"
#define ATTUNE_WGMMA_RS_SETP_144 "setp.ne.b32 p, %77, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_144 "}, {%72, %73, %74, %75}, %76, p, 1, 1, %78;\n"
#define ATTUNE_WGMMA_RS_SETP_152 "setp.ne.b32 p, %81, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_152 "}, {%76, %77, %78, %79}, %80, p, 1, 1, %82;\n"
#define ATTUNE_WGMMA_RS_SETP_160 "setp.ne.b32 p, %85, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_160 "}, {%80, %81, %82, %83}, %84, p, 1, 1, %86;\n"
#define ATTUNE_WGMMA_RS_SETP_168 "setp.ne.b32 p, %89, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_168 "}, {%84, %85, %86, %87}, %88, p, 1, 1, %90;\n"
#define ATTUNE_WGMMA_RS_SETP_176 "setp.ne.b32 p, %93, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_176 "}, {%88, %89, %90, %91}, %92, p, 1, 1, %94;\n"
#define ATTUNE_WGMMA_RS_SETP_184 "setp.ne.b32 p, %97, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_184 "}, {%92, %93, %94, %95}, %96, p, 1, 1, %98;\n"
#define ATTUNE_WGMMA_RS_SETP_192 "setp.ne.b32 p, %101, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_192 "}, {%96, %97, %98, %99}, %100, p, 1, 1, %102;\n"
#define ATTUNE_WGMMA_RS_SETP_200 "setp.ne.b32 p, %105, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_200 "}, {%100, %101, %102, %103}, %104, p, 1, 1, %106;\n"
#define ATTUNE_WGMMA_RS_SETP_208 "setp.ne.b32 p, %109, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_208 "}, {%104, %105, %106, %107}, %108, p, 1, 1, %110;\n"
#define ATTUNE_WGMMA_RS_SETP_216 "setp.ne.b32 p, %113, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_216 "}, {%108, %109, %110, %111}, %112, p, 1, 1, %114;\n"
#define ATTUNE_WGMMA_RS_SETP_224 "setp.ne.b32 p, %117, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_224 "}, {%112, %113, %114, %115}, %116, p, 1, 1, %118;\n"
#define ATTUNE_WGMMA_RS_SETP_232 "setp.ne.b32 p, %121, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_232 "}, {%116, %117, %118, %119}, %120, p, 1, 1, %122;\n"
#define ATTUNE_WGMMA_RS_SETP_240 "setp.ne.b32 p, %125, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_240 "}, {%120, %121, %122, %123}, %124, p, 1, 1, %126;\n"
#define ATTUNE_WGMMA_RS_SETP_248 "setp.ne.b32 p, %129, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_248 "}, {%124, %125, %126, %127}, %128, p, 1, 1, %130;\n"
#define ATTUNE_WGMMA_RS_SETP_256 "setp.ne.b32 p, %133, 0;\n"
#define ATTUNE_WGMMA_RS_TAIL_256 "}, {%128, %129, %130, %131}, %132, p, 1, 1, %134;\n"
#define ATTUNE_WGMMA_SS_ALL(T)                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        \
  ATTUNE_WGMMA_SS_CASE(8, T)                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                          \
  else ATTUNE_WGMMA_SS_CASE(16, T) else ATTUNE_WGMMA_SS_CASE(24, T) else ATTUNE_WGMMA_SS_CASE(32, T) else ATTUNE_WGMMA_SS_CASE(40, T) else ATTUNE_WGMMA_SS_CASE(                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                      \
      48, T) else ATTUNE_WGMMA_SS_CASE(56, T) else ATTUNE_WGMMA_SS_CASE(64, T) else ATTUNE_WGMMA_SS_CASE(72,                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                          \
                                                                                                         T) else ATTUNE_WGMMA_SS_CASE(80, T) else ATTUNE_WGMMA_SS_CASE(88, T) else ATTUNE_WGMMA_SS_CASE(96, T) else ATTUNE_WGMMA_SS_CASE(104, T) else ATTUNE_WGMMA_SS_CASE(112, T) else ATTUNE_WGMMA_SS_CASE(120,                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     \
                                                                                                                                                                                                                                                                                                             T) else ATTUNE_WGMMA_SS_CASE(128, T) else ATTUNE_WGMMA_SS_CASE(136, T) else ATTUNE_WGMMA_SS_CASE(144,                                                                                                                                                                                                                                                                                                                                                                                                                                                                    \
                                                                                                                                                                                                                                                                                                                                                                                                              T) else ATTUNE_WGMMA_SS_CASE(152,                                                                                                                                                                                                                                                                                                                                                                                                                                       \
                                                                                                                                                                                                                                                                                                                                                                                                                                           T) else ATTUNE_WGMMA_SS_CASE(160, T) else ATTUNE_WGMMA_SS_CASE(168, T) else ATTUNE_WGMMA_SS_CASE(176, T) else ATTUNE_WGMMA_SS_CASE(184, T) else ATTUNE_WGMMA_SS_CASE(192,                                                                                                                                                                                                                                                                  \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                T) else ATTUNE_WGMMA_SS_CASE(200,                                                                                                                                                                                                                                     \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                             T) else ATTUNE_WGMMA_SS_CASE(208, T) else ATTUNE_WGMMA_SS_CASE(216, T) else ATTUNE_WGMMA_SS_CASE(224, T) else ATTUNE_WGMMA_SS_CASE(232, T) else ATTUNE_WGMMA_SS_CASE(240, T) else ATTUNE_WGMMA_SS_CASE(248,                              \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                    T) else ATTUNE_WGMMA_SS_CASE(256, \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 T)
#define ATTUNE_WGMMA_RS_ALL(T)                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        \
  ATTUNE_WGMMA_RS_CASE(8, T)                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                          \
  else ATTUNE_WGMMA_RS_CASE(16, T) else ATTUNE_WGMMA_RS_CASE(24, T) else ATTUNE_WGMMA_RS_CASE(32, T) else ATTUNE_WGMMA_RS_CASE(40, T) else ATTUNE_WGMMA_RS_CASE(                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                      \
      48, T) else ATTUNE_WGMMA_RS_CASE(56, T) else ATTUNE_WGMMA_RS_CASE(64, T) else ATTUNE_WGMMA_RS_CASE(72,                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                          \
                                                                                                         T) else ATTUNE_WGMMA_RS_CASE(80, T) else ATTUNE_WGMMA_RS_CASE(88, T) else ATTUNE_WGMMA_RS_CASE(96, T) else ATTUNE_WGMMA_RS_CASE(104, T) else ATTUNE_WGMMA_RS_CASE(112, T) else ATTUNE_WGMMA_RS_CASE(120,                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     \
                                                                                                                                                                                                                                                                                                             T) else ATTUNE_WGMMA_RS_CASE(128, T) else ATTUNE_WGMMA_RS_CASE(136, T) else ATTUNE_WGMMA_RS_CASE(144,                                                                                                                                                                                                                                                                                                                                                                                                                                                                    \
                                                                                                                                                                                                                                                                                                                                                                                                              T) else ATTUNE_WGMMA_RS_CASE(152,                                                                                                                                                                                                                                                                                                                                                                                                                                       \
                                                                                                                                                                                                                                                                                                                                                                                                                                           T) else ATTUNE_WGMMA_RS_CASE(160, T) else ATTUNE_WGMMA_RS_CASE(168, T) else ATTUNE_WGMMA_RS_CASE(176, T) else ATTUNE_WGMMA_RS_CASE(184, T) else ATTUNE_WGMMA_RS_CASE(192,                                                                                                                                                                                                                                                                  \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                T) else ATTUNE_WGMMA_RS_CASE(200,                                                                                                                                                                                                                                     \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                             T) else ATTUNE_WGMMA_RS_CASE(208, T) else ATTUNE_WGMMA_RS_CASE(216, T) else ATTUNE_WGMMA_RS_CASE(224, T) else ATTUNE_WGMMA_RS_CASE(232, T) else ATTUNE_WGMMA_RS_CASE(240, T) else ATTUNE_WGMMA_RS_CASE(248,                              \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                    T) else ATTUNE_WGMMA_RS_CASE(256, \
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 T)

#define ATTUNE_WGMMA_SS_CASE(N, T)                                                         \
  if constexpr (kN == N) {                                                                 \
    asm volatile("{\n.reg .pred p;\n" ATTUNE_WGMMA_SS_SETP_##N                             \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T                 \
                 " {" ATTUNE_WGMMA_REGS_##N ATTUNE_WGMMA_SS_TAIL_##N "}\n"                 \
                 : ATTUNE_WGMMA_OUT_##N                                                    \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(kTransA), "n"(kTransB)); \
  }
#define ATTUNE_WGMMA_RS_CASE(N, T)                                                                          \
  if constexpr (kN == N) {                                                                                  \
    asm volatile("{\n.reg .pred p;\n" ATTUNE_WGMMA_RS_SETP_##N                                              \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T                                  \
                 " {" ATTUNE_WGMMA_REGS_##N ATTUNE_WGMMA_RS_TAIL_##N "}\n"                                  \
                 : ATTUNE_WGMMA_OUT_##N                                                                     \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(kTransB)); \
  }

#if defined(ATTUNE_WAIT_BOUND_MS)
// Where a bounded wait reports (host-mapped memory; null: trap without a report).
extern "C" __device__ attune::WaitReport* attune_wait_report;
__device__ attune::WaitReport* attune_wait_report = nullptr;
// Which thread reports: claimed in device memory (an atomic on host-mapped
// memory needs PCIe atomics, which a machine may not have).
__device__ attune::u32 attune_wait_claimed = 0;
#endif

namespace attune::dev {

namespace warpgroup {
// The warpgroup of this thread, made warp-uniform (a shuffle from lane 0) so
// the compiler knows role branches do not diverge within a warp.
ATTUNE_DEVICE i32 index() { return __shfl_sync(0xFFFFFFFFu, linear_thread() / sm90::kWarpgroupSize, 0); }
ATTUNE_DEVICE i32 thread() { return linear_thread() % sm90::kWarpgroupSize; }
}  // namespace warpgroup

namespace wgmma {

ATTUNE_DEVICE void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
ATTUNE_DEVICE void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups of this warpgroup are in flight.
template <i32 N>
ATTUNE_DEVICE void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving reads or writes of these registers across
// this point (accumulators of an in-flight wgmma are not to be touched).
template <i32 R>
ATTUNE_DEVICE void fence_operands(float (&r)[R]) {
  ATTUNE_UNROLL
  for (i32 i = 0; i < R; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <i32 R>
ATTUNE_DEVICE void fence_operands(u32 (&r)[R]) {
  ATTUNE_UNROLL
  for (i32 i = 0; i < R; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

ATTUNE_DEVICE u64 descriptor(const void* smem, u32 leading_bytes, u32 stride_bytes, sm90::Swizzle swizzle) {
  sm90::MatrixDescriptor d;
  d.start = shared_address(smem);
  d.leading_bytes = leading_bytes;
  d.stride_bytes = stride_bytes;
  d.swizzle = swizzle;
  return sm90::encode_descriptor(d);
}

template <class D>
inline constexpr bool kIsBf16 = false;
template <>
inline constexpr bool kIsBf16<Bf16> = true;

// D[64 x N] (+)= A[64 x 16] * B[16 x N]; A and B from shared memory. With
// accumulate == 0 the accumulators are overwritten.
template <class D, i32 kN, i32 kTransA, i32 kTransB>
ATTUNE_DEVICE void mma_ss(float (&d)[kN / 2], u64 desc_a, u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (kIsBf16<D>) {
    ATTUNE_WGMMA_SS_ALL("bf16")
  } else {
    ATTUNE_WGMMA_SS_ALL("f16")
  }
}

// The same with A from registers (sm90::a_fragment_row/col).
template <class D, i32 kN, i32 kTransB>
ATTUNE_DEVICE void mma_rs(float (&d)[kN / 2], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  static_assert(kN >= 8 && kN <= 256 && kN % 8 == 0, "wgmma: N is 8..256 in steps of 8");
  if constexpr (kIsBf16<D>) {
    ATTUNE_WGMMA_RS_ALL("bf16")
  } else {
    ATTUNE_WGMMA_RS_ALL("f16")
  }
}

// The same two with the accumulators as the tile code holds a warp's rows:
// mma.sync's C fragment of 16 rows by kN columns, [1][kN/8][4], which is
// the layout of one warp's share of the wgmma accumulator.
template <class D, i32 kN, i32 kTransA, i32 kTransB>
ATTUNE_DEVICE void mma_ss(float (&d)[1][kN / 8][4], u64 desc_a, u64 desc_b, i32 accumulate) {
  mma_ss<D, kN, kTransA, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), desc_a, desc_b, accumulate);
}
template <class D, i32 kN, i32 kTransB>
ATTUNE_DEVICE void mma_rs(float (&d)[1][kN / 8][4], const u32 (&a)[4], u64 desc_b, i32 accumulate) {
  mma_rs<D, kN, kTransB>(reinterpret_cast<float(&)[kN / 2]>(d), a, desc_b, accumulate);
}

}  // namespace wgmma

namespace registers {
// setmaxnreg: R is a multiple of 8 in 24..256. Takes effect only in a kernel
// with a register cap at entry (ptxas warns C7508 otherwise).
template <i32 R>
ATTUNE_DEVICE void increase() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <i32 R>
ATTUNE_DEVICE void decrease() {
  static_assert(R % 8 == 0 && R >= 24 && R <= 256, "setmaxnreg: a multiple of 8 in 24..256");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
}  // namespace registers

namespace mbarrier {
ATTUNE_DEVICE void init(u64* bar, i32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA).
ATTUNE_DEVICE void fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
ATTUNE_DEVICE void arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// Arrives and adds `bytes` to the transactions the current phase waits for.
ATTUNE_DEVICE void arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
ATTUNE_DEVICE void expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// True once the phase of this parity has completed.
ATTUNE_DEVICE bool try_wait(u64* bar, u32 parity) {
  u32 done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(shared_address(bar)), "r"(parity)
               : "memory");
  return done != 0;
}
#if defined(ATTUNE_WAIT_BOUND_MS)
ATTUNE_DEVICE u64 global_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}
// Whether the phase of this parity has completed, without waiting.
ATTUNE_DEVICE bool test_wait(u64* bar, u32 parity) {
  u32 done;
  asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(done)
               : "r"(shared_address(bar)), "r"(parity)
               : "memory");
  return done != 0;
}
// The first thread to give up fills the report and traps; the others go on
// waiting (a trap ends the whole grid, so one of theirs could cut the
// report's stores short). Without a slot every thread traps at once.
__device__ __noinline__ void give_up(u64* bar, u32 parity, u64 waited_ns) {
  WaitReport* r = attune_wait_report;
  if (r != nullptr) {
    if (atomicCAS(&attune_wait_claimed, 0U, 1U) != 0U) return;
    volatile WaitReport* v = r;
    v->claimed = 1;
    v->block[0] = blockIdx.x;
    v->block[1] = blockIdx.y;
    v->block[2] = blockIdx.z;
    v->thread = static_cast<u32>(linear_thread());
    v->barrier = shared_address(bar);
    v->parity = parity;
    // Which parities have completed now: bit 0 parity 0, bit 1 parity 1.
    v->state = (test_wait(bar, 0) ? 1ULL : 0ULL) | (test_wait(bar, 1) ? 2ULL : 0ULL);
    v->waited_ns = waited_ns;
    v->bound_ms = ATTUNE_WAIT_BOUND_MS;
    __threadfence_system();
    v->magic = kWaitReportMagic;
    __threadfence_system();
    // Read back over the bus before the trap (a spin here makes ptxas fail
    // the 240-register consumer regions of some variants: C7600).
    const u32 landed = v->magic;
    asm volatile("" ::"r"(landed) : "memory");
  }
  asm volatile("trap;\n" ::: "memory");
}
#endif
ATTUNE_DEVICE void wait(u64* bar, u32 parity) {
#if defined(ATTUNE_WAIT_BOUND_MS)
  if (try_wait(bar, parity)) return;
  const u64 start = global_ns();
  while (!try_wait(bar, parity)) {
    const u64 waited = global_ns() - start;
    if (waited > static_cast<u64>(ATTUNE_WAIT_BOUND_MS) * 1000000ULL) give_up(bar, parity, waited);
  }
#else
  while (!try_wait(bar, parity)) {
  }
#endif
}
ATTUNE_DEVICE void invalidate(u64* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
}  // namespace mbarrier

// Orders this thread's ordinary shared-memory accesses before later accesses
// of the async proxy (wgmma operands, TMA stores) and the other way round.
ATTUNE_DEVICE void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

namespace named_barrier {
// bar.sync / bar.arrive on barrier `id` (1..15; 0 is block::sync) for
// `threads` threads (a multiple of 32).
ATTUNE_DEVICE void sync(i32 id, i32 threads) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory"); }
ATTUNE_DEVICE void arrive(i32 id, i32 threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
}  // namespace named_barrier

// One lane of the (fully active) warp is elected: true there only.
ATTUNE_DEVICE bool elect_one() {
  u32 elected;
  asm volatile("{\n.reg .b32 lane;\n.reg .pred p;\nelect.sync lane|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(elected));
  return elected != 0;
}

namespace tma {

ATTUNE_DEVICE u64 map_address(const TensorMap* map) { return reinterpret_cast<u64>(map); }

// A box of the tensor map at coordinates c (innermost first) into shared
// memory, completing `bytes of the box` transactions on bar.
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6}], [%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
ATTUNE_DEVICE void load(void* smem, const TensorMap* map, u64* bar, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
      "%6, %7}], [%2];\n" ::"r"(shared_address(smem)),
      "l"(map_address(map)), "r"(shared_address(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// A box of shared memory to the tensor at coordinates c; joins this thread's
// open bulk group (commit, then wait_read before reusing the shared bytes).
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1)
      : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map_address(map)),
      "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   map_address(map)),
               "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
ATTUNE_DEVICE void store(const TensorMap* map, const void* smem, i32 c0, i32 c1, i32 c2, i32 c3, i32 c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(
                   map_address(map)),
               "r"(shared_address(smem)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
ATTUNE_DEVICE void commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N bulk groups still read their shared-memory source.
template <i32 N>
ATTUNE_DEVICE void wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
ATTUNE_DEVICE void prefetch(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map_address(map)) : "memory");
}

}  // namespace tma

}  // namespace attune::dev
