// Backward attention for Hopper (sm_90a), FlashAttention-3 style: the
// operator contract of flash_bwd, on TMA, mbarriers, wgmma and setmaxnreg,
// with flash_bwd's preprocess (D = rowsum(dO * O), the dQ accumulator
// cleared) and dQ convert (scale, storage dtype) around it.
//
// A block (CTA) owns kBlockN keys of one (batch, KV head) and loops over the
// query tiles of kBlockM rows, of every query head of the group, that may see
// them (the steps). Warpgroup 0 is the producer: its first warp loads K and V
// once by TMA (and zeroes their rows past the sequence), then fills a ring of
// kStages stages with each step's Q and dO tiles (TMA) and its LSE in base 2
// and D rows (plain loads). Warpgroups 1 .. kBlockN/64 are consumers of 64
// keys each, by default with the keys as wgmma's M (S's operands swapped,
// kSdpSwapped):
//   S^T = K Q^T, dP^T = V dO^T     wgmma, both operands in shared memory
//                                  (unswapped: S = Q K^T, dP = dO V^T)
//   P^T = 2^(S^T scale_log2 - LSE_log2), 0 where masked
//   dS^T = P^T (dP^T - D)
//   dV += P^T dO, dK += dS^T Q     wgmma with A from registers: an m64 fp32
//                                  accumulator is, converted in place, the
//                                  A fragment of the next GEMM (or, with
//                                  kPdsRegisters = 0, from shared memory)
//   dQ = dS K                      wgmma from shared memory: dS^T stored as
//                                  [key][query] (kBlockM / 64 boxes of
//                                  128-byte rows) is dS read MN-major; a box
//                                  of 64 head-dim columns and 64 queries at a
//                                  time, added to the fp32 accumulator (TMA
//                                  bulk reductions or red.global); in
//                                  deterministic mode (kDqAtomic = 0) the
//                                  consumers of every key block take turns
//                                  at a query tile's rows, last key block
//                                  first, through a counter per tile
//                                  (dq_turns); the CTAs start in that order
// dK and dV live in registers over the loop and leave at the end (dK
// scaled); the convert kernel scales dQ. Registers move from the producer to
// the consumers with setmaxnreg.
//
// Score modifiers (features kSoftcap, kAlibi) enter where P^T is
// recomputed, as in flash_bwd: the forward's logit (softcapped, then the
// ALiBi bias of the step's query head), and dS^T *= 1 - t^2 for the
// softcap's tanh t. Sinks change only dsink (flash_bwd_dsink): the saved
// LSE already holds the sink's term.
//
// Rows past the sequence read LSE_log2 = +inf and D = 0: their
// probabilities, and so their dS, are exactly 0. Keys past the sequence
// inside the tensor (packed or padded keys) are masked; K's and V's rows
// there are zeroed, since dQ = dS K would carry 0 * NaN and dS^T = P^T (dP^T
// - D) a NaN of V: a masked element's dS^T is then 0 * finite, with no
// select.
#pragma once

#include "templates/flash_bwd_params.h"
#include "templates/primitives/hopper.h"
#include "templates/sm90_pipeline.cuh"
#include "templates/sm90_scheduler.cuh"
#include "templates/sm90_smem.h"
#include "templates/tunable.cuh"

namespace attune {

struct FlashBwdSm90Params {
  TensorMap q_map;   // (Dk, rows, Hq, B): box {64, kBlockM}
  TensorMap k_map;   // (Dk, keys, Hkv, B): box {64, kBlockN}
  TensorMap v_map;   // (Dv, keys, Hkv, B): box {64, kBlockN}
  TensorMap do_map;  // (Dv, rows, Hq, B): box {64, kBlockM}
  TensorMap dq_map;  // kDqTma: the fp32 dQ accumulator (Dk, b, c, a, Hq) for row 8 a + 4 b + c: box {32, 2, 4, 8, 1}
  // Pointers, strides, sizes, mask, scale and the workspaces as the
  // preprocess and convert kernels take them (LSE, D, dQ's accumulator,
  // dK and dV read them).
  FlashBwdParams bwd;
  // Read by the emulator's one instantiation per (head dim, key block,
  // dtype); variants compiled by NVRTC use constants.
  i32 stages ATTUNE_TUNABLE_OF(flash_bwd_sm90, kStages);
  i32 dq_atomic ATTUNE_TUNABLE_OF(flash_bwd_sm90, kDqAtomic);
  i32 dq_tma ATTUNE_TUNABLE_OF(flash_bwd_sm90, kDqTma);
  i32 pds_registers ATTUNE_TUNABLE_OF(flash_bwd_sm90, kPdsRegisters);
  i32 sdp_swapped ATTUNE_TUNABLE_OF(flash_bwd_sm90, kSdpSwapped);
  // The CTAs' order (one key block of one (batch, KV head) each): L2
  // sections of (batch, KV head) pairs whose Q and dO fit in L2 together,
  // in each the key blocks by work, over the section's pairs (`m_blocks`
  // counts key blocks here).
  sm90_sched::TileOrder tiles;
  // kSoftcap: scale / c and c log2(e) (block_score_mods' factors), from the
  // host: read from the params where they are used, not held in registers.
  float softcap_in;
  float softcap_out;
};

struct FlashBwdSm90Tunables {
  static constexpr int kHeadDim[] = {64, 128};  // Dk and Dv padded up to it (whole 64-column boxes)
  // Query rows per step: a key's row of dS^T is kBlockM / 64 boxes of 128
  // bytes. 128 where the accumulators fit (valid: kBlockM + head dim <= 192).
  static constexpr int kBlockM[] = {64, 128};
  static constexpr int kBlockN[] = {64, 128};  // keys per CTA: 64 per consumer warpgroup
  static constexpr int kStages[] = {2, 3};     // Q / dO ring depth
  // 1: dQ by fp32 atomics in any order; 0: in block order, by turns (deterministic)
  static constexpr int kDqAtomic[] = {0, 1};
  // 1: dQ staged in shared memory and added by TMA bulk reductions (one
  // thread issues them); 0: every thread adds its elements with red.global
  static constexpr int kDqTma[] = {0, 1};
  // 1: dV's and dK's GEMMs take P^T and dS^T from registers (wgmma's A is
  // the converted accumulator: FlashAttention-3's Mma_dKV_is_RS); 0: from
  // shared memory, where dS^T is stored for dQ anyway and P^T gets a buffer
  // (the fragments' registers are free once stored; the GEMMs read 2 x 8 KiB
  // more shared memory a step and consumer)
  static constexpr int kPdsRegisters[] = {0, 1};
  // Which way S and dP are computed (FlashAttention-3's SdP_swapAB).
  // 1: swapped, S^T = K Q^T and dP^T = V dO^T, the keys as wgmma's M: P^T
  // and dS^T are the accumulators, so they may stay in registers
  // (kPdsRegisters) for dV and dK; a thread holds 16 queries' LSE and D.
  // 0: S = Q K^T and dP = dO V^T, the queries as M: a thread holds two
  // rows' LSE and D; P and dS reach dV's and dK's GEMMs transposed through
  // shared memory (stmatrix .trans), so kPdsRegisters = 0. (dQ is never
  // swapped: at 64 query rows dQ^T = K^T dS^T runs the same wgmma work with
  // a transposed store; dK and dV neither: dV^T = dO^T P splits the head
  // dim into m64 pieces, more and smaller wgmma for the same work.)
  static constexpr int kSdpSwapped[] = {0, 1};
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "st", "at", "tr", "rs", "sw"};
  static constexpr const char* kArchs[] = {"sm_90a"};  // wgmma and setmaxnreg exist on sm_90a only
  static constexpr const char* kEmulatedAtRunTime[] = {"kStages", "kDqAtomic", "kDqTma", "kPdsRegisters",
                                                       "kSdpSwapped"};
  static constexpr int kDqStageBytes = 64 * 64 * 4;  // kDqTma: a consumer's dQ box, [64 queries][64 columns] fp32

