// The synchronization of the Hopper kernels, named once: the named barriers
// they use, the ring of K/V stages a producer fills and consumers drain (its
// parities inside), and the turns two consumer warpgroups take to issue
// their GEMMs (pingpong), whose hand-offs pair with their waits by
// construction.
#pragma once

#include "templates/primitives/hopper.h"

namespace attune {
namespace sm90_sync {

// Named barrier ids; 0 is the block's own (block::sync). Consumer c has
// kStore + c for its O store and kTurn + c for its pingpong turn (at most
// three consumers, two with pingpong).
enum NamedBarrierId : i32 {
  kStore = 1,
  kTurn = 5,
  kProducerWarp = 7,  // the producer warp's lanes
  kTranspose = 8,     // kFp8: the producer warps that transpose V
  // flash_bwd_sm90: consumer c has kDsStored + c, its dS^T stores seen by
  // all its threads before its dQ GEMM reads them (no O store there; where
  // the consumers split dQ by columns and read each other's dS^T, both
  // meet at kDsStored), and kDqTurn + c for its deterministic dQ turn (no
  // pingpong there).
  kDsStored = kStore,
  kDqTurn = kTurn,
};

// A ring of `stages` shared stages handed from a producer to the consumers.
// Tile i lives in stage i % stages; its lap i / stages decides the parity
// of every wait on the stage. A stage's full barrier completes when its
// loads land (one arrival with the bytes to expect); its empty barrier when
// every consumer has released it. In a cluster (`cluster`) a release is a
// remote arrival (one code path whether or not the blocks pair); with
// `blocks` 2 (paired blocks whose producers fill both blocks' stages) every
// consumer releases the stage in both blocks, so neither producer refills
// it before both have read it.
struct KvRing {
  u64* full;   // [stages]
  u64* empty;  // [stages]
  i32 stages;
  bool cluster = false;
  i32 blocks = 1;

  ATTUNE_DEVICE i32 stage(i32 tile) const { return tile % stages; }
  ATTUNE_DEVICE u32 lap(i32 tile) const { return static_cast<u32>(tile / stages); }
  // The barrier the loads of tile i complete.
  ATTUNE_DEVICE u64* full_barrier(i32 tile) const { return full + stage(tile); }

  // One thread, before the block's first barrier.
  ATTUNE_DEVICE void init(i32 consumers) const {
    for (i32 s = 0; s < stages; ++s) {
      dev::mbarrier::init(full + s, 1);
      dev::mbarrier::init(empty + s, consumers * blocks);
    }
  }
  // Producer: waits until every consumer released tile i's stage (the
  // first lap waits on the phase before the first, which counts as done).
  ATTUNE_DEVICE void producer_acquire(i32 tile) const {
    dev::mbarrier::wait(empty + stage(tile), (lap(tile) & 1) ^ 1);  // producer: wait empty
  }
  // Consumer: waits until tile i has landed.
  ATTUNE_DEVICE void consumer_wait(i32 tile) const {
    dev::mbarrier::wait(full + stage(tile), lap(tile) & 1);  // consumer: wait full
  }
  // Consumer: done with tile i's stage; one arrival per consumer and block,
  // made by its warpgroup's thread 0 (`thread`: the caller's index in its
  // warpgroup) in its own block, and with two blocks by thread 1 in the
  // peer (rank ^ 1), so no thread makes two.
  ATTUNE_DEVICE void consumer_release(i32 tile, i32 thread) const {
    if (cluster) {
      if (thread < blocks)
        dev::mbarrier::arrive_cluster(empty + stage(tile), dev::cluster::rank() ^ thread);  // consumer: release both
      return;
    }
    if (thread == 0) dev::mbarrier::arrive(empty + stage(tile));  // consumer: release
  }
};

// Two consumers take turns issuing their GEMMs, so one's softmax runs while
// the other's GEMMs do (FlashAttention-3's pingpong). Consumer 1 opens the
// first turn for consumer 0; every turn ends by handing the next turn to the
// other, except consumer 1's last, which no turn of consumer 0 would wait
// for. `turns` is how many turns each consumer takes, the same for both.
// Without pingpong every call is a no-op.
class PingpongTurns {
 public:
  ATTUNE_DEVICE PingpongTurns(bool on, i32 consumer, i32 turns) : on_(on), consumer_(consumer), left_(turns) {
    if (on_ && consumer_ == 1 && left_ > 0) dev::named_barrier::arrive(kTurn + 0, 256);
  }

  // Runs `issue` in this consumer's next turn: waits for the turn, then
  // hands the next one to the other consumer.
  template <class Issue>
  ATTUNE_DEVICE void in_turn(const Issue& issue) {
    if (on_) dev::named_barrier::sync(kTurn + consumer_, 256);
    issue();
    --left_;
    if (on_ && !(consumer_ == 1 && left_ == 0)) dev::named_barrier::arrive(kTurn + 1 - consumer_, 256);
  }

 private:
  bool on_;
  i32 consumer_;
  i32 left_;  // turns this consumer has not ended
};

}  // namespace sm90_sync
}  // namespace attune
