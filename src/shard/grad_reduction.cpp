#include "shard/grad_reduction.h"

#include <stdexcept>
#include <string>

namespace zeroshard::shard {

namespace {
// Unreduced full gradients alive at once (they are what sharding the gradients saves).
constexpr size_t kMaxReductionsInFlight = 2;
}  // namespace

GradReducer::GradReducer(const StrategyPlan& plan, Communicator& shard_comm, Communicator* replica_comm,
                         at::ScalarType reduce_dtype, int64_t bucket_bytes, CommClock& clock)
    : plan_(plan), shard_comm_(shard_comm), replica_comm_(replica_comm), reduce_dtype_(reduce_dtype), clock_(clock),
      planner_(bucket_bytes) {}

size_t GradReducer::add_buffer(const ShardLayout& L) {
  Buffer b;
  b.layout = L;
  const int rank = shard_comm_.rank();
  if (plan_.gather_reduced_grads) {
    b.full = at::zeros({L.padded}, at::kFloat);
    b.shard = b.full.narrow(0, L.shard_begin(rank), L.shard_size);
  } else {
    b.shard = at::zeros({L.shard_size}, at::kFloat);
  }
  buffers_.push_back(std::move(b));
  return buffers_.size() - 1;
}

at::Tensor GradReducer::new_local_gradient(size_t i) {
  const Buffer& b = buffers_.at(i);
  // no_shard / optim, first micro-batch of a step: the full gradient buffer holds nothing yet
  // and receives the reduced shard only after the reduce-scatter has read all of it, so the
  // local gradient is written there (fp32 reduction) instead of into a second full-size buffer.
  // The collective reads the same values either way.
  if (b.full.defined() && !b.has_data && !b.gather && reduce_dtype_ == b.full.scalar_type()) return b.full;
  return take_spare(b.layout.padded, reduce_dtype_);
}

at::Tensor GradReducer::take_spare(int64_t numel, at::ScalarType dtype) {
  for (auto it = spares_.begin(); it != spares_.end(); ++it) {
    if (it->numel() == numel && it->scalar_type() == dtype) {
      at::Tensor t = std::move(*it);
      spares_.erase(it);
      return t;
    }
  }
  return at::empty({numel}, dtype);
}

void GradReducer::keep_spare(at::Tensor t) {
  if (t.defined() && t.is_contiguous() && t.storage_offset() == 0) spares_.push_back(std::move(t));
}

bool GradReducer::is_full_buffer(size_t i, const at::Tensor& t) const {
  const at::Tensor& full = buffers_.at(i).full;
  return full.defined() && t.defined() && t.is_alias_of(full);
}

void GradReducer::reduce(size_t i, at::Tensor local) {
  const int64_t bytes = static_cast<int64_t>(local.nbytes());
  const BucketPlanner::Decision d = planner_.add(bytes);
  if (d.issue_before) issue_bucket();  // keep the issue order the order buffers finished in
  if (!open_) open_ = std::make_unique<Pending>();
  Pending& b = *open_;
  b.buffers.push_back(i);
  b.layout.add(buffers_.at(i).layout.shard_size);
  b.locals.push_back(std::move(local));
  b.bytes += bytes;
  if (d.issue_after) issue_bucket();
}

void GradReducer::issue_bucket() {
  if (!open_) return;
  std::unique_ptr<Pending> p = std::move(open_);
  if (p->locals.size() == 1) {
    p->input = std::move(p->locals[0]);
    p->locals[0].reset();
  } else {
    p->input = pack_rank_by_rank(p->layout, p->locals, shard_comm_.world_size(), reduce_dtype_);
  }
  p->reduced = take_spare(p->layout.shard_elems, reduce_dtype_);
  p->work = shard_comm_.reduce_scatter_async(p->input, p->reduced);
  // Hybrid: the copies' partial sums of this shard, summed in a fixed ring order (every copy
  // gets the same bits). Issued now, in program order: it runs once the reduce-scatter is done.
  if (replica_comm_ != nullptr) p->replica_work = replica_comm_->all_reduce_async(p->reduced);
  pending_.push_back(std::move(p));
  drain(kMaxReductionsInFlight);
}

void GradReducer::drain(size_t max_in_flight) {
  // Finishing a reduction early (as soon as it completed) frees its buffers sooner, but when
  // finishing issues a collective (the gradient all-gather below) it must happen at the same
  // point of the program on every rank: then only the count decides, never the timing.
  const bool issues = last_micro_batch_ && plan_.gather_reduced_grads;
  while (!pending_.empty() &&
         (pending_.size() > max_in_flight || (!issues && pending_.front()->last()->completed()))) {
    Pending& p = *pending_.front();
    clock_.blocked([&] {
      p.work->wait();
      if (p.replica_work) p.replica_work->wait();
    });
    for (size_t k = 0; k < p.buffers.size(); ++k) {
      Buffer& b = buffers_[p.buffers[k]];
      const at::Tensor mine = p.reduced.narrow(0, p.layout.offsets[k], p.layout.sizes[k]);
      if (b.gather) {  // never change a shard an all-gather is still sending
        clock_.blocked([&] { b.gather->wait(); });
        b.gather.reset();
      }
      if (b.has_data) {
        b.shard.add_(mine);
      } else {
        b.shard.copy_(mine);
        b.has_data = true;
      }
      b.full_current = false;
      if (issues) {
        // The shard is final for this step: publish it into every rank's full gradient now,
        // behind the rest of the backward (the shard is a view into the full buffer).
        b.gather = shard_comm_.all_gather_async(b.shard, b.full);
        b.full_current = true;
      }
    }
    // Its buffers are free once every part is copied out (a local written into the full
    // gradient buffer is that buffer, not a spare).
    if (!(p.buffers.size() == 1 && is_full_buffer(p.buffers[0], p.input))) keep_spare(std::move(p.input));
    keep_spare(std::move(p.reduced));
    pending_.pop_front();
  }
}

void GradReducer::finish_micro_batch() {
  planner_.close();
  issue_bucket();
  drain(0);
  spares_.clear();
}

void GradReducer::wait_gradient_gathers(bool complete) {
  if (complete && plan_.gather_reduced_grads) {
    for (auto& b : buffers_) {
      if (!b.full_current) {  // backward(loss, false) on the last micro-batch: gather now
        b.gather = shard_comm_.all_gather_async(b.shard, b.full);
        b.full_current = true;
      }
    }
  }
  for (auto& b : buffers_) {
    if (!b.gather) continue;
    clock_.blocked([&] { b.gather->wait(); });
    b.gather.reset();
  }
}

void GradReducer::start_new_sum() {
  for (auto& b : buffers_) b.has_data = false;
}

int64_t GradReducer::resident_bytes() const {
  int64_t bytes = 0;  // reduced gradients are fp32 whatever the compute dtype
  for (const auto& b : buffers_) {
    bytes += (plan_.shard_grads ? b.layout.shard_size : b.layout.padded) * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

int64_t GradReducer::transient_bytes() const {
  int64_t bytes = 0;  // a local gradient written into the full gradient buffer is resident, not counted
  if (open_) {
    for (size_t k = 0; k < open_->locals.size(); ++k) {
      if (!is_full_buffer(open_->buffers[k], open_->locals[k])) bytes += static_cast<int64_t>(open_->locals[k].nbytes());
    }
  }
  for (const auto& p : pending_) {
    if (!(p->buffers.size() == 1 && is_full_buffer(p->buffers[0], p->input))) {
      bytes += static_cast<int64_t>(p->input.nbytes());
    }
    bytes += static_cast<int64_t>(p->reduced.nbytes());
  }
  for (const auto& t : spares_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

}  // namespace zeroshard::shard