  static constexpr int kSharedAlign = 1024;  // the barriers, then every buffer on a 128-byte-swizzle atom
  static constexpr int kMaxSharedBytes = 227 * 1024;
  // Registers per thread after setmaxnreg, as the forward splits them with
  // two consumers; one consumer moves none.
  static constexpr int kConsumerRegisters = 240;
  static constexpr int kProducerRegisters = 24;
  // A consumer thread's fp32 accumulators over a step: S^T and dP^T (a
  // warp's 16 keys by kBlockM queries: kBlockM / 2 registers each), dK and
  // dV (16 keys by the head dim: head_dim / 2 each). At most 192 of the
  // 240, the rest for fragments, addresses and the softmax (d128 at 64
  // rows runs at 231; 128 rows at d128 would need 256 for accumulators).
  static constexpr int kAccumulatorColumns = 192;

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int /*block_m*/, int block_n, int /*stages*/,
                                                  int /*dq_atomic*/, int /*dq_tma*/, int /*pds_registers*/,
                                                  int /*sdp_swapped*/) {
    return 128 * (1 + block_n / 64);
  }
  // dQ's split between consumers. With 64 head-dim columns or more each,
  // consumer c computes its share of the columns over all the block's keys
  // (FlashAttention-3's split: each element of dQ is added once per block,
  // half the reduction traffic of a split by keys, one box a step at d128);
  // otherwise (d64 over two consumers) all the columns over its own 64 keys.
  ATTUNE_HOST_DEVICE static constexpr bool dq_by_columns(int head_dim, int block_n) {
    return head_dim / (block_n / 64) >= 64;
  }
  // dS^T buffers: two (by step parity) where consumers read each other's
  // rows (dQ by columns, two consumers), so a consumer writes a step's dS^T
  // while the other may still read the last step's.
  ATTUNE_HOST_DEVICE static constexpr int ds_buffers(int head_dim, int block_n) {
    return block_n / 64 > 1 && dq_by_columns(head_dim, block_n) ? 2 : 1;
  }
  // Buffers of a step's [keys][queries] 16-bit tiles: dS^T's (ds_buffers)
  // and, with P^T from shared memory, P^T's (one: only its own consumer's
  // dV GEMM reads it, waited for before the next step's stores).
  ATTUNE_HOST_DEVICE static constexpr int key_query_buffers(int head_dim, int block_n, int pds_registers) {
    return ds_buffers(head_dim, block_n) + (pds_registers != 0 ? 0 : 1);
  }
  // Barriers; K and V; the Q and dO stages; dS^T (and P^T); the LSE and D
  // stages; with kDqTma, each consumer's dQ box (on a swizzle atom).
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes_before_dq(int head_dim, int block_m, int block_n, int stages,
                                                                 int pds_registers) {
    return kSharedAlign + 2 * (2 * block_n * head_dim) + stages * 2 * (2 * block_m * head_dim) +
           key_query_buffers(head_dim, block_n, pds_registers) * 2 * block_n * block_m + stages * 2 * 4 * block_m;
  }
  ATTUNE_HOST_DEVICE static constexpr int dq_stage_offset(int head_dim, int block_m, int block_n, int stages,
                                                          int pds_registers) {
    return (shared_bytes_before_dq(head_dim, block_m, block_n, stages, pds_registers) + 1023) / 1024 * 1024;
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int stages,
                                                       int /*dq_atomic*/, int dq_tma, int pds_registers,
                                                       int /*sdp_swapped*/) {
    return dq_tma != 0
               ? dq_stage_offset(head_dim, block_m, block_n, stages, pds_registers) + block_n / 64 * kDqStageBytes
               : shared_bytes_before_dq(head_dim, block_m, block_n, stages, pds_registers);
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int stages, int dq_atomic,
                                                 int dq_tma, int pds_registers, int sdp_swapped) {
    return head_dim % 64 == 0 && (block_m == 64 || block_m == 128) && block_m + head_dim <= kAccumulatorColumns &&
           (block_m == 64 || sdp_swapped == 1) && block_n % 64 == 0 && block_n / 64 >= 1 && block_n / 64 <= 2 &&
           stages >= 2 && stages <= 3 && (dq_atomic == 0 || dq_atomic == 1) && (dq_tma == 0 || dq_tma == 1) &&
           (pds_registers == 0 || pds_registers == 1) && (sdp_swapped == 0 || sdp_swapped == 1) &&
           (sdp_swapped == 1 || pds_registers == 0) &&  // P and dS as S's accumulators are not P^T's A fragments
           shared_bytes(head_dim, block_m, block_n, stages, dq_atomic, dq_tma, pds_registers, sdp_swapped) <=
               kMaxSharedBytes;
  }
};

namespace bwd_sm90_detail {

using namespace sm90_smem;  // kBoxCols, kRowBytes, kSwizzle, kAtomStride

// The shared-memory layout of a variant (byte offsets; 16-bit buffers are
// sequences of D/64 boxes of [rows x 128 bytes], each on a swizzle atom).
struct Layout {
  i32 head_dim;
  i32 block_m;
  i32 block_n;
  i32 stages;
  i32 pds_registers;
  ATTUNE_DEVICE i32 kv_bytes() const { return 2 * block_n * head_dim; }  // K or V
  ATTUNE_DEVICE i32 q_bytes() const { return 2 * block_m * head_dim; }   // one stage of Q or of dO
  ATTUNE_DEVICE i32 k_offset() const { return FlashBwdSm90Tunables::kSharedAlign; }
  ATTUNE_DEVICE i32 v_offset() const { return k_offset() + kv_bytes(); }
  ATTUNE_DEVICE i32 q_offset(i32 stage) const { return v_offset() + kv_bytes() + stage * 2 * q_bytes(); }
  ATTUNE_DEVICE i32 do_offset(i32 stage) const { return q_offset(stage) + q_bytes(); }
  ATTUNE_DEVICE i32 ds_bytes() const { return 2 * block_n * block_m; }
  // dS^T buffer `buffer` (of ds_buffers): [key][query], 128-byte rows.
  ATTUNE_DEVICE i32 ds_offset(i32 buffer) const { return q_offset(stages) + buffer * ds_bytes(); }
  // !pds_registers: P^T's buffer, laid out as dS^T's.
  ATTUNE_DEVICE i32 p_offset() const { return ds_offset(FlashBwdSm90Tunables::ds_buffers(head_dim, block_n)); }
  // A stage's LSE (base 2) and D, interleaved by row (RowStatsPair): a
  // consumer thread's two columns in one 16-byte load.
  ATTUNE_DEVICE i32 row_stats_offset(i32 stage) const {
    return ds_offset(FlashBwdSm90Tunables::key_query_buffers(head_dim, block_n, pds_registers)) + stage * 8 * block_m;
  }
  // kDqTma: consumer c's dQ box, two [64 queries][32 columns] fp32 halves
  // with 128-byte rows, swizzled as the accumulator's map reads them.
  ATTUNE_DEVICE i32 dq_offset(i32 consumer) const {
    return FlashBwdSm90Tunables::dq_stage_offset(head_dim, block_m, block_n, stages, pds_registers) +
           consumer * FlashBwdSm90Tunables::kDqStageBytes;
  }
};

// Rows 2 i and 2 i + 1 of a stage's LSE (base 2) and D.
struct alignas(16) RowStatsPair {
  float lse0;
  float d0;
  float lse1;
  float d1;
};

// Deterministic dQ: a step's turn, as the producer publishes it with the
// stage (the consumers' loop then carries one shared load, not the count
// and the counter's address).
struct alignas(8) StepTurn {
  i32 before;   // turns_before: key blocks whose turn at the tile comes first
  i32 counter;  // the tile's turn counter, from the key block's first head's first tile
};

// A consumer thread's place in its dQ stage box: the byte offset of its
// first row and the XOR of its chunks under the swizzle.
struct DqLane {
  u32 offset;
  u32 chunk_xor;
};

// The block's mbarriers, at the start of shared memory (kSharedAlign bytes).
struct Barriers {
  u64 full[3];  // the Q / dO ring's (up to three stages)
  u64 empty[3];
  u64 kv_landed;      // K's and V's bytes (the producer warp's own wait)
  u64 kv_full;        // K and V ready for the consumers (their rows past the sequence zeroed)
  u64 kv_empty;       // K and V read by every consumer warp: the next tile's may load
  StepTurn turns[3];  // deterministic dQ: each ring stage's step's turn, from the producer
};

// How far a CTA is through its tiles, as both roles count it: the ring's
// steps so far and the parity of the K/V tiles loaded so far (the phase of
// kv_landed and kv_full to wait for next; kv_empty's last completed one is
// its opposite). One register: the producer has 24.
class TileProgress {
 public:
  ATTUNE_DEVICE i32 ring_steps() const { return static_cast<i32>(packed_ >> 1); }
  ATTUNE_DEVICE u32 kv_parity() const { return packed_ & 1U; }
  // A tile of `steps` > 0 done (its K and V loaded once).
  ATTUNE_DEVICE void add(i32 steps) { packed_ = ((packed_ >> 1) + static_cast<u32>(steps)) << 1 | (kv_parity() ^ 1U); }

