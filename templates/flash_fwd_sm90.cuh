// Forward attention for Hopper (sm_90a), FlashAttention-3 style: the same
// operator contract as flash_fwd, on TMA, mbarriers, wgmma and setmaxnreg.
//
// A block (CTA) owns kBlockM query rows of one (batch, head). Warpgroup 0 is
// the producer: one elected thread loads the Q tile once and streams the K/V
// tiles through TMA into a ring of kStages shared stages, each with a full
// and an empty mbarrier. Warpgroups 1 .. kBlockM/64 are consumers, 64 query
// rows each: S = Q K^T by wgmma from shared memory, the shared online-softmax
// rule in registers (the wgmma accumulator of a warp is mma.sync's C fragment,
// so OnlineSoftmax<1, D/8> and scale_and_mask apply unchanged), P converted in
// registers as the A operand of O += P V, the stage released once its V GEMM
// is done. Registers move from the producer to the consumers with setmaxnreg.
//
// Schedules (tunables): kPingpong, two consumers take turns issuing their
// GEMMs through named barriers, so one's softmax overlaps the other's tensor
// work; kOverlap, a consumer issues the S GEMM of tile n before the P V GEMM
// of tile n-1 and runs the softmax of n while that one is in flight;
// kRescaleAfter (with kOverlap), O is rescaled right after the P V GEMM it
// waits for instead of right before the next one is issued; kTmaStore, O
// leaves through shared memory and a TMA store instead of direct stores.
//
// Tensors reach TMA through 4-D tensor maps (head dim, rows, heads, batch)
// built per call by the host (runtime/launch/flash_fwd_sm90_params.h), with
// the 128-byte swizzle and boxes of 64 head-dim columns: a tile of D columns
// is D/64 boxes, each [rows x 128 bytes], and every wgmma descriptor below
// addresses that layout. Rows and keys past the tensor read as zero; keys
// past a sequence inside the tensor (packed or padded keys) are masked, and
// their V rows are zeroed by the producer before the consumers see them.
//
// kFp8 (a feature the problem chooses): Q, K and V in e4m3, O in DType.
// Tiles are D/128 boxes of 128 one-byte columns (the same 128-byte rows),
// S = Q K^T runs on 8-bit wgmma (k32 steps), and P V wants V K-major
// (keys contiguous), which TMA cannot write: V lands key-major in a staging
// buffer and the producer's warps 1..3 transpose it into the stage, key
// 32 j + p_key(c) in slot c of each 32-key step, so P is packed to e4m3
// from the S accumulators with no exchange between threads
// (sm90_fp8.cuh); they zero the keys past the sequence or the tile as they
// go, then complete the stage's full barrier. q and k's descales fold
// into the softmax scale, v's into the row's output scale.
#pragma once

#include "templates/flash_fwd_params.h"
#include "templates/flash_fwd_sm90_registers.h"
#include "templates/primitives/hopper.h"
#include "templates/sm90_fp8.cuh"
#include "templates/sm90_pipeline.cuh"
#include "templates/sm90_scheduler.cuh"
#include "templates/sm90_smem.h"
#include "templates/sm90_varlen_tiles.cuh"
#include "templates/tunable.cuh"

namespace attune {

struct FlashFwdSm90Params {
  TensorMap q_map;  // (Dk, rows, Hq, B): box {64, kBlockM}
  TensorMap k_map;  // (Dk, keys, Hkv, B): box {64, kBlockN}
  TensorMap v_map;  // (Dv, keys, Hkv, B): box {64, kBlockN}
  TensorMap o_map;  // (Dv, rows, Hq, B): box {64, 64}; with kTmaStore, where o_map_valid
  // Pointers, strides, sizes, mask and scale as flash_fwd takes them (the
  // direct O stores, LSE and the sequence arrays read them).
  FlashFwdBase fwd;
  i32 o_map_valid;  // 0: O's layout or address is not TMA's (O then leaves by direct stores)
  // The tiles and their order (sm90_scheduler.cuh), and the dynamic
  // scheduler's counter (one i32, zero at launch; null for the others).
  sm90_sched::TileOrder tiles;
  i32* tile_counter;
  // The schedule tunables, read by the emulator's one instantiation per
  // (head dim, key tile, dtype); variants compiled by NVRTC use constants.
  i32 block_m ATTUNE_TUNABLE_OF(flash_fwd_sm90, kBlockM);
  i32 stages ATTUNE_TUNABLE_OF(flash_fwd_sm90, kStages);
  i32 pingpong ATTUNE_TUNABLE_OF(flash_fwd_sm90, kPingpong);
  i32 overlap ATTUNE_TUNABLE_OF(flash_fwd_sm90, kOverlap);
  i32 rescale_after ATTUNE_TUNABLE_OF(flash_fwd_sm90, kRescaleAfter);
  i32 tma_store ATTUNE_TUNABLE_OF(flash_fwd_sm90, kTmaStore);
  i32 scheduler ATTUNE_TUNABLE_OF(flash_fwd_sm90, kScheduler);
  // Added at the end, so variants without it keep their code.
  DropoutParams dropout;  // read only by variants with kDropout
  Fp8Inputs fp8;          // read only by variants with kFp8: e4m3 Q, K and V, and their descales
  // kVarlen: the numbers sm90_varlen_tiles wrote for this call (workspace).
  sm90_sched::VarlenTiles varlen;
  // kCluster: 1 when the call pairs m-blocks across each 2 x 1 cluster
  // (`tiles` then counts pairs, and K's and V's boxes are half a key tile).
  i32 cluster_pairs;
};

struct FlashFwdSm90Tunables {
  static constexpr int kHeadDim[] = {64, 128, 256};     // Dk and Dv padded up to it (whole 64-column boxes)
  static constexpr int kBlockM[] = {64, 128, 192};      // query rows: 64 per consumer warpgroup
  static constexpr int kBlockN[] = {64, 80, 128, 176};  // keys per tile (FlashAttention-3: 176 at d128, 80 at d256)
  static constexpr int kStages[] = {2, 3};              // K/V ring depth
  static constexpr int kPingpong[] = {0, 1};            // two consumers alternate their GEMMs
  static constexpr int kOverlap[] = {0, 1};             // S GEMM of tile n issued before P V of tile n-1
  static constexpr int kRescaleAfter[] = {0, 1};        // O rescaled after the P V wait (with kOverlap)
  static constexpr int kTmaStore[] = {0, 1};            // O through shared memory and a TMA store
  // Tiles: one CTA each, static persistent, dynamic, varlen, static over 2 x 1 clusters with K/V multicast.
  static constexpr int kScheduler[] = {0, 1, 2, 3, 4};
  static constexpr const char* kIdKeys[] = {"d", "bm", "bn", "st", "pp", "ov", "ra", "ts", "sc"};
  static constexpr const char* kArchs[] = {"sm_90a"};  // wgmma and setmaxnreg exist on sm_90a only
  // Read from the params by the emulator's instantiation (one per head dim,
  // key tile and dtype): they shape no array.
  static constexpr const char* kEmulatedAtRunTime[] = {"kBlockM",       "kStages",   "kPingpong", "kOverlap",
                                                       "kRescaleAfter", "kTmaStore", "kScheduler"};

