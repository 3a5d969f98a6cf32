// The gradient side of the engine: per micro-batch every unit's gradient is reduce-scattered
// (alone, or with other small units in one bucket) and accumulated into the rank's shard; the
// norm and the clipping factor over those shards; the optimizer's hand-over. Every strategy
// goes through the same collectives on the same layout, which is what keeps them bitwise
// identical; no_shard / optim additionally all-gather the accumulated shard into their full
// gradient during the last micro-batch's backward.
#include "zeroshard/shard.h"

#include "shard/unit.h"
#include "util/sum_squares.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard {

namespace {
// Unreduced full gradients alive at once (they are what sharding the gradients saves).
constexpr size_t kMaxReductionsInFlight = 2;
}  // namespace

void ShardedModel::reduce_unit_grads(Unit& unit) {
  if (!unit.trainable) return;
  const ShardLayout& L = unit.trainable->layout();
  at::Tensor local = at::empty({L.padded}, options_.reduce_dtype);
  unit.trainable->take_grads_into(local);
  const int64_t bytes = static_cast<int64_t>(local.nbytes());
  const bool small = options_.reduce_bucket_bytes > 0 && bytes < options_.reduce_bucket_bytes;
  if (!small) flush_bucket();  // keep the issue order the order units finished in
  if (!open_bucket_) open_bucket_ = std::make_unique<PendingReduce>();
  PendingReduce& b = *open_bucket_;
  b.parts.push_back({&unit, b.shard_elems, L.shard_size, std::move(local)});
  b.shard_elems += L.shard_size;
  b.bytes += bytes;
  if (!small || b.bytes >= options_.reduce_bucket_bytes) flush_bucket();
}

void ShardedModel::flush_bucket() {
  if (!open_bucket_) return;
  std::unique_ptr<PendingReduce> p = std::move(open_bucket_);
  const int world = shard_comm_->world_size();
  if (p->parts.size() == 1) {
    p->input = std::move(p->parts[0].local_full);
  } else {
    // Rank r's region holds chunk r of every part: the reduce-scatter then hands each rank its
    // shard of each part, and every element is summed around the ring exactly as it would be
    // in its unit's own collective.
    p->input = at::empty({world * p->shard_elems}, options_.reduce_dtype);
    const at::Tensor grid = p->input.view({world, p->shard_elems});
    for (auto& part : p->parts) {
      grid.narrow(1, part.offset, part.size).copy_(part.local_full.view({world, part.size}));
      part.local_full.reset();
    }
  }
  p->reduced = at::empty({p->shard_elems}, options_.reduce_dtype);
  p->work = shard_comm_->reduce_scatter_async(p->input, p->reduced);
  // Hybrid: the copies' partial sums of this shard, summed in a fixed ring order (every copy
  // gets the same bits). Issued now, in program order: it runs once the reduce-scatter is done.
  if (replica_comm_) p->replica_work = replica_comm_->all_reduce_async(p->reduced);
  pending_.push_back(std::move(p));
  drain_pending_reductions(kMaxReductionsInFlight);
}

void ShardedModel::drain_pending_reductions(size_t max_in_flight) {
  // Finishing a reduction early (as soon as it completed) frees its buffers sooner, but when
  // finishing issues a collective (the gradient all-gather below) it must happen at the same
  // point of the program on every rank: then only the count decides, never the timing.
  const bool issues = last_micro_batch_ && !shards_grads(options_.strategy);
  while (!pending_.empty() &&
         (pending_.size() > max_in_flight || (!issues && pending_.front()->last()->completed()))) {
    PendingReduce& p = *pending_.front();
    blocking_comm([&] {
      p.work->wait();
      if (p.replica_work) p.replica_work->wait();
    });
    for (const auto& part : p.parts) {
      Unit& u = *part.unit;
      const at::Tensor mine = p.reduced.narrow(0, part.offset, part.size);
      if (u.grad_gather) {  // never change a shard an all-gather is still sending
        blocking_comm([&] { u.grad_gather->wait(); });
        u.grad_gather.reset();
      }
      if (u.grad_has_data) {
        u.grad_shard.add_(mine);
      } else {
        u.grad_shard.copy_(mine);
        u.grad_has_data = true;
      }
      u.grad_full_current = false;
      if (last_micro_batch_ && !shards_grads(options_.strategy)) {
        // The shard is final for this step: publish it into every rank's full gradient now,
        // behind the rest of the backward (the shard is a view into grad_full).
        u.grad_gather = shard_comm_->all_gather_async(u.grad_shard, u.grad_full);
        u.grad_full_current = true;
      }
    }
    pending_.pop_front();
  }
}

