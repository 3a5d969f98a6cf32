// A unit: the parameters gathered, freed and reduced together (a transformer block, or the
// root's remainder). Internal to the engine.
#pragma once

#include "shard/flat_param.h"
#include "zeroshard/nn/hookable.h"

#include <functional>
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

  // A gather in flight (started ahead of use by prefetch): its collectives and the bf16
  // copies they send, which must live until they complete.
  std::vector<WorkHandle> gather_works;
  std::vector<at::Tensor> gather_sends;

  // Per micro-batch. A unit may run several times in one forward (a video VAE stage once per
  // chunk): its gradients are complete only after the backward of every call.
  bool post_backward_done = false;
  int calls_awaiting_backward = 0;  // training calls whose post-backward node has not fired
  bool untracked_call = false;      // a training call without inputs to hang that node on
  std::function<void()> post_backward_callback;  // owned here; the autograd node points at it

  int64_t gathered_size_bytes() const {
    return (trainable ? trainable->full_bytes() : 0) + (frozen ? frozen->full_bytes() : 0);
  }
};

}  // namespace zeroshard