  static constexpr int kSharedAlign = 1024;  // the barriers, then every buffer on a 128-byte-swizzle atom
  // Registers per thread after setmaxnreg (FlashAttention-3's split of the
  // 64K-register file): the producer keeps the minimum that its loop needs.
  ATTUNE_HOST_DEVICE static constexpr int consumer_registers(int consumers) { return consumers == 3 ? 160 : 240; }
  ATTUNE_HOST_DEVICE static constexpr int producer_registers(int consumers) { return consumers == 3 ? 32 : 24; }
  // kFp8 with two consumers: the producer's transpose keeps 32, which
  // 240 per consumer thread still leaves (128 x 32 + 256 x 240 = 64K).
  static constexpr int kFp8ProducerRegisters = 32;
  // Whether the consumers of a variant fit their registers, from
  // measurements (flash_fwd_sm90_registers.h, tools/sm90_registers.py):
  // ptxas compiles the code after `setmaxnreg.inc` for the raised budget
  // (`ptxas -v` prints only the entry's), so the SASS audit of the
  // consumers' region decides. One consumer moves no registers: the
  // launch bound's 255. The stages, pingpong, rescale and store tunables
  // share their measurement (the NVRTC covering set checks them).
  // kMeasuring lifts the table, to measure past it.
  static constexpr bool kMeasuring = false;
  ATTUNE_HOST_DEVICE static constexpr int register_budget(int consumers) {
    return consumers == 1 ? 255 : consumer_registers(consumers);
  }
  ATTUNE_HOST_DEVICE static constexpr bool registers_fit(int head_dim, int block_n, int overlap, int consumers) {
    for (const Sm90RegisterMeasurement& m : kSm90Registers) {
      if (m.head_dim == head_dim && m.consumers == consumers && m.block_n == block_n && m.overlap == overlap) {
        return m.spills == 0 && m.highest_register + 1 <= register_budget(consumers);
      }
    }
    return kMeasuring;  // not measured: not in the space
  }