void ShardedModel::wait_gradient_gathers(bool complete) {
  for (auto& u : units_) {
    if (!complete || !u->trainable || shards_grads(options_.strategy)) continue;
    if (!u->grad_full_current) {  // backward(loss, false) on the last micro-batch: gather now
      u->grad_gather = shard_comm_->all_gather_async(u->grad_shard, u->grad_full);
      u->grad_full_current = true;
    }
  }
  for (auto& u : units_) {
    if (!u->grad_gather) continue;
    blocking_comm([&] { u->grad_gather->wait(); });
    u->grad_gather.reset();
  }
}

void ShardedModel::backward(const at::Tensor& loss, bool last_micro_batch) {
  TORCH_CHECK(loss.defined() && loss.numel() == 1, "ShardedModel::backward: loss must be a scalar tensor");
  last_micro_batch_ = last_micro_batch;
  for (auto& u : units_) u->post_backward_done = false;
  backward_cursor_ = static_cast<long>(forward_order_.size());
  loss.backward();
  // Units whose post-backward did not fire (the root, units whose inputs need no grad, units
  // not run in this micro-batch): reduce them now, in a fixed order on every rank.
  for (auto it = units_.rbegin(); it != units_.rend(); ++it) {
    if (!(*it)->post_backward_done) on_post_backward(**it);
    (*it)->calls_awaiting_backward = 0;
    (*it)->untracked_call = false;
  }
  flush_bucket();
  drain_pending_reductions();
  ++micro_batches_;
}

double ShardedModel::finish_gradients(double max_norm) {
  if (micro_batches_ == 0) {
    throw std::logic_error("finish_gradients: no backward() since the last optimizer step");
  }
  // The mean gradient is the accumulated sum / (world_size * micro_batches). Its norm over
  // this rank's shards, summed in a fixed order; ranks' partials summed in rank order on
  // every rank. The same partition under every strategy -> the same bits. (Hybrid: every copy
  // holds the same shards, so one group's partials are the whole norm.)
  const double denom = static_cast<double>(comm_->world_size()) * micro_batches_;
  double local = 0.0;
  for (const Unit* u : trainable_units_) {
    local += util::sum_of_squares(u->grad_shard.data_ptr<float>(), u->grad_shard.numel());
  }
  at::Tensor partial = at::full({1}, local, at::kDouble);
  at::Tensor all = at::empty({shard_comm_->world_size()}, at::kDouble);
  blocking_comm([&] { shard_comm_->all_gather(partial, all); });
  double total = 0.0;
  for (int r = 0; r < shard_comm_->world_size(); ++r) total += all.data_ptr<double>()[r];
  const double norm = std::sqrt(total) / denom;
  double coef = 1.0;
  if (max_norm > 0.0 && max_norm / (norm + 1e-6) < 1.0) coef = max_norm / (norm + 1e-6);
  // Applied by the optimizer in its pass: one rounding per element, the same on every strategy.
  grad_scale_ = static_cast<float>(coef / denom);
  wait_gradient_gathers(/*complete=*/true);
  return norm;
}

std::vector<ShardedModel::TrainableView> ShardedModel::optimizer_views() {
  // The optimizer is about to change the masters: the last step's publishing all-gathers (of
  // a unit no forward has waited for since) must not be sending them any more.
  for (auto& u : units_) finish_gather(*u);
  std::vector<TrainableView> views;
  for (Unit* u : trainable_units_) {
    if (options_.strategy == Strategy::NoShard) {
      views.push_back({u->trainable->master_full(), u->grad_full, grad_scale_});
    } else {
      views.push_back({u->trainable->shard(), u->grad_shard, grad_scale_});
    }
  }
  return views;
}

void ShardedModel::after_buffer_update(size_t i) {
  TORCH_CHECK(i < trainable_units_.size(), "after_buffer_update: no trainable buffer ", i);
  if (published_.size() != trainable_units_.size()) published_.assign(trainable_units_.size(), false);
  if (published_[i]) return;
  published_[i] = true;
  Unit& u = *trainable_units_[i];
  FlatParam& f = *u.trainable;
  if (options_.strategy == Strategy::NoShard) {
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

void ShardedModel::after_optimizer_step() {
  for (size_t i = 0; i < trainable_units_.size(); ++i) after_buffer_update(i);  // those the optimizer skipped
  published_.assign(trainable_units_.size(), false);
  for (auto& u : units_) u->grad_has_data = false;
  micro_batches_ = 0;
  if (options_.prefetch && shards_params(options_.strategy)) {
    // The masters are final until the next step: the next forward's first units can come now.
    start_gather(*units_[0]);
    prefetch_from(0, +1);
  }
}

void ShardedModel::discard_gradients() {
  wait_gradient_gathers(/*complete=*/false);
  for (auto& u : units_) u->grad_has_data = false;
  micro_batches_ = 0;
}

}  // namespace zeroshard
