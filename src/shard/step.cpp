// One optimizer step's worth of engine work: backward per micro-batch (the GradReducer does
// the reductions), the norm and the clipping factor over the shards, and the optimizer's
// hand-over (shard/engine_internal.h).
#include "shard/engine.h"

#include "util/sum_squares.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard {

using shard::FlatParam;
using shard::Unit;

void ShardedModel::Impl::reduce_unit_grads(Unit& unit) {
  if (!unit.trainable) return;
  const auto i = static_cast<size_t>(unit.grad_index);
  at::Tensor local = reducer_->new_local_gradient(i);
  unit.trainable->take_grads_into(local);
  reducer_->reduce(i, std::move(local));
}

void ShardedModel::Impl::backward(const at::Tensor& loss, bool last_micro_batch) {
  TORCH_CHECK(loss.defined() && loss.numel() == 1, "ShardedModel::backward: loss must be a scalar tensor");
  reducer_->begin_micro_batch(last_micro_batch);
  for (auto& u : units_) u->post_backward_done = false;
  prefetch_.begin_backward();
  loss.backward();
  // Units whose post-backward did not fire (the root, units whose inputs need no grad, units
  // not run in this micro-batch): reduce them now, in a fixed order on every rank.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if (!(*it)->post_backward_done) on_post_backward(**it);
    (*it)->calls_awaiting_backward = 0;
    (*it)->untracked_call = false;
  }
  reducer_->finish_micro_batch();
  ++micro_batches_;
}

double ShardedModel::Impl::finish_gradients(double max_norm) {
  if (micro_batches_ == 0) {
    throw std::logic_error("finish_gradients: no backward() since the last optimizer step");
  }
  // The mean gradient is the accumulated sum / (world_size * micro_batches). Its norm over
  // this rank's shards, summed in a fixed order; ranks' partials summed in rank order on
  // every rank. The same partition under every strategy -> the same bits. (Hybrid: every copy
  // holds the same shards, so one group's partials are the whole norm.)
  const double denom = static_cast<double>(comm_->world_size()) * micro_batches_;
  double local = 0.0;
  for (size_t i = 0; i < reducer_->num_buffers(); ++i) {
    const at::Tensor& g = reducer_->shard(i);
    local += util::sum_of_squares(g.data_ptr<float>(), g.numel());
  }
  at::Tensor partial = at::full({1}, local, at::kDouble);
  at::Tensor all = at::empty({shard_comm_->world_size()}, at::kDouble);
  clock_.blocked([&] { shard_comm_->all_gather(partial, all); });
  double total = 0.0;
  for (int r = 0; r < shard_comm_->world_size(); ++r) total += all.data_ptr<double>()[r];
  const double norm = std::sqrt(total) / denom;
  double coef = 1.0;
  if (max_norm > 0.0 && max_norm / (norm + 1e-6) < 1.0) coef = max_norm / (norm + 1e-6);
  // Applied by the optimizer in its pass: one rounding per element, the same on every strategy.
  grad_scale_ = static_cast<float>(coef / denom);
  reducer_->wait_gradient_gathers(/*complete=*/true);
  return norm;
}

void ShardedModel::Impl::discard_gradients() {
  reducer_->wait_gradient_gathers(/*complete=*/false);
  reducer_->start_new_sum();
  micro_batches_ = 0;
}

std::vector<shard::TrainableView> ShardedModel::Impl::optimizer_views() {
  // The optimizer is about to change the masters: the last step's publishing all-gathers (of
  // a unit no forward has waited for since) must not be sending them any more.
  for (auto& u : units_) finish_gather(*u);
  std::vector<shard::TrainableView> views;
  for (Unit* u : trainable_units_) {
    const auto i = static_cast<size_t>(u->grad_index);
    if (plan_.full_master) {
      views.push_back({u->trainable->master_full(), reducer_->full(i), grad_scale_});
    } else {
      views.push_back({u->trainable->shard(), reducer_->shard(i), grad_scale_});
    }
  }
  return views;
}

void ShardedModel::Impl::after_buffer_update(size_t i) {
  TORCH_CHECK(i < trainable_units_.size(), "after_buffer_update: no trainable buffer ", i);
  if (published_.size() != trainable_units_.size()) published_.assign(trainable_units_.size(), false);
  if (published_[i]) return;
  published_[i] = true;
  Unit& u = *trainable_units_[i];
  FlatParam& f = *u.trainable;
  if (plan_.full_master) {
    f.refresh_compute_from_master();
  } else if (!f.shards_params()) {
    // Replicated parameters (optim, optim_grads, a persistent buffer under optim_grads_params):
    // every rank's updated masters into the compute buffer (bf16 under mixed precision). Not
    // waited here: the unit's next pre-forward waits, so the gather hides behind the update of
    // the next buffers and the forward of the units before it.
    at::Tensor send = f.mixed() ? f.shard().to(f.compute_dtype()) : f.shard();
    u.gather_works.push_back(shard_comm_->all_gather_async(send, f.full()));
    u.gather_sends.push_back(std::move(send));
  }
}

void ShardedModel::Impl::after_optimizer_step() {
  for (size_t i = 0; i < trainable_units_.size(); ++i) after_buffer_update(i);  // those the optimizer skipped
  published_.assign(trainable_units_.size(), false);
  reducer_->start_new_sum();
  micro_batches_ = 0;
  if (prefetch_.enabled() && plan_.shard_params) {
    // The masters are final until the next step: the next forward's first units can come now.
    start_gather(*units_[0]);
    prefetch(0, +1);
  }
}

// --- engine_internal.h ----------------------------------------------------------------------

namespace shard {

std::vector<TrainableView> optimizer_views(ShardedModel& model) { return EngineAccess::impl(model).optimizer_views(); }
void after_buffer_update(ShardedModel& model, size_t i) { EngineAccess::impl(model).after_buffer_update(i); }
void after_optimizer_step(ShardedModel& model) { EngineAccess::impl(model).after_optimizer_step(); }
void set_optimizer_state_bytes(ShardedModel& model, int64_t bytes) {
  EngineAccess::impl(model).set_optimizer_state_bytes(bytes);
}

}  // namespace shard

}  // namespace zeroshard
