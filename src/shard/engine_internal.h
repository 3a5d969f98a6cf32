// The engine's internal interface for the layers beside it (src/optim; nothing a library user
// calls): the optimizer's view of the trainable buffers and its hand-over after each update.
// The public API is include/zeroshard/shard.h; the engine's own state is src/shard/engine.h.
#pragma once

#include "zeroshard/shard.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeroshard::shard {

// One trainable flat buffer as the optimizer sees it: this rank's fp32 master values and the
// reduced gradient (shards; the full buffers under no_shard, which updates full masters).
struct TrainableView {
  at::Tensor master;  // updated in place by the optimizer
  at::Tensor grad;    // accumulated sums: the gradient to apply is grad * grad_scale
  float grad_scale = 1.0f;  // mean over ranks and micro-batches, times the clip factor (finish_gradients)
};

// The trainable buffers, in a fixed order (the engine's unit order) that is also the order of
// the optimizer's state. Waits first for any all-gather still sending the masters.
std::vector<TrainableView> optimizer_views(ShardedModel& model);

// Called by the optimizer once it has updated the masters of optimizer_views()[i]: starts
// making that buffer's compute parameters current (an all-gather of the updated shards for
// replicated parameters, a cast of the full master under no_shard), overlapped with the
// optimizer's work on the next buffers. Not waited here: the unit's next pre-forward waits.
void after_buffer_update(ShardedModel& model, size_t i);

// Called by the optimizer after its step: publishes the buffers it did not hand over, starts
// a new gradient sum and, with prefetch, starts gathering the next forward's first units.
void after_optimizer_step(ShardedModel& model);

// The optimizer's state bytes on this rank, reported in ShardedModel::memory().optim_bytes.
void set_optimizer_state_bytes(ShardedModel& model, int64_t bytes);

}  // namespace zeroshard::shard
