// Gathering and freeing units around forward and backward (optim_grads_params), driven by the
// hooks: pre/post-forward from the unit's ForwardHooks, pre-backward from a hook on its
// outputs, post-backward from the identity node on its inputs (shard/torch_internals.h).
// What to prefetch is the PrefetchScheduler's decision; this file issues the gathers.
#include "shard/engine.h"

#include "shard/torch_internals.h"

#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>

namespace zeroshard {

using shard::FlatParam;
using shard::Unit;

void ShardedModel::Impl::start_gather(Unit& unit) {
  for (FlatParam* f : unit.buffers()) {
    if (f->gathered()) continue;
    if (f->file_backed()) {  // read from the files on this rank: nothing to wait for
      f->load_from_files();
      gathered_bytes_ += f->full_bytes();
      continue;
    }
    if (f->casts_on_use()) {  // no_shard in bf16: a local cast of the full master, nothing to wait for
      f->cast_from_master();
      gathered_bytes_ += f->full_bytes();
      continue;
    }
    if (!f->shards_params()) continue;  // replicated: its compute buffer is always there
    f->allocate_full();
    // Mixed precision gathers the bf16 rounding of the fp32 masters: half the bytes.
    at::Tensor send = f->shard();
    if (f->mixed()) {
      RECORD_FUNCTION("zs::param_cast", std::vector<c10::IValue>());  // train/op_profile.h
      send = send.to(f->compute_dtype());
    }
    unit.gather_works.push_back(shard_comm_->all_gather_async(send, f->full()));
    unit.gather_sends.push_back(send);
    gathered_bytes_ += f->full_bytes();
  }
  gathered_peak_ = std::max(gathered_peak_, gathered_bytes_);
}

void ShardedModel::Impl::finish_gather(Unit& unit) {
  if (unit.gather_works.empty()) return;
  clock_.blocked([&] {
    for (auto& w : unit.gather_works) w->wait();
  });
  unit.gather_works.clear();
  unit.gather_sends.clear();
}

void ShardedModel::Impl::gather(Unit& unit) {
  start_gather(unit);  // nothing to start when a prefetch already did
  finish_gather(unit);
}

int ShardedModel::Impl::live_units() const {
  int n = 0;
  for (const auto& u : units_) n += (!u->is_root && u->gathered()) ? 1 : 0;
  return n;
}

void ShardedModel::Impl::prefetch(long from, int step) {
  if (!prefetch_.enabled()) return;
  const auto chosen = prefetch_.choose(from, step, live_units(), [this](int u) {
    const Unit& unit = *units_[static_cast<size_t>(u)];
    return unit.gathers() && !unit.gathered();
  });
  for (int u : chosen) start_gather(*units_[static_cast<size_t>(u)]);
}

void ShardedModel::Impl::release(Unit& unit) {
  if (!unit.gathers()) return;
  // Never free a buffer a collective is still writing. Only a sharded buffer is written by one: a
  // cast or file-backed buffer is freed without waiting (which, under optim / optim_grads, would
  // wait for the replicated parameters' all-gather the last optimizer step started).
  for (const FlatParam* f : unit.buffers()) {
    if (f->shards_params() && f->gathered()) {
      finish_gather(unit);
      break;
    }
  }
  for (FlatParam* f : unit.buffers()) {
    if (!f->transient() || !f->gathered()) continue;
    f->free_full();
    gathered_bytes_ -= f->full_bytes();
  }
}

void ShardedModel::Impl::on_pre_forward(Unit& unit, std::vector<at::Tensor>& inputs) {
  finish_gather(unit);  // replicated parameters: the all-gather of the last optimizer step
  if (gathers_units_) {
    if (unit.is_root) {
      // A new forward. Its first units may have been prefetched (after the optimizer step);
      // any other unit still gathered is left from a forward that went another way.
      for (auto& u : units_) {
        if (!u->is_root && !prefetch_.keep_at_forward_start(u->index)) release(*u);
      }
      prefetch_.begin_forward();
      gather(unit);
      prefetch(0, +1);
    } else {
      const long position = prefetch_.record_call(unit.index);
      gather(unit);
      prefetch(position + 1, +1);  // the units that ran after this call last time
    }
  }
  if (torch::autograd::GradMode::is_enabled() && !unit.is_root) {
    if (shard::attach_post_backward(inputs, &unit.post_backward_callback)) {
      ++unit.calls_awaiting_backward;
    } else {
      unit.untracked_call = true;  // reduced after loss.backward() returns
    }
  }
}

void ShardedModel::Impl::on_post_forward(Unit& unit, std::vector<at::Tensor>& outputs) {
  if (!gathers_units_) return;
  if (unit.is_root) prefetch_.end_forward();  // the order prefetch follows next time
  const bool training = torch::autograd::GradMode::is_enabled();
  // The root stays gathered from its forward through its backward (it is reduced last).
  if (unit.is_root && training) return;
  release(unit);
  if (training) {
    Unit* raw = &unit;
    shard::attach_pre_backward(outputs, [this, raw] { on_pre_backward(*raw); });
  }
}

void ShardedModel::Impl::on_pre_backward(Unit& unit) {
  if (!gathers_units_) return;
  gather(unit);
  // Backward runs the calls in reverse forward order: the scheduler finds this call, then the
  // calls before it are prefetched.
  const long pos = prefetch_.locate_backward_call(unit.index);
  if (pos < 0) return;
  prefetch(pos - 1, -1);
}

void ShardedModel::Impl::on_post_backward(Unit& unit) {
  if (unit.post_backward_done) return;
  unit.post_backward_done = true;
  // A cast copy (no_shard in bf16) is not needed once the unit's backward is done: free it
  // before its gradient is copied and reduced, so the two are not alive together (the root's
  // tied embedding: 2 bytes per element each). A ZeRO-3 gather keeps the order it had.
  if (!plan_.shard_params) release(unit);
  reduce_unit_grads(unit);
  release(unit);
}

}  // namespace zeroshard
