// A unit: the parameters gathered, freed and reduced together (a transformer block, or the
// root's remainder). Internal to the engine.
#pragma once

#include "shard/flat_param.h"
#include "zeroshard/nn/hookable.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::shard {

struct Unit {
  int index = 0;     // in the engine's unit order (root first); what the prefetch scheduler sees
  std::string name;  // qualified module name; "<root>" for the root
  bool is_root = false;
  nn::HookableModule* module = nullptr;  // null: a root that is not hookable
  std::shared_ptr<nn::ForwardHooks> hooks;
  std::unique_ptr<FlatParam> trainable;  // requires_grad parameters
  std::unique_ptr<FlatParam> frozen;     // requires_grad = false: sharded, gathered, no grad/state
  // requires_grad = false, FrozenStorage::File: read from the model's files (FlatParam::read_from_files)
  std::unique_ptr<FlatParam> mapped;
  // The trainable buffer's index in the gradient reducer and the optimizer (-1: none).
  int grad_index = -1;

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
  // under optim_grads_params, above the persistence threshold), or, under no_shard with a bf16
  // compute dtype, cast from the full fp32 master before use and freed after (FlatParam).
  // The buffers that exist, in the engine's order: trainable, frozen, mapped.
  std::vector<FlatParam*> buffers() const {
    std::vector<FlatParam*> out;
    for (FlatParam* f : {trainable.get(), frozen.get(), mapped.get()}) {
      if (f != nullptr) out.push_back(f);
    }
    return out;
  }
  bool gathers() const {
    for (const FlatParam* f : buffers()) {
      if (f->transient()) return true;
    }
    return false;
  }
  bool gathered() const {
    for (const FlatParam* f : buffers()) {
      if (f->transient() && f->gathered()) return true;
    }
    return false;
  }

  int64_t gathered_size_bytes() const {
    int64_t n = 0;
    for (const FlatParam* f : buffers()) n += f->full_bytes();
    return n;
  }
};

// Which parameters go into which unit, before any buffer exists: the engine builds its units
// from this, and the memory planner (shard/plan.h) computes their sizes from it. Units in the
// engine's order: the root first, then the modules the wrap policy chose, in pre-order (nothing
// inside a chosen unit is offered). A parameter belongs to the unit that uses it, or to the
// root when several units (tied weights) or none use it; a tied parameter appears once, under
// its first qualified name. Trainable (requires_grad) and frozen ones are kept apart.
struct UnitParams {
  std::string name;  // "<root>" for the root
  std::shared_ptr<torch::nn::Module> module;  // the root module for the root
  std::vector<ParamSlot> trainable, frozen;
};
std::vector<UnitParams> assign_units(const std::shared_ptr<torch::nn::Module>& root, const WrapPolicy& wrap_policy);

}  // namespace zeroshard::shard