  ATTUNE_HOST_DEVICE static constexpr int threads(int /*head_dim*/, int block_m, int /*block_n*/, int /*stages*/,
                                                  int /*pingpong*/, int /*overlap*/, int /*rescale_after*/,
                                                  int /*tma_store*/, int /*scheduler*/) {
    return 128 * (1 + block_m / 64);
  }
  ATTUNE_HOST_DEVICE static constexpr int shared_bytes(int head_dim, int block_m, int block_n, int stages,
                                                       int /*pingpong*/, int /*overlap*/, int /*rescale_after*/,
                                                       int /*tma_store*/, int /*scheduler*/) {
    // Barriers; Q (its rows then hold O for the TMA store); the K and V ring.
    return kSharedAlign + 2 * block_m * head_dim + stages * 2 * (2 * block_n * head_dim);
  }
  ATTUNE_HOST_DEVICE static constexpr bool valid(int head_dim, int block_m, int block_n, int stages, int pingpong,
                                                 int overlap, int rescale_after, int tma_store, int scheduler) {
    const int consumers = block_m / 64;
    return head_dim % 64 == 0 && block_m % 64 == 0 && consumers >= 1 && consumers <= 3 && block_n % 16 == 0 &&
           block_n >= 16 && block_n <= 256 && stages >= 2 && stages <= 3 && (pingpong == 0 || consumers == 2) &&
           (overlap == 0 || overlap == 1) && (rescale_after == 0 || overlap == 1) &&
           (tma_store == 0 || tma_store == 1) && (consumers < 3 || block_n <= 128) &&
           (tma_store == 0 || head_dim < 256 || consumers > 1) && scheduler >= 0 && scheduler <= 4 &&
           // Measured: the d256 cluster variant spills once per tile (its
           // consumers hold 232 of 240 registers), out until it does not.
           (scheduler != 4 || head_dim < 256) && (kMeasuring || registers_fit(head_dim, block_n, overlap, consumers));
  }
};

namespace sm90_detail {

using namespace sm90_smem;  // kBoxCols, kRowBytes, kSwizzle, kAtomStride

// The shared-memory layout of a variant: every buffer a sequence of D/64
// boxes of [rows x 128 bytes], each on a swizzle atom.
struct Layout {
  i32 head_dim;
  i32 block_m;
  i32 block_n;
  i32 stages;
  ATTUNE_DEVICE i32 chunks() const { return head_dim / 64; }
  ATTUNE_DEVICE i32 q_offset() const { return FlashFwdSm90Tunables::kSharedAlign; }
  ATTUNE_DEVICE i32 q_bytes() const { return 2 * block_m * head_dim; }
  ATTUNE_DEVICE i32 tile_bytes() const { return 2 * block_n * head_dim; }  // one K or V tile
  ATTUNE_DEVICE i32 k_offset(i32 stage) const { return q_offset() + q_bytes() + stage * 2 * tile_bytes(); }
  ATTUNE_DEVICE i32 v_offset(i32 stage) const { return k_offset(stage) + tile_bytes(); }
  // kFp8, in the same stage bytes: K (block_n x D bytes), then V as TMA
  // lands it (the same), then at v_offset the transposed V, D rows of
  // 128 key slots per 128 keys (at most 2 block_n x D bytes for any
  // block_n >= 64). Q fills the first half of its buffer.
  ATTUNE_DEVICE i32 fp8_tile_bytes() const { return block_n * head_dim; }
  ATTUNE_DEVICE i32 fp8_v_landing(i32 stage) const { return k_offset(stage) + fp8_tile_bytes(); }
};

// The block's mbarriers, at the start of shared memory (kSharedAlign bytes).
struct Barriers {
  u64 full[3];  // the K/V ring's (up to three stages)
  u64 empty[3];
  u64 q_full;   // a tile's Q landed (one arrival per tile, with Q's bytes when it has keys)
  u64 q_empty;  // every consumer thread is done with Q's rows and the O staged in them
  u64 v_fixed;  // the producer's own wait on a V tile it must zero rows of
  i32 tile;     // kDynamic: the tile the producer claimed, written before q_full's arrival; -1: none left
  // kFp8: a stage's V landed (its TMA bytes and the producer leader's
  // arrival), and how many of its keys the transpose keeps (written
  // before that arrival; the rest become zeros; -1: no tile follows).
  u64 v_landed[3];
  i32 v_keys[3];
  sm90_sched::WorkTile work;  // kVarlen: the claimed tile's numbers, written with `tile`
};

// kFp8: the producer's warps 1..3 transpose V (kTransposeThreads threads).
inline constexpr i32 kTransposeThreads = 96;
// 128 key slots per transposed row: one 128-byte row per head-dim column.
inline constexpr i32 kFp8BoxCols = 128;
ATTUNE_HOST_DEVICE constexpr i32 fp8_p_steps(i32 block_n) { return (block_n + 31) / 32; }

// The keys of a slot quad (4 slots from a multiple of 4) after its first:
// p_key(c + h) - p_key(c) for h = 0..3.
inline constexpr i32 kQuadKeys[4] = {0, 1, 8, 9};
ATTUNE_HOST_DEVICE constexpr bool quad_keys_hold() {
  for (i32 c = 0; c < 32; c += 4) {
    for (i32 h = 0; h < 4; ++h) {
      if (sm90_fp8::p_key(c + h) - sm90_fp8::p_key(c) != kQuadKeys[h]) return false;
    }
  }
  return true;
}
static_assert(quad_keys_hold(), "kQuadKeys: the slot quads of sm90_fp8::p_key");

// One stage's V from the landed key-major tile (rows of keys, boxes of
// 128 head-dim columns) into the K-major tile the P V wgmma reads: slot c
// of 32-key step j holds key 32 j + p_key(c), keys at or past `keys` (and
// the slots past the tile) hold zeros. Thread `tt` of kTransposeThreads
// owns one slot quad, keys k, k + 1, k + 8, k + 9 (k even), and walks its
// head-dim quads: four words, one per key, become the slot quad's word in
// four rows of V^T (eight PRMT). Consecutive threads write consecutive
// words of one row. (128-byte swizzle: in a 1024-byte atom, the 16-byte
// chunk index is XORed with the row's index in the atom; rows k and k + 8
// share theirs, k + 1's flips bit 4.)
template <int kHeadDim, int kBlockN>
ATTUNE_DEVICE void transpose_v_fp8(const unsigned char* landed, unsigned char* vt, i32 keys, i32 tt) {
  constexpr i32 kQuads = kFp8BoxCols / 4;                  // head-dim quads per key and box
  constexpr i32 kSlotWords = fp8_p_steps(kBlockN) * 8;     // slot quads per row of V^T
  constexpr i32 kGroups = kTransposeThreads / kSlotWords;  // threads per slot quad, taking its head-dim quads in turn
  static_assert(kGroups >= 1, "transpose_v_fp8: more slot quads than transposing threads");
  if (tt >= kGroups * kSlotWords) return;
  const i32 slot = 4 * (tt % kSlotWords);
  const i32 key = 32 * (slot / 32) + sm90_fp8::p_key(slot % 32);
  const bool kept[4] = {key + kQuadKeys[0] < keys, key + kQuadKeys[1] < keys, key + kQuadKeys[2] < keys,
                        key + kQuadKeys[3] < keys};
  const unsigned char* rows = landed + key * kRowBytes;
  const u32 rows_swizzle = static_cast<u32>(key % 8) << 4;
  unsigned char* column = vt + (slot / kFp8BoxCols) * kHeadDim * kRowBytes;
  const u32 slot_byte = static_cast<u32>(slot % kFp8BoxCols);
  ATTUNE_UNROLL
  for (i32 box = 0; box < kHeadDim / kFp8BoxCols; ++box) {
    ATTUNE_ROLLED  // one quad at a time: the producer's 32 registers
        for (i32 quad = tt / kSlotWords; quad < kQuads; quad += kGroups) {
      const u32 col_byte = static_cast<u32>(4 * quad);
      const unsigned char* even = rows + box * kBlockN * kRowBytes + (col_byte ^ rows_swizzle);       // keys k, k + 8
      const unsigned char* odd = rows + box * kBlockN * kRowBytes + (col_byte ^ rows_swizzle ^ 16U);  // k + 1, k + 9
      const u32 x[4] = {kept[0] ? dev::load_shared(dev::shared_as<const u32>(even)) : 0U,
                        kept[1] ? dev::load_shared(dev::shared_as<const u32>(odd + kRowBytes)) : 0U,
                        kept[2] ? dev::load_shared(dev::shared_as<const u32>(even + 8 * kRowBytes)) : 0U,
                        kept[3] ? dev::load_shared(dev::shared_as<const u32>(odd + 9 * kRowBytes)) : 0U};
      // y[r] = byte r of x[0], x[1], x[2], x[3]: pairs first, then the halves.
      const u32 lo01 = dev::byte_perm<0x5140U>(x[0], x[1]);  // x0.0 x1.0 x0.1 x1.1
      const u32 hi01 = dev::byte_perm<0x7362U>(x[0], x[1]);  // x0.2 x1.2 x0.3 x1.3
      const u32 lo23 = dev::byte_perm<0x5140U>(x[2], x[3]);
      const u32 hi23 = dev::byte_perm<0x7362U>(x[2], x[3]);
      const u32 y[4] = {dev::byte_perm<0x5410U>(lo01, lo23), dev::byte_perm<0x7632U>(lo01, lo23),
                        dev::byte_perm<0x5410U>(hi01, hi23), dev::byte_perm<0x7632U>(hi01, hi23)};
      // Rows n .. n + 3 of V^T (n = 128 box + col_byte, a multiple of 4): atom rows (n & 4) + r.
      unsigned char* out = column + (box * kFp8BoxCols + static_cast<i32>(col_byte)) * kRowBytes;
      const u32 swizzled = slot_byte ^ ((col_byte & 4U) << 4);
      ATTUNE_UNROLL
      for (i32 r = 0; r < 4; ++r) {
        u32* word = dev::shared_as<u32>(out + r * kRowBytes + (swizzled ^ (static_cast<u32>(r) << 4)));
        dev::store_shared(word, y[r]);  // producer: V^T
      }
    }
  }
}

// What a CTA needs to know of its tile, producer and consumers alike.
struct TileWork {
  i32 head;
  i32 batch;
  i32 kv_head;
  Sequence seq;
  i32 map_batch;    // Q's and O's batch coordinate: packed tensors are one sequence of batch 1
  i32 k_map_batch;  // K's and V's: packed keys follow the sequence's offset
  i64 row0;         // first query row, in the sequence
  i64 n_begin;      // first key tile any row of the block sees
  i32 tiles;        // key tiles the block runs; 0: no row, or no key visible

