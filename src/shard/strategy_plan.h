// What the chosen strategy means for the engine, decided once when it is built. Every branch
// of the engine reads one of these fields instead of asking "is this optim_grads_params?" again.
//
// | strategy               | shard_params | shard_grads | shard_optim | gather_reduced_grads | full_master |
// |------------------------|--------------|-------------|-------------|----------------------|-------------|
// | no_shard (0)           |              |             |             | yes                  | yes         |
// | optim (1)              |              |             | yes         | yes                  |             |
// | optim_grads (2)        |              | yes         | yes         |                      |             |
// | optim_grads_params (3) | yes          | yes         | yes         |                      |             |
#pragma once

#include "zeroshard/shard.h"

#include <cstdint>

namespace zeroshard::shard {

struct StrategyPlan {
  Strategy strategy = Strategy::OptimGradsParams;

  // Flat buffers are sharded between uses: gathered for forward and backward, freed after —
  // except those of at most persistence_threshold elements, which stay replicated (see
  // shards_buffer). Also what makes the engine record the forward order and prefetch.
  bool shard_params = false;
  int64_t persistence_threshold = 0;
  // The reduced gradient is kept as this rank's shard only.
  bool shard_grads = false;
  // The optimizer's state, and the fp32 masters it updates, are this rank's shard.
  bool shard_optim = false;
  // In the last micro-batch the accumulated (reduced) gradient shards are all-gathered into a
  // full gradient buffer on every rank: the strategies that keep the full gradient.
  bool gather_reduced_grads = false;
  // Every rank keeps and updates the fp32 master of every whole buffer (no_shard): its
  // optimizer works on full buffers, and casts them into the compute copy after each step.
  bool full_master = false;

  // Hybrid sharding: `replicas` copies of the model, each sharded over `shard_ranks`
  // consecutive ranks (replicas = 1, shard_ranks = the world size when not hybrid).
  int shard_ranks = 1;
  int replicas = 1;
  bool hybrid() const { return replicas > 1; }

  // Whether a flat buffer of numel elements is sharded between uses under this plan.
  bool shards_buffer(int64_t numel) const { return shard_params && numel > persistence_threshold; }

  // Throws std::invalid_argument naming the option when the options do not fit world_size
  // (a shard group size that does not divide it, a negative persistence threshold).
  static StrategyPlan make(const ShardOptions& options, int world_size);
};

}  // namespace zeroshard::shard