 private:
  u32 packed_ = 0;
};

// What a CTA knows of its tile's keys: their sequence and first key, and the
// steps (every query tile that may see them, for each query head of the
// group). Each role computes it after setmaxnreg, from an opaque tile index:
// values from before the register move would be held across it (and spill).
template <int kBlockM, int kBlockN>
struct KeyBlock {
  bwd_detail::BwdSequence seq;
  i64 key0;
  TileRange tiles;
  i32 tile_count;  // query tiles per head (positive when steps are)
  i32 steps;
  i32 n_block;
  i32 kv_head;
  i32 batch;

  ATTUNE_DEVICE static KeyBlock of(const FlashBwdParams& b, i32 n_block, i32 kv_head, i32 batch) {
    KeyBlock k;
    k.n_block = n_block;
    k.kv_head = kv_head;
    k.batch = batch;
    k.seq = bwd_detail::sequence(b, batch);
    k.key0 = static_cast<i64>(n_block) * kBlockN;
    k.tiles = query_tiles<kBlockM, kBlockN>(b.mask, k.key0, k.seq.q_len, k.seq.k_len);
    k.tile_count = static_cast<i32>(k.tiles.end - k.tiles.begin);
    k.steps = k.tile_count * b.group_size;
    return k;
  }
  // Tile `index` of `order`: its key block the longest first (under a
  // causal mask the first key blocks see the most query tiles), so the
  // longest blocks start first; in deterministic mode the shortest first,
  // as the dQ turns go (turns_before): a tile only waits for tiles before
  // it, which a CTA started earlier runs or has run (a persistent CTA runs
  // its tiles in increasing order).
  ATTUNE_HOST_DEVICE static sm90_sched::WorkTile tile_at(const sm90_sched::TileOrder& order, i32 index,
                                                         bool deterministic) {
    sm90_sched::WorkTile t = order.at(index);  // heaviest first: m_block from the last down
    if (!deterministic) t.m_block = order.m_blocks - 1 - t.m_block;
    return t;  // m_block: the key block
  }
  ATTUNE_DEVICE static KeyBlock at(const FlashBwdParams& b, const sm90_sched::TileOrder& order, i32 index,
                                   bool deterministic) {
    const sm90_sched::WorkTile t = tile_at(order, dev::opaque(index), deterministic);
    return of(b, t.m_block, t.head, t.batch);
  }
  // Keys of the sequence's tensor: the tile writes dK and dV (zeros when
  // no step sees them); none past them.
  ATTUNE_DEVICE bool has_keys() const { return key0 < seq.k_capacity; }
  // Step i's query head and first row.
  ATTUNE_DEVICE i32 head(i32 step, i32 group_size) const {
    return kv_head * group_size + static_cast<i32>(static_cast<u32>(step) / static_cast<u32>(tile_count));
  }
  ATTUNE_DEVICE i64 row0(i32 step) const {
    return (tiles.begin + static_cast<i32>(static_cast<u32>(step) % static_cast<u32>(tile_count))) * kBlockM;
  }
  // The consumers' place in the steps, counted step by step: the division
  // of head() and row0() costs about 30 instructions a step.
  struct Cursor {
    i32 tile = 0;  // of the head's query tiles, from tiles.begin
    i32 head = 0;  // of the group
    ATTUNE_DEVICE void next(i32 tiles_per_head) {
      ++tile;
      wrap(tiles_per_head);
    }
    // Past the head's last tile: the next head's first.
    ATTUNE_DEVICE void wrap(i32 tiles_per_head) {
      if (tile == tiles_per_head) {
        tile = 0;
        ++head;
      }
    }
  };
  ATTUNE_DEVICE i32 head(const Cursor& at, i32 group_size) const { return kv_head * group_size + at.head; }
  ATTUNE_DEVICE i64 row0(const Cursor& at) const { return (tiles.begin + at.tile) * kBlockM; }
  // Deterministic dQ: how many key blocks take their turn at query tile
  // `tile` (of the same sequence and head) before this one: those after it
  // that have the tile among their steps. Turns run from the last key
  // block down: under a causal or windowed mask a later block reaches a
  // tile earlier in its loop (its steps start further down), so no block
  // waits for one still behind it. The count in closed form
  // (later_key_blocks_seen); it must agree with every block's query_tiles,
  // or a turn is never reached (tested against them exhaustively).
  ATTUNE_DEVICE i32 turns_before(const FlashBwdParams& b, i64 tile, i32 key_blocks) const {
    return static_cast<i32>(
        later_key_blocks_seen<kBlockM, kBlockN>(b.mask, tile, n_block, key_blocks, seq.q_len, seq.k_len));
  }
};

}  // namespace bwd_sm90_detail

// Tiles: ceil(longest key capacity / kBlockN) x Hkv x B in `tiles`' order.
// Grid: (G, 1, 1) for any G >= 1: CTA c runs tiles c, c + G, ... (one CTA
// per tile when G = tiles.count(); persistent, one per SM, when G is the SM
// count: K and V of the next tile load once every consumer warp has read
// the last one's, while the Q/dO ring runs on across tiles). Block:
// threads(); dynamic shared memory: shared_bytes(). Needs D from
// flash_bwd_preprocess (which also clears the dQ accumulator); dQ is
// finished by flash_bwd_dq_convert. In the emulator's instantiation kStages
// kDqAtomic, kDqTma, kPdsRegisters and kSdpSwapped may be kAtRunTime, read
// from the params.
template <int kHeadDim, int kBlockM, int kBlockN, int kStages, int kDqAtomic, int kDqTma, int kPdsRegisters,
          int kSdpSwapped, class DType, int kSoftcap = 0, int kAlibi = 0>