  template <int kBlockN>
  ATTUNE_DEVICE static TileWork of(const FlashFwdBase& f, const sm90_sched::WorkTile& w, i32 block_m) {
    TileWork t;
    t.head = w.head;
    t.batch = w.batch;
    t.kv_head = w.head / f.group_size;
    t.seq = sequence_of({f.cu_seqlens_q, f.cu_seqlens_k, f.seqlens_k, f.seqlen_q, f.seqlen_k}, w.batch);
    t.map_batch = f.cu_seqlens_q != nullptr ? 0 : w.batch;
    t.k_map_batch = f.cu_seqlens_k != nullptr ? 0 : w.batch;
    t.row0 = static_cast<i64>(w.m_block) * block_m;
    t.n_begin = 0;
    t.tiles = 0;
    if (t.row0 < t.seq.q_len) {
      const RowBlockKeys keys =
          row_block_keys(f.mask, t.row0, last_row_of(t.row0, block_m, t.seq.q_len), t.seq.q_len, t.seq.k_len);
      t.n_begin = keys.tile_begin<kBlockN>();
      t.tiles = static_cast<i32>(keys.tile_end<kBlockN>() - t.n_begin);
    }
    return t;
  }
};

}  // namespace sm90_detail

// Grid: TileOrder::count() CTAs (kGrid), or at most one per SM (kStatic,
// kDynamic), the tiles as sm90_scheduler.cuh orders them; block: threads();
// dynamic shared memory: shared_bytes(). In the emulator's instantiation
// every tunable but kHeadDim and kBlockN may be kAtRunTime, read from the
// params.
template <int kHeadDim, int kBlockM, int kBlockN, int kStages, int kPingpong, int kOverlap, int kRescaleAfter,
          int kTmaStore, int kScheduler, class DType, int kDropout = 0, int kFp8 = 0>
ATTUNE_KERNEL void ATTUNE_LAUNCH_BOUNDS(128 * (1 + kBlockM / 64), 1)
    flash_fwd_sm90(const ATTUNE_GRID_CONSTANT FlashFwdSm90Params p) {
  using namespace sm90_detail;
  // One consumer warpgroup as flash_fwd's tile code sees it: four warps of
  // 16 rows, each over the whole key tile.
  using Config = TileConfig<kHeadDim, 64, kBlockN, 4, 1, 2, DType>;
  using Softmax = typename Config::Softmax;
  using Mods = ScoreMods<0, 0, 0, kDropout>;  // dropout, a feature the problem chooses (score_mods.cuh)
  // A GPU variant is checked here; the emulator's instance (tunables at run
  // time) by the launch, like every call.
  static_assert(!kAllFixed<kBlockM, kStages, kPingpong, kOverlap, kRescaleAfter, kTmaStore, kScheduler> ||
                    FlashFwdSm90Tunables::valid(kHeadDim, kBlockM, kBlockN, kStages, kPingpong, kOverlap, kRescaleAfter,
                                                kTmaStore, kScheduler),
                "flash_fwd_sm90: these tunables break FlashFwdSm90Tunables::valid");
  constexpr i32 kChunks = kHeadDim / kBoxCols;
  constexpr i32 kKSteps = kHeadDim / 16;  // S GEMM: 16 head-dim columns per wgmma
  constexpr i32 kPSteps = kBlockN / 16;   // P V GEMM: 16 keys per wgmma
  // kFp8 (1, or -1: the emulator's, from the params) needs whole 128-byte
  // rows of e4m3 head-dim columns: head dims of 128 and 256.
  static_assert(kFp8 != 1 || kHeadDim % kFp8BoxCols == 0, "flash_fwd_sm90: fp8 needs a head dim of 128 or 256");
  constexpr bool kMayFp8 = kFp8 != 0 && kHeadDim % kFp8BoxCols == 0;
  constexpr i32 kFp8Chunks = kHeadDim / kFp8BoxCols;
  constexpr i32 kFp8KSteps = kHeadDim / 32;         // S GEMM: 32 head-dim columns per 8-bit wgmma
  constexpr i32 kFp8PSteps = fp8_p_steps(kBlockN);  // P V GEMM: 32 keys per 8-bit wgmma
  const bool fp8 = kMayFp8 && (kFp8 == 1 || p.fp8.q_format == kStoredE4M3);
  const i32 block_m = Tunable<kBlockM>(p.block_m).value();
  const i32 stages = Tunable<kStages>(p.stages).value();
  const bool pingpong = Tunable<kPingpong>(p.pingpong).on();
  const bool overlap = Tunable<kOverlap>(p.overlap).on();
  const bool rescale_after = Tunable<kRescaleAfter>(p.rescale_after).on();
  const bool tma_store = Tunable<kTmaStore>(p.tma_store).on();
  const i32 scheduler = Tunable<kScheduler>(p.scheduler).value();
  // kVarlen claims and hands over tiles as kDynamic does, numbered by
  // sm90_varlen_tiles.
  const bool varlen = scheduler == sm90_sched::kVarlen;
  const bool dynamic = scheduler == sm90_sched::kDynamic || varlen;
  // kCluster: launched in 2 x 1 clusters; `paired()` when the call gives each
  // cluster pairs of m-blocks, else each block runs alone, as kStatic.
  const bool clustered = scheduler == sm90_sched::kCluster;
  // (A function of the params, read where needed: nothing held for it.)
  const auto paired = [&] { return clustered && p.cluster_pairs != 0; };
  const i32 consumers = block_m / 64;
  const sm90_detail::Layout layout{kHeadDim, block_m, kBlockN, stages};
  const FlashFwdBase& f = p.fwd;
  const sm90_sched::TileOrder order = p.tiles;
  const i32 tile_count = order.count();
  const i32 ctas = dev::grid_dim().x;

  unsigned char* smem = dev::shared_memory<unsigned char>();
  Barriers* bars = dev::shared_memory<Barriers>();
  // Blocks that read each stage: paired, both of the cluster.
  const sm90_sync::KvRing ring{bars->full, bars->empty, stages, clustered, paired() ? sm90_sched::kClusterBlocks : 1};
  u64* q_full = &bars->q_full;
  u64* q_empty = &bars->q_empty;
  u64* v_fixed = &bars->v_fixed;
  unsigned char* q_s = smem + layout.q_offset();
  const i32 t = dev::linear_thread();
  if (t == 0) {
    ring.init(consumers);
    dev::mbarrier::init(q_full, 1);
    dev::mbarrier::init(q_empty, 128 * consumers);
    dev::mbarrier::init(v_fixed, 1);
    if (fp8) {
      for (i32 st = 0; st < stages; ++st) dev::mbarrier::init(&bars->v_landed[st], 1);
    }
    dev::mbarrier::fence_init();
  }
  if (clustered) {
    dev::cluster::sync();  // the barriers' init before a peer's multicast or release reaches them
  } else {
    dev::block::sync();
  }
  // The first tile of this CTA, the CTAs (or paired clusters) that share
  // out the tiles, and tile `index` (a paired cluster's tile is a pair of
  // m-blocks: this block runs the one of its rank). Recomputed where
  // needed, so nothing crosses the role branch.
  const auto first_tile = [&] {
    return paired() ? dev::block_index().x / sm90_sched::kClusterBlocks : dev::block_index().x;
  };
  const auto sharing = [&] { return paired() ? ctas / sm90_sched::kClusterBlocks : ctas; };
  const auto static_tile = [&](i32 index) {
    sm90_sched::WorkTile at = order.at(index);
    if (paired()) at.m_block = at.m_block * sm90_sched::kClusterBlocks + dev::cluster::rank();
    return at;
  };
  // Unpaired, a grid of whole clusters may leave a block no tile: it has
  // nothing to wait for (its peer runs alone too).
  if (clustered && first_tile() >= tile_count) return;

  const i32 wg = dev::warpgroup::index();
  if (wg == 0) {  // ---- producer ----
    // With one consumer the block's 256 threads already have 255 registers
    // each: nothing to move.
    if (consumers == 3) {
      dev::registers::decrease<FlashFwdSm90Tunables::producer_registers(3)>();
    } else if (consumers == 2) {
      if (fp8) {
        dev::registers::decrease<FlashFwdSm90Tunables::kFp8ProducerRegisters>();
      } else {
        dev::registers::decrease<FlashFwdSm90Tunables::producer_registers(2)>();
      }
    }
    if (dev::warp_id() != 0) {
      if (!fp8) return;
      // kFp8: warps 1..3 transpose each stage's V as it lands, in ring
      // order, until the leader's -1.
      const i32 tt = dev::linear_thread() - kWarpSize;
      for (i32 it = 0;; ++it) {
        const i32 st = ring.stage(it);
        dev::mbarrier::wait(&bars->v_landed[st], ring.lap(it) & 1);  // transposer: wait V landed
        const i32 keys = dev::load_shared(&bars->v_keys[st]);
        if (keys < 0) break;
        transpose_v_fp8<kHeadDim, kBlockN>(smem + layout.fp8_v_landing(st), smem + layout.v_offset(st), keys, tt);
        dev::fence_proxy_async();  // V^T before wgmma reads it, the landed V read before TMA writes it again
        dev::named_barrier::sync(sm90_sync::kTranspose, kTransposeThreads);
        if (tt == 0) dev::mbarrier::arrive(ring.full_barrier(it));  // transposer: V^T ready
      }
      return;
    }
    const bool leader = dev::elect_one();
    if (leader) {
      dev::tma::prefetch(&p.q_map);
      if (f.seqlen_k > 0) {  // else no key map was made
        dev::tma::prefetch(&p.k_map);
        dev::tma::prefetch(&p.v_map);
      }
    }
    i32 kv_base = 0;  // key tiles through the ring before this tile's
    i32 fixes = 0;    // V tiles zeroed so far (v_fixed's phases)
    i32 round = 0;
    const i32 tiles_total = varlen ? dev::load_global(p.varlen.tile_start + order.batches) : tile_count;
    for (i32 index = first_tile(); index < tiles_total; ++round) {
      const sm90_sched::WorkTile at =
          varlen ? sm90_sched::varlen_tile(p.varlen, order.heads, index) : static_tile(index);
      const TileWork w = TileWork::of<kBlockN>(f, at, block_m);
      // Q's rows hold the previous tile's Q and staged O until every
      // consumer thread is done with them.
      if (round > 0) dev::mbarrier::wait(q_empty, (round - 1) & 1);  // producer: wait Q rows free
      // kDynamic: the tile reaches the consumers with Q's arrival, so the
      // thread that arrives writes it.
      if (dynamic && leader) dev::store_shared(&bars->tile, index);  // producer: hand the tile over
      // kVarlen: the tile's numbers travel the same way, one word each.
      if (varlen && leader) {
        dev::store_shared(&bars->work.m_block, at.m_block);
        dev::store_shared(&bars->work.head, at.head);
        dev::store_shared(&bars->work.batch, at.batch);
      }
      if (leader) {
        if (w.tiles > 0 && fp8) {
          dev::mbarrier::arrive_expect_tx(q_full, static_cast<u32>(block_m * kHeadDim));
          for (i32 c = 0; c < kFp8Chunks; ++c) {
            dev::tma::load(q_s + c * block_m * kRowBytes, &p.q_map, q_full, c * kFp8BoxCols,
                           static_cast<i32>(w.seq.q_begin + w.row0), w.head, w.map_batch);  // producer: load Q
          }
        } else if (w.tiles > 0) {
          dev::mbarrier::arrive_expect_tx(q_full, static_cast<u32>(layout.q_bytes()));
          for (i32 c = 0; c < kChunks; ++c) {
            dev::tma::load(q_s + c * block_m * kRowBytes, &p.q_map, q_full, c * kBoxCols,
                           static_cast<i32>(w.seq.q_begin + w.row0), w.head, w.map_batch);  // producer: load Q
          }
        } else {
          dev::mbarrier::arrive(q_full);  // no key: the consumers write zeros, or nothing
        }
      }
      for (i32 i = 0; i < w.tiles; ++i) {
        const i32 it = kv_base + i;
        const i32 s = ring.stage(it);
        const i64 key0 = (w.n_begin + i) * kBlockN;
        const i32 key_row = static_cast<i32>(w.seq.k_begin + key0);
        unsigned char* k_tile = smem + layout.k_offset(s);
        unsigned char* v_tile = smem + layout.v_offset(s);
        // Keys past the sequence but inside the tensor hold another
        // sequence's keys or padding: masked out of S, but V's rows there
        // must read as zero (0 * NaN would reach O).
        const bool zero_v = key0 + kBlockN > w.seq.k_len && (f.cu_seqlens_k != nullptr || w.seq.k_len < f.seqlen_k);
        ring.producer_acquire(it);
        u64* full = ring.full_barrier(it);
        if (fp8) {
          // K completes `full` with the transposers' arrival; V lands on
          // v_landed, with the keys the transpose keeps.
          if (leader) {
            dev::store_shared(&bars->v_keys[s], zero_v ? static_cast<i32>(w.seq.k_len - key0) : kBlockN);
            dev::mbarrier::expect_tx(full, static_cast<u32>(layout.fp8_tile_bytes()));
            for (i32 c = 0; c < kFp8Chunks; ++c) {
              dev::tma::load(k_tile + c * kBlockN * kRowBytes, &p.k_map, full, c * kFp8BoxCols, key_row, w.kv_head,
                             w.k_map_batch);  // producer: load K
            }
            unsigned char* landing = smem + layout.fp8_v_landing(s);
            dev::mbarrier::arrive_expect_tx(&bars->v_landed[s], static_cast<u32>(layout.fp8_tile_bytes()));
            for (i32 c = 0; c < kFp8Chunks; ++c) {
              dev::tma::load(landing + c * kBlockN * kRowBytes, &p.v_map, &bars->v_landed[s], c * kFp8BoxCols, key_row,
                             w.kv_head, w.k_map_batch);  // producer: load V
            }
          }
          continue;
        }
        if (paired()) {
          // Half of the tile's keys from each block of the pair, into both
          // (every key is in the tensor: the call has fixed lengths); each
          // block's full barrier expects the whole tile.
          if (leader) {
            constexpr i32 kHalf = kBlockN / sm90_sched::kClusterBlocks;
            static_assert(kHalf % 8 == 0, "flash_fwd_sm90: a half key tile is whole swizzle atoms");
            const i32 half = dev::cluster::rank() * kHalf;
            const u32 both = (1U << sm90_sched::kClusterBlocks) - 1;
            dev::mbarrier::arrive_expect_tx(full, static_cast<u32>(2 * layout.tile_bytes()));
            for (i32 c = 0; c < kChunks; ++c) {
              dev::tma::load_multicast(k_tile + (c * kBlockN + half) * kRowBytes, &p.k_map, full, both, c * kBoxCols,
                                       key_row + half, w.kv_head, w.k_map_batch);  // producer: multicast K
            }
            for (i32 c = 0; c < kChunks; ++c) {
              dev::tma::load_multicast(v_tile + (c * kBlockN + half) * kRowBytes, &p.v_map, full, both, c * kBoxCols,
                                       key_row + half, w.kv_head, w.k_map_batch);  // producer: multicast V
            }
          }
          continue;
        }
        if (leader) {
          if (!zero_v) {
            dev::mbarrier::arrive_expect_tx(full, static_cast<u32>(2 * layout.tile_bytes()));
          } else {
            dev::mbarrier::expect_tx(full, static_cast<u32>(layout.tile_bytes()));  // K only; V arrives below
          }
          for (i32 c = 0; c < kChunks; ++c) {
            dev::tma::load(k_tile + c * kBlockN * kRowBytes, &p.k_map, full, c * kBoxCols, key_row, w.kv_head,
                           w.k_map_batch);  // producer: load K
          }
          u64* v_bar = zero_v ? v_fixed : full;
          if (zero_v) dev::mbarrier::arrive_expect_tx(v_fixed, static_cast<u32>(layout.tile_bytes()));
          for (i32 c = 0; c < kChunks; ++c) {
            dev::tma::load(v_tile + c * kBlockN * kRowBytes, &p.v_map, v_bar, c * kBoxCols, key_row, w.kv_head,
                           w.k_map_batch);  // producer: load V
          }
        }
        if (zero_v) {  // at most one tile per block: its last
          dev::mbarrier::wait(v_fixed, fixes & 1);
          ++fixes;
          const i32 valid = static_cast<i32>(w.seq.k_len - key0);
          const i32 words = (kBlockN - valid) * kRowBytes / 4;  // whole rows of every box
          for (i32 c = 0; c < kChunks; ++c) {
            u32* rows = dev::shared_as<u32>(v_tile + c * kBlockN * kRowBytes + valid * kRowBytes);
            for (i32 wd = dev::lane_id(); wd < words; wd += kWarpSize) dev::store_shared(rows + wd, 0U);
          }
          dev::fence_proxy_async();                                       // the zeros before wgmma reads them
          dev::named_barrier::sync(sm90_sync::kProducerWarp, kWarpSize);  // every lane's zeros
          if (leader) dev::mbarrier::arrive(full);                        // producer: V fixed
        }
      }
      kv_base += w.tiles;
      if (dynamic) {
        i32 next = 0;
        if (dev::lane_id() == 0) next = dev::atomic_fetch_add(p.tile_counter, 1) + ctas;  // producer: claim a tile
        index = dev::warp::shfl_idx(next, 0);
      } else {
        index = sm90_sched::next_static(scheduler, index, sharing(), tile_count);
      }
    }
    if (dynamic) {  // the consumers' last wait: no tile left
      if (round > 0) dev::mbarrier::wait(q_empty, (round - 1) & 1);
      if (leader) {
        dev::store_shared(&bars->tile, -1);
        dev::mbarrier::arrive(q_full);
      }
    }
    if (fp8) {  // the transposers' last wait: the next stage, once free, says no tile follows
      ring.producer_acquire(kv_base);
      if (leader) {
        dev::store_shared(&bars->v_keys[ring.stage(kv_base)], -1);
        dev::mbarrier::arrive(&bars->v_landed[ring.stage(kv_base)]);
      }
    }
    // Paired: the peer's consumers release this block's stages, so the
    // block stays until their last releases have arrived (the stages'
    // last phases); the peer's multicasts into it, its own consumers wait
    // for. (CUTLASS's producer tail; no cluster barrier at the end.)
    if (paired()) {
      for (i32 s = 0; s < stages; ++s) ring.producer_acquire(kv_base + s);  // producer: tail
    }
    return;
  }

  // ---- consumers ----
  if (consumers == 3) {
    dev::registers::increase<FlashFwdSm90Tunables::consumer_registers(3)>();
  } else if (consumers == 2) {
    dev::registers::increase<FlashFwdSm90Tunables::consumer_registers(2)>();
  }
  const i32 consumer = wg - 1;
  const i32 wt = dev::warpgroup::thread();
  const i32 lane = dev::lane_id();
  i32 kv_base = 0;  // key tiles through the ring before this tile's
  i32 index = first_tile();
  for (i32 round = 0;; ++round) {
    dev::mbarrier::wait(q_full, round & 1);  // consumer: wait Q (and the tile)
    if (dynamic) {
      index = dev::load_shared(&bars->tile);  // consumer: take the tile
      if (index < 0) break;
    }
    // The tile's numbers, recomputed from `index` where they are needed
    // again (behind an opaque value, so none is held through the loops):
    // only index, round and kv_base live from one tile to the next.
    const auto work = [&] {
      sm90_sched::WorkTile at;
      if (varlen) {
        at = {dev::load_shared(&bars->work.m_block), dev::load_shared(&bars->work.head),
              dev::load_shared(&bars->work.batch)};
      } else {
        at = static_tile(index + dev::opaque(0));
      }
      return TileWork::of<kBlockN>(f, at, block_m);
    };
    const TileWork w = work();
    const i32 tiles = w.tiles;
    if (w.row0 < w.seq.q_len) {
      const Sequence& seq = w.seq;
      // Dropout: the tile's random stream, keyed by global positions.
      const BlockDropout drop = block_dropout<Mods>(p.dropout, w.batch, w.head, f.heads_q);
      // The tiles this consumer's rows all see, [free_begin, free_end) of the
      // block's, need no mask: the steady-state loop runs over them alone.
      const i64 first_row = w.row0 + 64 * consumer;
      const RowBlockKeys keys = row_block_keys(f.mask, first_row < seq.q_len ? first_row : seq.q_len - 1,
                                               last_row_of(first_row, 64, seq.q_len), seq.q_len, seq.k_len);
      const i64 free_from = keys.free_tile_begin<kBlockN>() - w.n_begin;
      const i64 free_to = keys.free_tile_end<kBlockN>() - w.n_begin;
      const i32 free_begin = static_cast<i32>(free_from < 0 ? 0 : free_from > tiles ? tiles : free_from);
      const i32 free_end = static_cast<i32>(free_to < free_begin ? free_begin : free_to > tiles ? tiles : free_to);

      Softmax softmax;
      softmax.init();
      typename Config::Scores s;  // S, as the softmax and the S GEMM's accumulators hold it
      u32 pa[kPSteps][4];         // P, the A operand of the P V GEMM
      u32 pa8[kFp8PSteps][4];     // kFp8: P in e4m3, 32 keys a step in p_key's order
      // kFp8: q and k's descales in the scores' scale, v's in O's.
      const float fp8_scale_log2 = fp8 ? f.scale_log2 * p.fp8.score_factor(w.batch, w.kv_head) : 0.0f;
      // With the overlap, tile i's factor is applied to O before P V of tile i
      // is issued: inside the next issue turn (behind the S GEMM), or at once
      // after the wait for the previous P V (kRescaleAfter).
      DeferredRescale<1, kHeadDim / 8> rescale{overlap && !rescale_after, {}};

      // Pingpong: a consumer issues its GEMMs in its turns (one per GEMM issue
      // point: both GEMMs of a tile in one with the overlap, else one each).
      sm90_sync::PingpongTurns turns(pingpong, consumer, tiles > 0 ? (overlap ? tiles + 1 : 2 * tiles) : 0);
      // Key tiles are named by their ring index `it` (kv_base + the tile's
      // index in the block), so the free loop adds nothing to find a stage.
      const auto issue_s_fp8 = [&](i32 it) {
        const u64 q_desc = dev::wgmma::descriptor(q_s + 64 * consumer * kRowBytes, 16, kAtomStride, kSwizzle);
        const u64 k_desc = dev::wgmma::descriptor(smem + layout.k_offset(ring.stage(it)), 16, kAtomStride, kSwizzle);
        dev::wgmma::fence();
        ATTUNE_UNROLL
        for (i32 kk = 0; kk < kFp8KSteps; ++kk) {
          const i32 box = kk / 4;
          const i32 col_bytes = (kk % 4) * 32;
          const u64 desc_q = dev::wgmma::advance(q_desc, static_cast<u32>(box * block_m * kRowBytes + col_bytes));
          const u64 desc_k = dev::wgmma::advance(k_desc, static_cast<u32>(box * kBlockN * kRowBytes + col_bytes));
          dev::wgmma::mma_ss_fp8<Fp8::kE4M3, kBlockN>(s.tiles, desc_q, desc_k, kk > 0);  // consumer: S GEMM
        }
        dev::wgmma::commit();
      };
      const auto issue_s16 = [&](i32 it) {
        const unsigned char* k_tile = smem + layout.k_offset(ring.stage(it));
        const unsigned char* q_rows = q_s + 64 * consumer * kRowBytes;
        // Every k-step's operands are the first ones moved by a constant.
        const u64 q_desc = dev::wgmma::descriptor(q_rows, 16, kAtomStride, kSwizzle);
        const u64 k_desc = dev::wgmma::descriptor(k_tile, 16, kAtomStride, kSwizzle);
        dev::wgmma::fence();
        ATTUNE_UNROLL
        for (i32 kk = 0; kk < kKSteps; ++kk) {
          const i32 box = kk / 4;
          const i32 col_bytes = (kk % 4) * 32;
          const u64 desc_q = dev::wgmma::advance(q_desc, static_cast<u32>(box * block_m * kRowBytes + col_bytes));
          const u64 desc_k = dev::wgmma::advance(k_desc, static_cast<u32>(box * kBlockN * kRowBytes + col_bytes));
          dev::wgmma::mma_ss<DType, kBlockN, 0, 0>(s.tiles, desc_q, desc_k, kk > 0);  // consumer: S GEMM
        }
        dev::wgmma::commit();
      };
      const auto issue_s = [&](i32 it) {
        if (fp8) {
          issue_s_fp8(it);
        } else {
          issue_s16(it);
        }
      };
      const auto issue_pv_fp8 = [&](i32 it) {
        // V^T is K-major: D rows of 128 key slots per 128 keys, 32 slots a step.
        const u64 v_desc = dev::wgmma::descriptor(smem + layout.v_offset(ring.stage(it)), 16, kAtomStride, kSwizzle);
        dev::wgmma::fence();
        ATTUNE_UNROLL
        for (i32 ks = 0; ks < kFp8PSteps; ++ks) {
          const u64 desc_v =
              dev::wgmma::advance(v_desc, static_cast<u32>((ks / 4) * kHeadDim * kRowBytes + (ks % 4) * 32));
          dev::wgmma::mma_rs_fp8<Fp8::kE4M3, kHeadDim>(softmax.u, pa8[ks], desc_v, 1);  // consumer: P V GEMM
        }
        dev::wgmma::commit();
      };
      const auto issue_pv16 = [&](i32 it) {
        const unsigned char* v_tile = smem + layout.v_offset(ring.stage(it));
        // V is MN-major for this GEMM: 16 key rows of every box; LBO steps a box.
        const u64 v_desc = dev::wgmma::descriptor(v_tile, static_cast<u32>(kBlockN * kRowBytes), kAtomStride, kSwizzle);
        dev::wgmma::fence();
        ATTUNE_UNROLL
        for (i32 ks = 0; ks < kPSteps; ++ks) {
          const u64 desc_v = dev::wgmma::advance(v_desc, static_cast<u32>(ks * 16 * kRowBytes));
          dev::wgmma::mma_rs<DType, kHeadDim, 1>(softmax.u, pa[ks], desc_v, 1);  // consumer: P V GEMM
        }
        dev::wgmma::commit();
      };
      const auto issue_pv = [&](i32 it) {
        rescale.before_pv(softmax);
        if (fp8) {
          issue_pv_fp8(it);
        } else {
          issue_pv16(it);
        }
      };
      // Scores of tile i to probabilities, m and l: the mask by global position
      // on the tiles that need it, the scale folded into the exponent.
      // (`masked` is a constant at every call: each loop below compiles its own
      // body, the free tiles' without mask code.)
      flash_detail::RowWindows<Config> windows;
      const auto softmax_step = [&](bool masked, i32 it) {
        if (masked) windows.apply(s, it - kv_base);
        rescale.step(softmax, s.tiles, fp8 ? fp8_scale_log2 : f.scale_log2);
      };
      // P of tile `it` to the A operand; with dropout, after m and l (the
      // saved LSE is the one without it), the dropped probabilities zeroed.
      const auto convert_p = [&](i32 it) {
        if constexpr (Mods::kMayDropout) {
          if (drop.on) {
            const i64 warp_row0 = w.row0 + 64 * consumer + 16 * (dev::warp_id() % 4);
            drop_probabilities(s.tiles, drop.stream, warp_row0, (w.n_begin + (it - kv_base)) * kBlockN);
          }
        }
        if (fp8) {
          // Four 8-key tiles a step; the slots past the tile pack zeros.
          ATTUNE_UNROLL
          for (i32 ks = 0; ks < kFp8PSteps; ++ks) {
            float p8[4][4];
            ATTUNE_UNROLL
            for (i32 q = 0; q < 4; ++q) {
              ATTUNE_UNROLL
              for (i32 e = 0; e < 4; ++e) p8[q][e] = 4 * ks + q < kBlockN / 8 ? s.tile(0, 4 * ks + q)[e] : 0.0f;
            }
            sm90_fp8::pack_p_fp8<Fp8::kE4M3>(p8[0], p8[1], p8[2], p8[3], pa8[ks]);
          }
        } else {
          ATTUNE_UNROLL
          for (i32 ks = 0; ks < kPSteps; ++ks) {
            flash_detail::pack_a_fragment<DType>(s.tile(0, 2 * ks), s.tile(0, 2 * ks + 1), pa[ks]);
          }
        }
      };
      // One key tile i >= first. With the overlap, tile 0 runs before the loops
      // and the P V of the last tile after them.
      const auto tile = [&](bool masked, i32 it) {
        ring.consumer_wait(it);
        if (!overlap) {
          turns.in_turn([&] { issue_s(it); });
          dev::wgmma::wait<0>();
          softmax_step(masked, it);
          rescale.settle(softmax);
          convert_p(it);
          turns.in_turn([&] { issue_pv(it); });
          dev::wgmma::wait<0>();
          ring.consumer_release(it, wt);
        } else {
          turns.in_turn([&] {
            issue_s(it);       // S of tile it ...
            issue_pv(it - 1);  // ... then P V of tile it-1, both in flight
          });
          dev::wgmma::wait<1>();     // S of tile it done
          softmax_step(masked, it);  // while P V of tile it-1 runs
          dev::wgmma::wait<0>();
          ring.consumer_release(it - 1, wt);
          convert_p(it);
          rescale.settle(softmax);
        }
      };
      // The row windows are taken before each masked loop (from an opaque row,
      // so they are not kept from one to the next): no registers held for them
      // through the free loop.
      const auto take_windows = [&] {
        const TileWork x = work();
        const i64 warp_row0 = x.row0 + 64 * consumer + 16 * (dev::warp_id() % 4);  // this warp's first row
        windows.init(f.mask, warp_row0, x.n_begin * kBlockN, x.seq.q_len, x.seq.k_len);
      };

      if (tiles > 0) {
        take_windows();
        const i32 first = overlap ? 1 : 0;
        if (overlap) {
          ring.consumer_wait(kv_base);
          turns.in_turn([&] { issue_s(kv_base); });
          dev::wgmma::wait<0>();
          softmax_step(true, kv_base);  // the mask is right for any tile
          convert_p(kv_base);
          rescale.settle(softmax);
        }
        // The tiles in order: masked [first, free_a), free [free_a, free_b),
        // masked [free_b, tiles).
        const i32 free_a = first > free_begin ? first : free_begin;
        const i32 free_b = free_a > free_end ? free_a : free_end;
        for (i32 it = kv_base + first; it < kv_base + free_a; ++it) tile(true, it);
        for (i32 it = kv_base + free_a; it < kv_base + free_b; ++it) tile(false, it);
        take_windows();
        for (i32 it = kv_base + free_b; it < kv_base + tiles; ++it) tile(true, it);
        if (overlap) {
          turns.in_turn([&] { issue_pv(kv_base + tiles - 1); });
          dev::wgmma::wait<0>();
          ring.consumer_release(kv_base + tiles - 1, wt);
        }
      }
      softmax.merge_quad();
      const TileWork out = work();
      const i64 row0 = out.row0;
      const i64 c_row0 = row0 + 64 * consumer;
      // Lane-derived addresses and columns are recomputed per tile (opaque
      // lane): hoisted out of the tile loop, they would be held through it.
      const i32 lane_o = dev::opaque(lane);
      const i64 warp_row0 = c_row0 + 16 * (dev::opaque(dev::warp_id()) % 4);

      // ---- epilogue: O = u / l (0 and LSE = -inf for rows that saw no key) ----
      // O is staged in this consumer's Q rows of each box (free since its last
      // S GEMM), so its registers are dead before any global address is
      // computed; then one TMA store, or each thread stores what it staged
      // (packed tails, layouts TMA cannot map).
      const bool rows_whole =
          c_row0 + 64 <= out.seq.q_len || f.cu_seqlens_q == nullptr;  // a TMA box never leaves the sequence
      const bool via_tma = tma_store && p.o_map_valid != 0 && rows_whole && c_row0 < out.seq.q_len;
      unsigned char* o_stage = q_s + 64 * consumer * kRowBytes;
      // Element (row, col) of the staged tile, row counted from the consumer's first.
      const auto staged = [&](i32 row, i32 col) {
        const u32 at = static_cast<u32>(o_stage + (col / kBoxCols) * block_m * kRowBytes - smem) +
                       static_cast<u32>(row * kRowBytes + (col % kBoxCols) * 2);
        return dev::shared_as<u16>(smem + sm90::swizzle_address(kSwizzle, at));
      };
      const float v_descale = fp8 ? p.fp8.output_factor(out.batch, out.kv_head) : 1.0f;
      softmax.for_each_row(lane_o, [&](i32 warp_row, const typename Softmax::Row& r) {
        const i64 row = warp_row0 - row0 + warp_row;  // in the block
        softmax::RowEnd end = softmax::finalize(r.m, r.l);
        if constexpr (Mods::kMayDropout) {
          if (Mods::dropout(p.dropout)) end.inv_l *= p.dropout.keep_scale;  // 1 / (1 - p)
        }
        if (fp8) end.inv_l *= v_descale;
        const i64 q_row = row0 + row;
        if (q_row < out.seq.q_len && f.lse != nullptr && frag::row_leader(lane_o)) {
          dev::store_global(f.lse + out.batch * f.lse_batch_stride + out.head * f.lse_head_stride +
                                (out.seq.q_begin + q_row) * f.lse_row_stride,
                            end.lse);
        }
        ATTUNE_UNROLL
        for (int dt = 0; dt < kHeadDim / 8; ++dt) {
          ATTUNE_UNROLL
          for (int e = 0; e < 2; ++e) {
            dev::store_shared(staged(static_cast<i32>(row - 64 * consumer), Softmax::column(lane_o, dt, e)),
                              dev::to_bits<DType>(r.u[dt][e] * end.inv_l));  // consumer: stage O
          }
        }
      });
      if (via_tma) {
        dev::fence_proxy_async();  // the staged O before the TMA store reads it
        dev::named_barrier::sync(sm90_sync::kStore + consumer, 128);
        if (wt == 0) {
          for (i32 c = 0; c < kChunks; ++c) {
            dev::tma::store(&p.o_map, o_stage + c * block_m * kRowBytes, c * kBoxCols,
                            static_cast<i32>(out.seq.q_begin + c_row0), out.head, out.map_batch);  // consumer: store O
          }
          dev::tma::commit();
          dev::tma::wait_read<0>();  // the staged O read out before Q's rows are handed back
        }
      } else {
        // Each thread copies out the elements it staged: nothing passes between
        // threads, and O's registers are dead by now.
        static_assert(Softmax::kRows == 2, "one m-tile of 16 rows per warp");
        ATTUNE_UNROLL
        for (int half = 0; half < 2; ++half) {
          const i32 row = static_cast<i32>(warp_row0 - c_row0) + frag::acc_row(lane_o, half);  // in the consumer's rows
          if (c_row0 + row < out.seq.q_len) {
            u16* o_row = f.o + out.batch * f.o_batch_stride + (out.seq.q_begin + c_row0 + row) * f.o_row_stride +
                         out.head * f.o_head_stride;
            ATTUNE_UNROLL
            for (int dt = 0; dt < kHeadDim / 8; ++dt) {
              ATTUNE_UNROLL
              for (int e = 0; e < 2; ++e) {
                const i32 col = Softmax::column(lane_o, dt, e);
                if (col < f.head_dim_v)
                  dev::store_global(o_row + col, dev::load_shared(staged(row, col)));  // consumer: store O
              }
            }
          }
        }
        dev::fence_proxy_async();  // the staged O read before the next Q lands on it
      }
    }
    kv_base += tiles;
    if (!dynamic) {
      index = sm90_sched::next_static(scheduler, index, sharing(), tile_count);
      if (index >= tile_count) break;  // no Q follows: nobody waits for the rows
    }
    dev::mbarrier::arrive(q_empty);  // consumer: Q rows free
  }
}

}  // namespace attune
