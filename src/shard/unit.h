// A unit: the parameters gathered, freed and reduced together (a transformer block, or the
// root's remainder). Internal to the engine.
#pragma once

#include "shard/flat_param.h"
#include "zeroshard/nn/hookable.h"

#include <functional>
#include <vector>
#include <memory>
#include <string>

namespace zeroshard {

struct Unit {
  int index = 0;
  std::string name;  // qualified module name; "" for the root
  bool is_root = false;
  nn::HookableModule* module = nullptr;  // null: a root that is not hookable
  std::shared_ptr<nn::ForwardHooks> hooks;
  std::unique_ptr<FlatParam> trainable;  // requires_grad parameters
  std::unique_ptr<FlatParam> frozen;     // requires_grad = false: sharded, gathered, no grad/state

  // Reduced gradient of this rank's shard, accumulated over micro-batches. Under no_shard
  // and optim it is a view into grad_full, the replicated reduced gradient.
  at::Tensor grad_shard;
  at::Tensor grad_full;
  bool grad_has_data = false;
  // no_shard / optim: the all-gather of the accumulated shard into grad_full, issued during the
  // last micro-batch's backward; grad_full_current once issued after the shard's last change.
  WorkHandle grad_gather;
  bool grad_full_current = false;

  // Gathers in flight — started ahead of use by prefetch, or the all-gather that publishes
  // replicated parameters after the optimizer step — and the bf16 copies they send, which
  // must live until they complete. Waited before the unit's next use.
  std::vector<WorkHandle> gather_works;
  std::vector<at::Tensor> gather_sends;

  // Per micro-batch. A unit may run several times in one forward (a video VAE stage once per
  // chunk): its gradients are complete only after the backward of every call.
  bool post_backward_done = false;
  int calls_awaiting_backward = 0;  // training calls whose post-backward node has not fired
  bool untracked_call = false;      // a training call without inputs to hang that node on
  std::function<void()> post_backward_callback;  // owned here; the autograd node points at it

  // Whether this unit's parameters are gathered before use and freed after (a buffer sharded
  // under optim_grads_params, above the persistence threshold).
  bool gathers() const {
    return (trainable && trainable->shards_params()) || (frozen && frozen->shards_params());
  }
  bool gathered() const {
    return (trainable && trainable->shards_params() && trainable->gathered()) ||
           (frozen && frozen->shards_params() && frozen->gathered());
  }

  int64_t gathered_size_bytes() const {
    return (trainable ? trainable->full_bytes() : 0) + (frozen ? frozen->full_bytes() : 0);
  }
};

// A reduce-scatter in flight: one unit's gradient, or a bucket of small units' gradients.
struct ShardedModel::PendingReduce {
  // One unit's slice of the collective: its shard is reduced[offset, offset + size).
  struct Part {
    Unit* unit;
    int64_t offset;
    int64_t size;
    at::Tensor local_full;  // the unit's unreduced gradient, until the bucket is laid out
  };
  std::vector<Part> parts;
  int64_t shard_elems = 0;  // S: the parts' shard sizes summed
  int64_t bytes = 0;        // of the parts' unreduced gradients
  at::Tensor input;         // reduce-scattered: one unit's gradient, or the parts laid out rank by rank
  at::Tensor reduced;       // this rank's S elements
  WorkHandle work;          // reduce-scatter in the shard group
  WorkHandle replica_work;  // hybrid: then the all-reduce across the copies (same queue, runs after)
  const WorkHandle& last() const { return replica_work ? replica_work : work; }
};

}  // namespace zeroshard