ATTUNE_KERNEL void ATTUNE_LAUNCH_BOUNDS(128 * (1 + kBlockN / 64), 1)
    flash_bwd_sm90(const ATTUNE_GRID_CONSTANT FlashBwdSm90Params p) {
  using namespace bwd_sm90_detail;
  static_assert(!kAllFixed<kStages, kDqAtomic, kDqTma, kPdsRegisters, kSdpSwapped> ||
                    FlashBwdSm90Tunables::valid(kHeadDim, kBlockM, kBlockN, kStages, kDqAtomic, kDqTma, kPdsRegisters,
                                                kSdpSwapped),
                "flash_bwd_sm90: these tunables break FlashBwdSm90Tunables::valid");
  static_assert(kBlockM % 64 == 0, "dS^T's rows (a key's queries) are boxes of 128-byte swizzled rows");
  constexpr i32 kQueryBoxes = kBlockM / 64;  // of dS^T (and P^T); dQ's 64-row parts
  constexpr i32 kConsumers = kBlockN / 64;
  using Mods = ScoreMods<kSoftcap, 0, kAlibi>;  // sinks change only dsink (flash_bwd_dsink)
  constexpr bool kElementMods = Mods::kMaySoftcap || Mods::kMayAlibi;
  constexpr i32 kChunks = kHeadDim / kBoxCols;
  constexpr i32 kHeadSteps = kHeadDim / 16;  // S^T, dP^T: over the head dim
  constexpr i32 kQuerySteps = kBlockM / 16;  // dV, dK: over the step's queries
  const i32 stages = Tunable<kStages>(p.stages).value();
  const bool dq_atomic = Tunable<kDqAtomic>(p.dq_atomic).on();
  const bool dq_tma = Tunable<kDqTma>(p.dq_tma).on();
  const bool pds_registers = Tunable<kPdsRegisters>(p.pds_registers).on();
  const bool sdp_swapped = Tunable<kSdpSwapped>(p.sdp_swapped).on();
  const FlashBwdParams& b = p.bwd;
  const Layout layout{kHeadDim, kBlockM, kBlockN, stages, pds_registers ? 1 : 0};
  using Block = KeyBlock<kBlockM, kBlockN>;

  unsigned char* smem = dev::shared_memory<unsigned char>();
  Barriers* bars = dev::shared_memory<Barriers>();
  const sm90_sync::KvRing ring{bars->full, bars->empty, stages};
  if (dev::linear_thread() == 0) {
    ring.init(kConsumers);
    dev::mbarrier::init(&bars->kv_landed, 1);
    dev::mbarrier::init(&bars->kv_full, 1);
    dev::mbarrier::init(&bars->kv_empty, kConsumers * 4);  // each consumer warp's lane 0
    dev::mbarrier::fence_init();
  }
  dev::block::sync();

  if (dev::warpgroup::index() == 0) {  // ---- producer ----
    if (kConsumers == 2) dev::registers::decrease<FlashBwdSm90Tunables::kProducerRegisters>();
    if (dev::warp_id() != 0) return;
    const bool leader = dev::elect_one();
    const i32 lane = dev::lane_id();
    unsigned char* k_tile = smem + layout.k_offset();
    TileProgress done;
    for (i32 index = dev::block_index().x; index < p.tiles.count(); index += dev::grid_dim().x) {
      const Block w = Block::at(b, p.tiles, index, !dq_atomic);
      if (!w.has_keys() || w.steps == 0) continue;  // nothing to load
      const bwd_detail::BwdSequence& seq = w.seq;
      const i64 key0 = w.key0;
      const i32 kv_head = w.kv_head;
      const i32 batch = w.batch;
      const i32 q_map_batch = b.cu_seqlens_q != nullptr ? 0 : batch;  // packed tensors are one sequence of batch 1
      const i32 k_map_batch = b.cu_seqlens_k != nullptr ? 0 : batch;
      if (leader) {
        if (done.ring_steps() > 0) {
          dev::mbarrier::wait(&bars->kv_empty, done.kv_parity() ^ 1);  // producer: wait K and V read
        } else {  // the first tile that loads (the maps exist: a call with no keys has none)
          dev::tma::prefetch(&p.q_map);
          dev::tma::prefetch(&p.do_map);
        }
        dev::mbarrier::arrive_expect_tx(&bars->kv_landed, static_cast<u32>(2 * layout.kv_bytes()));
        const i32 key_row = static_cast<i32>(seq.k_begin + key0);
        for (i32 c = 0; c < kChunks; ++c) {
          dev::tma::load(k_tile + c * kBlockN * kRowBytes, &p.k_map, &bars->kv_landed, c * kBoxCols, key_row, kv_head,
                         k_map_batch);  // producer: load K
          dev::tma::load(smem + layout.v_offset() + c * kBlockN * kRowBytes, &p.v_map, &bars->kv_landed, c * kBoxCols,
                         key_row, kv_head, k_map_batch);  // producer: load V
        }
      }
      dev::mbarrier::wait(&bars->kv_landed, done.kv_parity());  // producer: wait K and V
      const i64 keys = seq.k_len - key0;
      if (keys < kBlockN) {
        const i32 words = (kBlockN - static_cast<i32>(keys < 0 ? 0 : keys)) * kRowBytes / 4;  // whole rows of every box
        for (i32 c = 0; c < 2 * kChunks; ++c) {                                               // K's boxes, then V's
          u32* rows = dev::shared_as<u32>(k_tile + (c + 1) * kBlockN * kRowBytes) - words;
          ATTUNE_ROLLED
          for (i32 wd = dev::opaque(lane); wd < words; wd += kWarpSize) {
            dev::store_shared(rows + wd, 0U);  // producer: zero K and V
          }
        }
        dev::fence_proxy_async();  // the zeros before wgmma reads them
      }
      dev::named_barrier::sync(sm90_sync::kProducerWarp, kWarpSize);  // every lane's zeros
      if (leader) dev::mbarrier::arrive(&bars->kv_full);              // producer: K and V ready
      for (i32 step = 0; step < w.steps; ++step) {
        const i32 st = ring.stage(done.ring_steps() + step);
        const i32 head = w.head(step, b.group_size);
        const i64 row0 = w.row0(step);
        ring.producer_acquire(done.ring_steps() + step);
        if (!dq_atomic && leader) {  // before the stage's arrival, which publishes it
          const i32 tile = static_cast<i32>(row0 / kBlockM - w.tiles.begin);
          const StepTurn turn{w.turns_before(b, row0 / kBlockM, p.tiles.m_blocks),
                              (head - kv_head * b.group_size) * b.dq_turn_tiles + tile * kQueryBoxes};
          dev::store_shared(&bars->turns[st], turn);
        }
        // LSE in base 2, +inf for rows past the sequence and rows that saw no
        // key (LSE = -inf), and D, 0 there: their probabilities are 0.
        float* stats = dev::shared_as<float>(smem + layout.row_stats_offset(st));  // RowStatsPair's order
        ATTUNE_ROLLED
        for (i32 r = dev::opaque(lane); r < kBlockM; r += kWarpSize) {
          const bwd_detail::RowStats rs = bwd_detail::row_stats(b, seq, batch, head, row0 + r);
          dev::store_shared(stats + 2 * r, rs.lse_log2);  // producer: LSE
          dev::store_shared(stats + 2 * r + 1, rs.d);     // producer: D
        }
        dev::named_barrier::sync(sm90_sync::kProducerWarp, kWarpSize);  // every lane's rows before the arrival
        if (leader) {
          u64* full = ring.full_barrier(done.ring_steps() + step);
          const i32 q_row = static_cast<i32>(seq.q_begin + row0);
          dev::mbarrier::arrive_expect_tx(full, static_cast<u32>(2 * layout.q_bytes()));
          for (i32 c = 0; c < kChunks; ++c) {
            dev::tma::load(smem + layout.q_offset(st) + c * kBlockM * kRowBytes, &p.q_map, full, c * kBoxCols, q_row,
                           head,
                           q_map_batch);  // producer: load Q
            dev::tma::load(smem + layout.do_offset(st) + c * kBlockM * kRowBytes, &p.do_map, full, c * kBoxCols, q_row,
                           head, q_map_batch);  // producer: load dO
          }
        }
      }
      done.add(w.steps);
    }
    return;
  }

  // ---- consumers ----
  if (kConsumers == 2) dev::registers::increase<FlashBwdSm90Tunables::kConsumerRegisters>();
  const i32 consumer = dev::warpgroup::index() - 1;
  const i32 wt = dev::warpgroup::thread();
  const i32 lane = dev::lane_id();
  const i32 warp = dev::warp_id() % 4;                 // in the warpgroup: keys (S^T, dK, dV) or queries (dQ) 16 w ..
  using Scores = frag::Accumulator<1, kBlockM / 8>;    // S^T, dP^T: a warp's 16 keys by the step's queries
  using KeyRows = frag::Accumulator<1, kHeadDim / 8>;  // dK, dV: a warp's 16 keys by the head dim
  using DqBox = frag::Accumulator<1, kBoxCols / 8>;    // dQ: a warp's 16 queries by one box of columns
  // This consumer's keys of K and V (64 rows of every box).
  const unsigned char* k_rows = smem + layout.k_offset() + 64 * consumer * kRowBytes;
  const unsigned char* v_rows = smem + layout.v_offset() + 64 * consumer * kRowBytes;
  // dQ = dS K: this consumer's boxes of 64 columns and the keys they sum over
  // (dq_by_columns).
  constexpr bool kDqByColumns = FlashBwdSm90Tunables::dq_by_columns(kHeadDim, kBlockN);
  constexpr i32 kDsBuffers = FlashBwdSm90Tunables::ds_buffers(kHeadDim, kBlockN);
  constexpr i32 kDqBoxes = kDqByColumns ? kChunks / kConsumers : kChunks;
  constexpr i32 kDqKeySteps = (kDqByColumns ? kBlockN : 64) / 16;
  const i32 dq_first_box = kDqByColumns ? consumer * kDqBoxes : 0;
  const i32 dq_key_rows = kDqByColumns ? 0 : 64 * consumer * kRowBytes;  // byte offset of its first key's row
  unsigned char* dq_stage = smem + layout.dq_offset(consumer);
  // A thread's place in a dQ stage box (see the stores): its first row's
  // byte offset, and the XOR of its chunks. Held across the loop at 64
  // query rows; at 128, whose modifier variants have no two registers to
  // spare (48 bytes of spills, NVRTC), formed each step from an opaque lane.
  const auto dq_lane_of = [&](u32 l) {
    const u32 box_row = 2 * ((l / 4) % 4) + l / 16;  // of r % 8 = lane / 4
    return DqLane{(16 * warp + box_row) * 128 + (l % 2) * 8, ((l % 4) / 2) ^ box_row};
  };
  const DqLane dq_lane_held = dq_lane_of(static_cast<u32>(lane));
  // wgmma descriptors as offsets from shared memory's own: one add each in
  // the loop (the encoding's masks and shifts once, here).
  const u64 smem_descriptor = dev::wgmma::descriptor(smem, 0, kAtomStride, kSwizzle);
  const auto descriptor = [&](const unsigned char* at, i32 leading_bytes) {
    return dev::wgmma::advance(smem_descriptor,
                               sm90::descriptor_offset(static_cast<u32>(at - smem), static_cast<u32>(leading_bytes)));
  };
  TileProgress done;
  for (i32 index = dev::block_index().x; index < p.tiles.count(); index += dev::grid_dim().x) {
    const Block w = Block::at(b, p.tiles, index, !dq_atomic);
    if (!w.has_keys()) continue;
    const bwd_detail::BwdSequence& seq = w.seq;
    // This warp's first key, formed where used from an opaque offset: held
    // across the tile's or the step's loop, it spills.
    const auto warp_key0 = [&] { return w.key0 + dev::opaque(64 * consumer + 16 * warp); };
    KeyRows dk;
    KeyRows dv;
    dk.fill(0.0f);
    dv.fill(0.0f);
    if (w.steps > 0) dev::mbarrier::wait(&bars->kv_full, done.kv_parity());  // consumer: wait K and V
    // A step's body, masked or not: called with a constant at two sites
    // (the free steps' loop and the rest) and inlined at both, so the free
    // loop's copy has no mask code (the audit's instruction count of that
    // loop would show a copy that kept it). A generic lambda with the choice
    // as a type is what NVRTC refuses in device code.
    typename Block::Cursor cursor;
    // Deterministic dQ: the turn counters of the tile's first head's query
    // tiles (the step's is cursor.head heads and cursor.tile tiles on).
    i32* const tile_turns = b.dq_turns +
                            (static_cast<i64>(w.batch) * b.heads_q + w.kv_head * b.group_size) * b.dq_turn_tiles +
                            w.tiles.begin * kQueryBoxes;
    const auto run_step = [&](bool masked, i32 step) {
      const i32 st = ring.stage(done.ring_steps() + step);
      const i64 row0 = w.row0(cursor);
      const i32 head = w.head(cursor, b.group_size);
      const unsigned char* q_tile = smem + layout.q_offset(st);
      unsigned char* ds_tile = smem + layout.ds_offset(kDsBuffers == 1 ? 0 : (done.ring_steps() + step) % 2);
      unsigned char* ds_rows = ds_tile + 64 * consumer * kRowBytes;  // this consumer's keys
      const unsigned char* do_tile = smem + layout.do_offset(st);
      ring.consumer_wait(done.ring_steps() + step);
      const StepTurn turns = dq_atomic ? StepTurn{0, 0} : dev::load_shared(&bars->turns[st]);  // before the release

      // S and dP over the head dim, both operands K-major, 16 columns a
      // k-step: swapped, S^T = K Q^T and dP^T = V dO^T (a warp's 16 keys by
      // the step's queries); else S = Q K^T and dP = dO V^T (a warp's 16
      // queries by the consumer's 64 keys).
      Scores s;
      Scores dp;
      {
        // acc = a's rows x b's rows; a box of each holds a_rows and b_rows rows.
        const auto over_head_dim = [&](Scores& acc, const unsigned char* a, i32 a_rows, const unsigned char* bt,
                                       i32 b_rows) {
          const u64 a_desc = descriptor(a, 16);
          const u64 b_desc = descriptor(bt, 16);
          ATTUNE_UNROLL
          for (i32 kk = 0; kk < kHeadSteps; ++kk) {
            const u32 a_at = static_cast<u32>((kk / 4) * a_rows * kRowBytes + (kk % 4) * 32);
            const u32 b_at = static_cast<u32>((kk / 4) * b_rows * kRowBytes + (kk % 4) * 32);
            dev::wgmma::mma_ss<DType, kBlockM, 0, 0>(acc.tiles, dev::wgmma::advance(a_desc, a_at),
                                                     dev::wgmma::advance(b_desc, b_at), kk > 0);
          }
        };
        dev::wgmma::fence();
        if (sdp_swapped) {
          over_head_dim(s, k_rows, kBlockN, q_tile, kBlockM);    // consumer: S^T GEMM
          over_head_dim(dp, v_rows, kBlockN, do_tile, kBlockM);  // consumer: dP^T GEMM
        } else {
          over_head_dim(s, q_tile, kBlockM, k_rows, kBlockN);    // consumer: S GEMM
          over_head_dim(dp, do_tile, kBlockM, v_rows, kBlockN);  // consumer: dP GEMM
        }
        dev::wgmma::commit();
        dev::wgmma::wait<0>();
      }

      // P and dS in place. Swapped, a thread holds keys acc_row of its
      // warp's 16 and queries acc_col of each 8-query tile; else queries
      // 16 warp + acc_row and keys acc_col of each 8-key tile of the
      // consumer's 64. (masked: the mask code runs; false in the free
      // steps' loop.)
      const RowStatsPair* stats = dev::shared_as<const RowStatsPair>(smem + layout.row_stats_offset(st));
      // The keys the elements' columns (swapped: rows) count from: the
      // warp's 16, or the consumer's 64.
      const auto key_base = [&] { return sdp_swapped ? warp_key0() : w.key0 + dev::opaque(64 * consumer); };
      // The mask by global position as key_bounds draws it, in 32-bit
      // offsets: key j (from key_base) and the step's query i see each other
      // when lo <= j - i < hi and j < keys. (key_g - diagonal(row) is base +
      // j - i; every j - i lies in (-kBlockM, 64], so the bounds clamp to
      // +-2 kBlockM.)
      const auto step_window = [&] {
        const i64 base = key_base() - row0 - diagonal_offset(b.mask, seq.q_len, seq.k_len);
        const auto clamp = [](i64 x) {
          return static_cast<i32>(x < -2 * kBlockM ? -2 * kBlockM : x > 2 * kBlockM ? 2 * kBlockM : x);
        };
        return KeyWindow{b.mask.left >= 0 ? clamp(-b.mask.left - base) : -2 * kBlockM,
                         b.mask.right >= 0 ? clamp(b.mask.right + 1 - base) : 2 * kBlockM};
      };
      // Softcap and ALiBi as the forward applies them (score_mods.cuh):
      // the step's query head's slope; ALiBi's distance i + Sk - Sq - j of
      // this thread's first element (its first row and column), from which
      // every other element's differs by a constant (an opaque lane: 64
      // offsets held across the loop would spill).
      const bool softcap = Mods::softcap(b.mods);
      const bool alibi = Mods::alibi(b.mods);
      [[maybe_unused]] float slope_log2 = 0.0f;
      [[maybe_unused]] float distance0 = 0.0f;
      if constexpr (kElementMods) {
        if (alibi) {
          const i32 lane_a = dev::opaque(lane);
          const i64 slope_at = w.batch * b.mods.alibi_batch_stride + head;
          slope_log2 = dev::load_global(b.mods.alibi_slopes + slope_at) * kLog2e;
          // 32-bit: positions within one sequence. Swapped: query
          // acc_col(lane, 0), key acc_row(lane, 0); else query 16 warp +
          // acc_row(lane, 0), key acc_col(lane, 0).
          const i32 first = sdp_swapped ? frag::acc_col(lane_a, 0) - frag::acc_row(lane_a, 0)
                                        : 16 * warp + frag::acc_row(lane_a, 0) - frag::acc_col(lane_a, 0);
          distance0 = static_cast<float>(static_cast<i32>(row0 + seq.k_len - seq.q_len - key_base()) + first);
        }
      }
      // Which of the thread's 32 elements are visible. Element u = 8 t + c
      // of the thread's row `half` (t: the 8-column tile), counted from
      // its first column col0 = acc_col(lane, 0), is visible for u in one
      // range [lo, hi): swapped, key j = acc_row(lane, half) sees the
      // queries col0 + u with begin <= j - (col0 + u) < end (none when
      // j >= keys); else query i = 16 warp + acc_row(lane, half) sees keys
      // col0 + u with begin <= col0 + u - i < end and col0 + u < keys. The
      // range's bits (`sets`, [half][word]: u - 32 word) are then gathered
      // eight to a byte, `visible` [t / 8]: byte t % 4, bit 4 ((t / 4) % 2)
      // + 2 half + c, which ptxas moves to predicates a byte at a time
      // (R2P). The free steps' copy of the body skips all of it.
      constexpr i32 kWords = kBlockM / 32;  // of bits u: the step's queries (swapped) or the consumer's 64 keys
      u32 visible[kWords / 2];
      ATTUNE_UNROLL
      for (i32 v = 0; v < kWords / 2; ++v) visible[v] = ~0U;  // the free steps' body never reads them
      if (masked) {
        u32 sets[2][kWords];
        const KeyWindow window = step_window();
        const i64 keys_left = seq.k_len - key_base();  // keys of the sequence from key_base
        const i32 width = sdp_swapped ? 16 : 64;
        const i32 keys = keys_left < 0 ? 0 : keys_left > width ? width : static_cast<i32>(keys_left);
        const u32 lane_m = static_cast<u32>(dev::opaque(lane));  // unsigned: / and % by 4 are shifts
        const i32 col0 = static_cast<i32>(2 * (lane_m % 4));     // frag::acc_col(lane, 0)
        ATTUNE_UNROLL
        for (i32 half = 0; half < 2; ++half) {
          const i32 row = static_cast<i32>(lane_m / 4) + 8 * half;  // frag::acc_row
          i32 lo;
          i32 hi;
          if (sdp_swapped) {
            const i32 end = row < keys ? window.end : window.begin;  // none past the sequence's keys
            lo = row - col0 + 1 - end;
            hi = row - col0 + 1 - window.begin;
          } else {
            const i32 query = 16 * warp + row;
            const i32 end = query + window.end < keys ? query + window.end : keys;
            lo = query + window.begin - col0;
            hi = end - col0;
          }
          ATTUNE_UNROLL
          for (i32 word = 0; word < kWords; ++word) {
            sets[half][word] = dev::low_bits(hi - 32 * word) & ~dev::low_bits(lo - 32 * word);
          }
        }
        ATTUNE_UNROLL
        for (i32 v = 0; v < kWords / 2; ++v) {
          // Opaque: the compiler would otherwise test each set's bits directly.
          visible[v] = static_cast<u32>(dev::opaque(
              static_cast<i32>((sets[0][2 * v] & 0x03030303U) | ((sets[1][2 * v] << 2) & 0x0C0C0C0CU) |
                               ((sets[0][2 * v + 1] << 4) & 0x30303030U) | ((sets[1][2 * v + 1] << 6) & 0xC0C0C0C0U))));
        }
      }
      const float masked_out = -dev::infinity();
      // One element: P = 2^(S scale_log2 - LSE_log2) (0 where masked) in s,
      // dS = P (dP - D) in dp; `distance`: ALiBi's.
      const auto gradient = [&](float& s_at, float& dp_at, float lse, float row_d, bool seen, float distance) {
        if constexpr (kElementMods) {
          // The forward's logit, modifiers included; t: the softcap's tanh.
          // dP - D, times the tanh's derivative, in place first: t is dead
          // before the exponential.
          const float raw = s_at;
          float x = raw * b.scale_log2;
          float d_rest = dp_at - row_d;
          if (softcap) {
            const float t = dev::tanh_approx(raw * p.softcap_in);
            d_rest *= 1.0f - t * t;  // d(c tanh(x / c)) / dx
            x = t * p.softcap_out;
          }
          if (alibi) x -= alibi_penalty(slope_log2, distance);
          // Two equal forms of the masked exponential; which keeps the
          // d128 consumers within their registers depends on the mix of
          // modifiers (NVRTC: each spills 4 bytes in the other's).
          const float prob = Mods::kMayAlibi && kConsumers == 2 ? (seen ? dev::exp2_approx(x - lse) : 0.0f)
                                                                : dev::exp2_approx(seen ? x - lse : masked_out);
          s_at = prob;
          dp_at = prob * d_rest;  // 0 where masked: dP is finite
        } else {                  // the code as it was before modifiers: variants without them compile as before
          static_cast<void>(distance);
          const float prob = dev::exp2_approx(seen ? s_at * b.scale_log2 - lse : masked_out);
          s_at = prob;
          dp_at = prob * (dp_at - row_d);  // 0 where masked: dP is finite
        }
      };
      // Element (t, half, c): bit 8 (t % 4) + 4 ((t / 4) % 2) + 2 half + c of visible[t / 8].
      const auto seen_at = [&](u32 bits, i32 bit) { return !masked || ((bits >> bit) & 1U) != 0; };
      // The elements of 8-column tile t. Swapped, columns 8 t + acc_col(lane,
      // c) are queries: their LSE and D are the pair 4 t + lane % 4; else
      // they are keys, and the thread's rows' LSE and D are row_stats'.
      float lse[2];
      float row_d[2];
      if (!sdp_swapped) {  // rows 16 warp + acc_row(lane, half)
        const float* rows_stats = dev::shared_as<const float>(stats);
        ATTUNE_UNROLL
        for (i32 half = 0; half < 2; ++half) {
          const i32 row = 16 * warp + frag::acc_row(lane, half);
          lse[half] = dev::load_shared(rows_stats + 2 * row);
          row_d[half] = dev::load_shared(rows_stats + 2 * row + 1);
        }
      }
      const auto tile_elements = [&](i32 t, u32 bits) {  // bits: visible[t / 8]
        if (sdp_swapped) {
          const RowStatsPair pair = dev::load_shared(stats + 4 * t + lane % 4);
          ATTUNE_UNROLL
          for (i32 c = 0; c < 2; ++c) {
            ATTUNE_UNROLL
            for (i32 half = 0; half < 2; ++half) {
              gradient(s.at(0, t, half, c), dp.at(0, t, half, c), c == 0 ? pair.lse0 : pair.lse1,
                       c == 0 ? pair.d0 : pair.d1, seen_at(bits, 8 * (t % 4) + 4 * ((t / 4) % 2) + 2 * half + c),
                       distance0 + static_cast<float>(8 * t + c - 8 * half));
            }
          }
        } else {
          ATTUNE_UNROLL
          for (i32 half = 0; half < 2; ++half) {
            ATTUNE_UNROLL
            for (i32 c = 0; c < 2; ++c) {
              gradient(s.at(0, t, half, c), dp.at(0, t, half, c), lse[half], row_d[half],
                       seen_at(bits, 8 * (t % 4) + 4 * ((t / 4) % 2) + 2 * half + c),
                       distance0 + static_cast<float>(8 * half - 8 * t - c));
            }
          }
        }
      };

      // A 16-column step at a time: its two tiles' elements, then P^T and
      // dS^T rounded to the storage dtype (computed just before they are
      // packed, the fp32 values live shortly: at 128 query rows the whole
      // tile's elements first spilled 10 values in the masked step, NVRTC).
      // dS^T goes to shared memory for dQ (its buffer's last readers, the dQ
      // GEMMs of kDsBuffers steps ago, are done: this consumer's waited for,
      // the others' before the last dS^T barrier), and P^T too when dV's GEMM
      // reads it there (its last reader, this consumer's dV GEMM of the last
      // step, waited for); swapped, both also stay as A fragments (16
      // queries a step) for dV's and dK's GEMMs from registers.
      // By stmatrix, a step's four registers at once (an A fragment:
      // register q is the 8 x 8 matrix of rows 8 (q % 2) and columns 8 (q /
      // 2) of the warp's 16 rows and the step's 16 columns). Swapped, matrix
      // q's rows are key rows 16 warp + 8 (q % 2) + (0 .. 7) and its columns
      // 16-byte chunk 2 ks + q / 2 of them (of box ks / 4); else (.trans) its
      // columns are key rows 16 ks + 8 (q / 2) + (0 .. 7) and its rows the
      // warp's chunk 2 warp + q % 2 of them. The 128-byte swizzle XORs a
      // chunk with its row's index in its 8-row atom. Lane l gives row l % 8
      // of matrix l / 8. From an opaque lane, so the four addresses are not
      // held across the loop.
      const u32 lane_s = static_cast<u32>(dev::opaque(lane));
      const u32 matrix = lane_s / 8;
      const u32 atom_row = lane_s % 8;
      unsigned char* const p_rows = smem + layout.p_offset() + 64 * consumer * kRowBytes;  // !pds_registers
      // Swapped: the row is 128-byte aligned and 2 ks has no low bit, so
      // chunk (2 ks + matrix / 2) ^ atom_row is 32 ks ^ ds_chunk_xor in bytes:
      // one XOR a step.
      const u32 lane_row = (16 * warp + 8 * (matrix % 2) + atom_row) * kRowBytes;
      unsigned char* const ds_lane = ds_rows + lane_row;
      unsigned char* const p_lane = p_rows + lane_row;
      const u32 ds_chunk_xor = ((matrix / 2) ^ atom_row) * 16;
      const u32 lane_at = (8 * (matrix / 2) + atom_row) * kRowBytes + (((2 * warp + matrix % 2) ^ atom_row) * 16);
      u32 pa[kQuerySteps][4];
      u32 dsa[kQuerySteps][4];
      ATTUNE_UNROLL
      for (i32 ks = 0; ks < kQuerySteps; ++ks) {  // unswapped (kBlockM = 64): over the consumer's 64 keys
        tile_elements(2 * ks, visible[ks / 4]);
        tile_elements(2 * ks + 1, visible[ks / 4]);
        flash_detail::pack_a_fragment<DType>(s.tile(0, 2 * ks), s.tile(0, 2 * ks + 1), pa[ks]);
        flash_detail::pack_a_fragment<DType>(dp.tile(0, 2 * ks), dp.tile(0, 2 * ks + 1), dsa[ks]);
        if (sdp_swapped) {
          const u32 chunk = (32U * static_cast<u32>(ks % 4)) ^ ds_chunk_xor;
          const i32 box = (ks / 4) * kBlockN * kRowBytes;
          dev::stmatrix_x4(ds_lane + box + chunk, dsa[ks]);                    // consumer: store dS^T
          if (!pds_registers) dev::stmatrix_x4(p_lane + box + chunk, pa[ks]);  // consumer: store P^T
        } else {
          const u32 at = lane_at + static_cast<u32>(ks * 16 * kRowBytes);
          dev::stmatrix_x4_trans(ds_rows + at, dsa[ks]);  // consumer: store dS^T (from dS)
          dev::stmatrix_x4_trans(p_rows + at, pa[ks]);    // consumer: store P^T (from P)
        }
      }
      // dS^T's (and P^T's) stores before a wgmma reads them: every warp's,
      // and split by columns both consumers'.
      const auto publish_key_query_tiles = [&] {
        dev::fence_proxy_async();
        if constexpr (kDqByColumns) {
          dev::named_barrier::sync(sm90_sync::kDsStored, kConsumers * sm90::kWarpgroupSize);
        } else {
          dev::named_barrier::sync(sm90_sync::kDsStored + consumer, sm90::kWarpgroupSize);
        }
      };
      if (!pds_registers) publish_key_query_tiles();  // before dV's and dK's GEMMs read them

      // dV += P^T dO and dK += dS^T Q, over the step's queries: dO and Q are
      // MN-major here (16 query rows of every box a step; LBO steps a box);
      // P^T and dS^T from registers, or from shared memory K-major (16
      // queries, 32 bytes of each key's row, a step).
      {
        const u64 do_desc = descriptor(do_tile, kBlockM * kRowBytes);
        const u64 q_desc = descriptor(q_tile, kBlockM * kRowBytes);
        dev::wgmma::fence();
        if (pds_registers) {
          ATTUNE_UNROLL
          for (i32 ks = 0; ks < kQuerySteps; ++ks) {
            dev::wgmma::mma_rs<DType, kHeadDim, 1>(dv.tiles, pa[ks], dev::wgmma::advance(do_desc, ks * 16 * kRowBytes),
                                                   1);  // consumer: dV GEMM
          }
          ATTUNE_UNROLL
          for (i32 ks = 0; ks < kQuerySteps; ++ks) {
            dev::wgmma::mma_rs<DType, kHeadDim, 1>(dk.tiles, dsa[ks], dev::wgmma::advance(q_desc, ks * 16 * kRowBytes),
                                                   1);  // consumer: dK GEMM
          }
        } else {
          // acc += A B over the step's queries, A's key rows from shared
          // memory (box ks / 4, 32 bytes of it a step).
          const auto from_shared = [&](KeyRows& acc, const unsigned char* a_rows, u64 b_desc) {
            const u64 a_desc = descriptor(a_rows, 16);
            ATTUNE_UNROLL
            for (i32 ks = 0; ks < kQuerySteps; ++ks) {
              dev::wgmma::mma_ss<DType, kHeadDim, 0, 1>(
                  acc.tiles, dev::wgmma::advance(a_desc, (ks / 4) * kBlockN * kRowBytes + (ks % 4) * 32),
                  dev::wgmma::advance(b_desc, ks * 16 * kRowBytes), 1);
            }
          };
          from_shared(dv, p_rows, do_desc);  // consumer: dV GEMM from shared memory
          from_shared(dk, ds_rows, q_desc);  // consumer: dK GEMM from shared memory
        }
        dev::wgmma::commit();
      }

      // dQ = dS K, a box of columns at a time: dS (dS^T's rows) and K both
      // MN-major, 16 keys a step. By columns, every consumer's dS^T is read.
      if (pds_registers) publish_key_query_tiles();
      // dV's and dK's GEMMs done before dQ's accumulators are live: P^T's and
      // dS^T's fragments are dead by then (at d128 both sets would not fit
      // beside dK and dV without spills).
      dev::wgmma::wait<0>();
      ring.consumer_release(done.ring_steps() + step, wt);  // Q, dO, LSE and D read
      // Deterministic mode: this consumer's turn at the tile's rows comes
      // after every consumer of the key blocks whose turn comes first
      // (turns_before) and, split by keys, after the consumers before it in
      // this block (split by columns, they add to other columns).
      // One thread (the issuer) waits for the turn and, with kDqTma, issues
      // the bulk reductions; with red.global every thread adds, so all wait.
      const bool issuer = warp == 0 && lane == 0;
      i32* turn = nullptr;
      if (!dq_atomic) {
        turn = tile_turns + turns.counter;
        if (issuer) {
          const i32 earlier = kConsumers * turns.before + (kDqByColumns ? 0 : consumer);
          dev::semaphore_wait(turn, earlier);  // consumer: wait for dQ's turn
        }
        if (!dq_tma) dev::named_barrier::sync(sm90_sync::kDqTurn + consumer, sm90::kWarpgroupSize);
      }
      // A part: a box of columns of one 64-row part of the step's queries
      // (parts past the sequence's rows skipped: every thread agrees).
      ATTUNE_UNROLL
      for (i32 part = 0; part < kDqBoxes * kQueryBoxes; ++part) {
        const i32 c = dq_first_box + part % kDqBoxes;  // the box of columns
        const i32 rows = 64 * (part / kDqBoxes);       // the part's first row, from row0
        if (part >= kDqBoxes && row0 + rows >= seq.q_len) continue;
        DqBox dq;
        const u64 ds_desc =
            descriptor(ds_tile + (part / kDqBoxes) * kBlockN * kRowBytes + dq_key_rows, kBlockN * kRowBytes);
        const u64 k_desc =
            descriptor(smem + layout.k_offset() + c * kBlockN * kRowBytes + dq_key_rows, kBlockN * kRowBytes);
        dev::wgmma::fence();
        ATTUNE_UNROLL
        for (i32 ks = 0; ks < kDqKeySteps; ++ks) {
          dev::wgmma::mma_ss<DType, kBoxCols, 1, 1>(dq.tiles, dev::wgmma::advance(ds_desc, ks * 16 * kRowBytes),
                                                    dev::wgmma::advance(k_desc, ks * 16 * kRowBytes),
                                                    ks > 0);  // consumer: dQ GEMM
        }
        dev::wgmma::commit();
        dev::wgmma::wait<0>();
        if (dq_tma) {
          // The box to shared memory (the previous box's reductions have read
          // it), then two bulk reductions of 32 columns. The map puts the
          // part's row r in the box's row s = 8 (r / 8) + 2 (r % 4) + (r % 8)
          // / 4 (dq_accumulator_map), whose 16-byte chunk j is at j ^ (s % 8):
          // the 128-byte swizzle. A thread's columns 8 dt + 2 (lane % 4) (and
          // + 1) are chunk 2 (dt % 4) + (lane % 4) / 2 of half dt / 4, at byte
          // 8 (lane % 2); both its rows have r % 8 = lane / 4. An 8-byte store
          // runs as two half-warps (r % 8 in 0 .. 3 and 4 .. 7): in row order
          // rows 2 i and 2 i + 1 took the same two chunks (a 2-way bank
          // conflict), through s four different pairs.
          if (issuer) dev::tma::wait_read<0>();
          dev::named_barrier::sync(sm90_sync::kDqTurn + consumer, sm90::kWarpgroupSize);
          const DqLane dq_lane = kBlockM == 64 ? dq_lane_held : dq_lane_of(static_cast<u32>(dev::opaque(lane)));
          const u32 chunk_xor = dq_lane.chunk_xor;
          unsigned char* dq_thread = dq_stage + dq_lane.offset;
          ATTUNE_UNROLL
          for (i32 half = 0; half < 2; ++half) {
            ATTUNE_UNROLL
            for (i32 dt = 0; dt < kBoxCols / 8; ++dt) {
              // Two pointer adds, not one of a u32 sum: a u32 may wrap, so
              // the constant would not fold into the store's offset.
              const u32 chunk = (static_cast<u32>(2 * (dt % 4)) ^ chunk_xor) << 4;
              const u64 pair = (static_cast<u64>(dev::float_bits(dq.at(0, dt, half, 1))) << 32) |
                               dev::float_bits(dq.at(0, dt, half, 0));
              dev::store_shared(dev::shared_as<u64>(dq_thread + chunk + ((dt / 4) * 64 * 128 + half * 8 * 128)),
                                pair);  // consumer: stage dQ
            }
          }
          dev::fence_proxy_async();  // the stage's stores before the bulk reductions read it
          dev::named_barrier::sync(sm90_sync::kDqTurn + consumer, sm90::kWarpgroupSize);
          if (issuer) {
            // The part's first row in groups of 8 (the map's `a`): unsigned,
            // a shift.
            const i32 row8 = static_cast<i32>(static_cast<u32>(seq.row_base + row0 + rows) / 8U);
            ATTUNE_UNROLL
            for (i32 h = 0; h < 2; ++h) {
              const i32 col = c * kBoxCols + 32 * h;
              if (col >= b.head_dim_k) continue;
              if (dq_atomic) {
                dev::tma::reduce_add(&p.dq_map, dq_stage + h * 64 * 128, col, 0, 0, row8,
                                     head);  // consumer: add dQ
              } else {
                dev::tma::ordered_reduce_add(&p.dq_map, dq_stage + h * 64 * 128, col, 0, 0, row8,
                                             head);  // consumer: add dQ in turn
              }
            }
            dev::tma::commit();
          }
          continue;
        }
        // This consumer's part, added to the accumulator (columns from an
        // opaque lane: 16 column offsets held across the loop spill).
        const u32 lane_r = static_cast<u32>(dev::opaque(lane));
        ATTUNE_UNROLL
        for (i32 half = 0; half < 2; ++half) {
          const i64 row = row0 + rows + 16 * warp + static_cast<i32>(lane_r / 4) + 8 * half;  // frag::acc_row
          if (row >= seq.q_len) continue;
          float* out = b.dq_accum + ((seq.row_base + row) * b.heads_q + head) * b.head_dim_k + c * kBoxCols;
          ATTUNE_UNROLL
          for (i32 dt = 0; dt < kBoxCols / 8; ++dt) {
            ATTUNE_UNROLL
            for (i32 e = 0; e < 2; ++e) {
              const i32 col = 8 * dt + static_cast<i32>(2 * (lane_r % 4)) + e;  // frag::acc_col
              if (c * kBoxCols + col >= b.head_dim_k) continue;
              if (dq_atomic) {
                dev::atomic_add(out + col, dq.at(0, dt, half, e));  // consumer: add dQ
              } else {
                dev::ordered_atomic_add(out + col, dq.at(0, dt, half, e));  // consumer: add dQ in turn
              }
            }
          }
        }
      }
      // Every thread's adds before the release (cumulative: the barrier
      // orders them before lane 0's red.release).
      // The bulk reductions release only once complete (wait_group, not .read).
      if (!dq_atomic) {
        if (dq_tma) {
          if (issuer) dev::tma::wait<0>();
        } else {
          dev::named_barrier::sync(sm90_sync::kDqTurn + consumer, sm90::kWarpgroupSize);
        }
        if (issuer) dev::semaphore_release(turn, 1);  // consumer: pass dQ's turn on
      }
    };
    // The steps in order; each run of free query tiles (free_query_tiles:
    // every row sees every key) in a loop of its own, its body compiled
    // without the mask: a long sequence's main loop.
    const TileRange free = free_query_tiles<kBlockM, kBlockN>(b.mask, w.key0, seq.q_len, seq.k_len);
    const i64 free_from = free.begin - w.tiles.begin;
    const i64 free_to = free.end - w.tiles.begin;
    const i32 free_begin = static_cast<i32>(free_from < 0 ? 0 : free_from > w.tile_count ? w.tile_count : free_from);
    const i32 free_end = static_cast<i32>(free_to < free_begin     ? free_begin
                                          : free_to > w.tile_count ? w.tile_count
                                                                   : free_to);
    const auto is_free = [&] { return cursor.tile >= free_begin && cursor.tile < free_end; };
    for (i32 step = 0; step < w.steps;) {
      if (is_free()) {
        // A run of free steps within one head: its loop only counts (a free
        // range that spans heads is a run per head).
        const i32 left_in_head = free_end - cursor.tile;
        const i32 run_end = step + (left_in_head < w.steps - step ? left_in_head : w.steps - step);
        do {
          run_step(false, step);
          ++cursor.tile;
        } while (++step < run_end);
        cursor.wrap(w.tile_count);
      } else {
        run_step(true, step);
        cursor.next(w.tile_count);
        ++step;
      }
    }
    // K and V read: every GEMM reading them (S^T's, dP^T's and each box's
    // dQ GEMM) has been waited for by the warp.
    if (w.steps > 0) {
      if (lane == 0) dev::mbarrier::arrive(&bars->kv_empty);  // consumer: release K and V
      done.add(w.steps);
    }

    // dK (scaled) and dV of this warp's keys; keys past the sequence's real
    // keys (padding) and keys no row sees get exact zeros.
    ATTUNE_UNROLL
    for (i32 half = 0; half < 2; ++half) {
      const i64 key = warp_key0() + frag::acc_row(lane, half);
      if (key >= seq.k_capacity) continue;
      u16* dk_row = b.dk + w.batch * b.dk_batch_stride + (seq.k_begin + key) * b.dk_row_stride +
                    static_cast<i64>(w.kv_head) * b.dk_head_stride;
      u16* dv_row = b.dv + w.batch * b.dv_batch_stride + (seq.k_begin + key) * b.dv_row_stride +
                    static_cast<i64>(w.kv_head) * b.dv_head_stride;
      ATTUNE_UNROLL
      for (i32 dt = 0; dt < kHeadDim / 8; ++dt) {
        ATTUNE_UNROLL
        for (i32 e = 0; e < 2; ++e) {
          const i32 col = 8 * dt + frag::acc_col(lane, e);
          if (col < b.head_dim_k) dev::store_global(dk_row + col, dev::to_bits<DType>(dk.at(0, dt, half, e) * b.scale));
          if (col < b.head_dim_v) dev::store_global(dv_row + col, dev::to_bits<DType>(dv.at(0, dt, half, e)));
        }
      }
    }
  }
  // The stage is read before the block exits.
  if (dq_tma && warp == 0 && lane == 0) dev::tma::wait<0>();
}

}  // namespace attune
