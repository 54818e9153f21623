// The hooks the emulated primitives call (templates/primitives/
// hopper_emulated.h): each forwards to the running launch's machine, whose
// units hold the rules; only the scalar math without machine state is here.
#include <cmath>

#include "emulator/machine.h"

namespace attune::emu {

constinit thread_local Emulator::Impl* g_emulator = nullptr;

void throw_outside_launch() { throw Error("a device primitive was called outside an emulator launch"); }

namespace hooks {

namespace {
Emulator::Impl& emulator() { return running_emulator(); }
}  // namespace

Dim3 thread_index() { return emulator().current->index; }
Dim3 block_index() { return emulator().current->block; }
Dim3 block_dim() { return emulator().config.block; }
Dim3 grid_dim() { return emulator().config.grid; }
unsigned char* shared_base() {
  Emulator::Impl& e = emulator();
  return e.shared.data() + e.cta_base(e.current->rank);
}
i32 cluster_rank() { return emulator().current->rank; }
i32 cluster_size() { return emulator().cluster_ctas; }
void cluster_sync(const Where& where) { emulator().cluster_sync(where); }
void mbarrier_arrive_cluster(u64* bar, i32 cta, const Where& where) {
  emulator().mbarrier_arrive_cluster(bar, cta, where);
}
void tma_load_multicast(void* smem, const TensorMap* map, u64* bar, u32 cta_mask, const i32* coords, i32 rank,
                        const Where& where) {
  emulator().tma_load_multicast(smem, map, bar, cta_mask, coords, rank, where);
}

bool global_access(const void* p, u64 bytes, bool write, const Where& where) {
  return emulator().global_access(p, bytes, write, where);
}

bool shared_access(const void* p, u64 bytes, bool write, const Where& where) {
  Emulator::Impl& e = emulator();
  return e.check_shared(*e.current, p, bytes, write, where);
}

void barrier(const Where& where) {
  Emulator::Impl& e = emulator();
  e.wait_here(*e.current, State::kAtBarrier, where);
}

u32 shfl(u32 value, i32 operand, bool xor_mode, const Where& where) {
  return emulator().warp_shuffle(value, operand, xor_mode, where);
}

void mma_m16n8k16(bool bf16, float* d, const u32* a, const u32* b, const float* c, const Where& where) {
  emulator().warp_mma(bf16, d, a, b, c, where);
}

void ldmatrix(i32 matrices, bool trans, u32* r, const void* row, const Where& where) {
  emulator().warp_ldmatrix(matrices, trans, r, row, where);
}

void stmatrix(i32 matrices, bool trans, const u32* r, void* row, const Where& where) {
  emulator().warp_stmatrix(matrices, trans, r, row, where);
}

void cp_async(void* shared_dst, const void* global_src, i32 src_bytes, const Where& where) {
  emulator().cp_async(shared_dst, global_src, src_bytes, where);
}

void cp_async_commit(const Where& /*where*/) { emulator().cp_async_commit(); }

void cp_async_wait(i32 pending, const Where& where) { emulator().cp_async_wait(pending, where); }

void atomic_add(float* p, float value, const Where& where) { emulator().atomic_add(p, value, false, where); }

void ordered_atomic_add(float* p, float value, const Where& where) { emulator().atomic_add(p, value, true, where); }

void semaphore_wait(const i32* p, i32 target, const Where& where) { emulator().semaphore_wait(p, target, where); }

void semaphore_release(i32* p, i32 value, const Where& where) { emulator().semaphore_release(p, value, where); }

i32 atomic_fetch_add(i32* p, i32 value, const Where& where) { return emulator().atomic_fetch_add(p, value, where); }

void wgmma_fence(const Where& /*where*/) { emulator().wgmma_fence(); }

void wgmma_commit(const Where& /*where*/) { emulator().wgmma_commit(); }

void wgmma_wait(i32 pending, const Where& where) { emulator().wgmma_wait(pending, where); }

void wgmma(bool bf16, i32 n, bool trans_a, bool trans_b, u64 desc_a, u64 desc_b, u32* a_registers, float* d,
           i32 accumulate, const Where& where) {
  emulator().wgmma(WgmmaShape{bf16, 0, n, trans_a, trans_b, a_registers != nullptr, desc_a, desc_b}, a_registers, d,
                   accumulate, where);
}

void wgmma_fp8(i32 format, i32 n, u64 desc_a, u64 desc_b, u32* a_registers, float* d, i32 accumulate,
               const Where& where) {
  emulator().wgmma(WgmmaShape{false, format, n, false, false, a_registers != nullptr, desc_a, desc_b}, a_registers, d,
                   accumulate, where);
}

void fence_proxy_async(const Where& /*where*/) { emulator().fence_proxy_async(); }

void in_flight_value_stored(const Where& where) { emulator().in_flight_value_stored(where); }

void setmaxnreg(bool increase, i32 registers, const Where& where) { emulator().setmaxnreg(increase, registers, where); }

void mbarrier_init(u64* bar, i32 count, const Where& where) { emulator().mbarrier_init(bar, count, where); }

void mbarrier_arrive(u64* bar, u32 tx_bytes, const Where& where) { emulator().mbarrier_arrive(bar, tx_bytes, where); }

void mbarrier_expect_tx(u64* bar, u32 tx_bytes, const Where& where) {
  emulator().mbarrier_expect_tx(bar, tx_bytes, where);
}

void mbarrier_wait(u64* bar, u32 parity, const Where& where) { emulator().mbarrier_wait(bar, parity, where); }

void mbarrier_invalidate(u64* bar, const Where& where) { emulator().mbarrier_invalidate(bar, where); }

void named_barrier(i32 id, i32 threads, bool sync, const Where& where) {
  Emulator::Impl& e = emulator();
  e.named_barrier(*e.current, id, threads, sync, where);
}

bool elect_one(const Where& where) { return emulator().warp_elect(where); }

void tma_load(void* smem, const TensorMap* map, u64* bar, const i32* coords, i32 rank, const Where& where) {
  emulator().tma_load(smem, map, bar, coords, rank, where);
}

void tma_store(const TensorMap* map, const void* smem, const i32* coords, i32 rank, const Where& where) {
  emulator().tma_store(map, smem, coords, rank, where);
}

void tma_commit(const Where& /*where*/) { emulator().tma_commit(); }

void tma_wait_read(i32 pending, const Where& /*where*/) { emulator().tma_wait_read(pending); }

void tma_wait(i32 pending, const Where& /*where*/) { emulator().tma_wait(pending); }

void tma_reduce_add(const TensorMap* map, const void* smem, const i32* coords, i32 rank, bool ordered,
                    const Where& where) {
  emulator().tma_store(map, smem, coords, rank, where, ordered ? BulkWrite::kOrderedAdd : BulkWrite::kAdd);
}

void tma_prefetch(const TensorMap* map, const Where& where) { emulator().tma_prefetch(map, where); }

float half_to_float(u16 bits) { return half_bits_to_float(bits); }
u16 float_to_half(float value) { return float_to_half_bits(value); }
u16 float_to_bfloat16(float value) { return float_to_bfloat16_bits(value); }

float exp2_approx(float value) {
  if (g_emulator != nullptr) ++g_emulator->counters.ex2;
  // ex2.approx.ftz: subnormal inputs and results flush to zero.
  if (std::fpclassify(value) == FP_SUBNORMAL) value = 0.0F;
  const float result = std::exp2(value);
  return std::fpclassify(result) == FP_SUBNORMAL ? 0.0F : result;
}

float tanh_approx(float value) {
  if (g_emulator != nullptr) ++g_emulator->counters.tanh;
  // tanh.approx.f32 (sm_75+): about 11 bits; the emulator gives the exact
  // value, which the accuracy rule's bound covers.
  return std::tanh(value);
}

float log2_approx(float value) {
  // lg2.approx.ftz: a subnormal input counts as zero (result -inf).
  if (std::fpclassify(value) == FP_SUBNORMAL) value = 0.0F;
  return std::log2(value);
}

}  // namespace hooks

}  // namespace attune::emu
