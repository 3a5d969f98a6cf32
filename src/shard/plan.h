// `zeroshard plan`: what a model costs each rank under a strategy, computed from the model built
// without parameter bytes (nn::DeferredInit) by the engine's own rules — the units and their
// parameters (assign_units, shared with the engine), the flat-buffer padding (ShardLayout),
// which buffers stay replicated (StrategyPlan: the strategy and the persistence threshold),
// the fp32 masters and AdamW moments the optimizer keeps, and the ring collectives of one step
// (a ring all-gather or reduce-scatter over S ranks sends S - 1 of its S chunks from every
// rank; an all-reduce twice that, over chunks padded to a multiple of S).
//
// Exact for what the engine measures (MemoryStats params/grads/optim bytes, the largest unit,
// bytes sent per step by each rank), given that every unit runs once per forward and a unit's
// backward regathers it when it has trainable parameters (a unit called several times per
// forward, e.g. a chunked VAE stage, is gathered once per call: more than planned). The
// gathered peak is the engine's bound: the root plus max_live_units consecutive units
// (prefetch), or two (without). Series collectives of a few bytes (MoE routing counts, tower
// times) are left out.
//
// When the bytes are sent: most collectives of a step are issued and waited within it, but the
// publishing all-gathers of replicated parameters (optim, optim_grads, persistent buffers) and,
// under optim_grads_params with prefetch, the next forward's first gathers are issued at the end
// of the optimizer step and waited by the next forward (comm_deferred_*). The trainer's
// comm_bytes_sent counts the bytes sent between the start of a step and its figures, read right
// after the optimizer step: these deferred ring steps count there only when they completed by
// then (a race), and otherwise in no step (the trainer's figures all-gather queues behind them,
// before the next step starts). So a step measures comm_bytes() - comm_deferred_bytes plus
// whole ring steps of the deferred collectives, one comm_deferred_chunk_bytes each, up to
// S - 1 per collective — checked exactly, rank by rank, for all four strategies at 2 and 3
// ranks with accumulation, and ZeRO-3 in bf16 with a replicated (persistent) root
// (tests/train/test_user_formats.py plan), as are params/grads/optim bytes and the gathered
// peak (within 1 %).
#pragma once

#include "zeroshard/shard.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::shard {

struct PlannedUnit {
  std::string name;
  int64_t trainable_numel = 0, frozen_numel = 0;
  int64_t gathered_bytes = 0;  // both buffers, padded, in the compute dtype
  bool sharded = false;        // gathered for use and freed after (optim_grads_params)
};

struct StrategyCost {
  Strategy strategy = Strategy::OptimGradsParams;
  int shard_ranks = 1, replicas = 1;  // hybrid: replicas copies sharded over shard_ranks
  // Per rank, as ShardedModel::memory() reports them.
  int64_t params_bytes = 0, grads_bytes = 0, optim_bytes = 0;
  int64_t largest_unit_bytes = 0;    // the largest unit's gathered size
  int64_t gathered_peak_bytes = 0;   // gathered at once (optim_grads_params; no_shard in bf16: cast copies; else 0)
  // Bytes each rank sends in one optimizer step, by collective.
  int64_t comm_param_gather_bytes = 0;  // ZeRO-3 gathers in forward and backward
  int64_t comm_reduce_bytes = 0;        // gradient reduce-scatters (+ the replicas' all-reduces)
  int64_t comm_grad_gather_bytes = 0;   // no_shard / optim: the reduced gradient all-gathered
  int64_t comm_publish_bytes = 0;       // replicated parameters all-gathered after the update
  int64_t comm_scalar_bytes = 0;        // the loss and the gradient norm's partial sums
  // The part of comm_bytes() issued at the end of the optimizer step and waited by the next
  // forward, and the bytes of one ring step of each of those all-gathers (S - 1 steps each).
  int64_t comm_deferred_bytes = 0;
  std::vector<int64_t> comm_deferred_chunk_bytes;
  // FrozenStorage::File (with a param_source): frozen bytes used in place from the mapped files
  // (the host's page cache, shared by its ranks; not in params_bytes), bytes converted into their
  // unit's buffer at each gather (in the units' gathered bytes), and the bytes those parameters
  // take in their files: what one forward reads, from storage when the page cache cannot keep them.
  int64_t mapped_bytes = 0, converted_bytes = 0, file_bytes_per_pass = 0;
  int64_t model_state_bytes() const { return params_bytes + grads_bytes + optim_bytes; }
  int64_t comm_bytes() const {
    return comm_param_gather_bytes + comm_reduce_bytes + comm_grad_gather_bytes + comm_publish_bytes +
           comm_scalar_bytes;
  }
};

struct ModelPlan {
  int64_t num_params = 0, num_trainable = 0;
  std::vector<PlannedUnit> units;  // the engine's order (root first)
  StrategyCost cost;
};

// The cost of `module` under `options` (its strategy, wrap policy, dtypes, persistence
// threshold, buckets, hybrid group, frozen storage) at world_size ranks, with micro_batches per
// step. Nothing is allocated: the module's parameters only need their shapes. Under
// FrozenStorage::File the param_source is checked and asked where each frozen parameter lies
// (file headers are read, no weights).
ModelPlan plan_model(const std::shared_ptr<torch::nn::Module>& module, const ShardOptions& options, int world_size,
                     int64_t micro_batches);

}  // namespace zeroshard::shard
