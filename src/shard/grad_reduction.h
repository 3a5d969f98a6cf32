// The gradient side of the engine, one path for every strategy: per micro-batch each trainable
// buffer's local gradient is reduce-scattered over the shard group (alone, or with other small
// ones in a bucket), all-reduced across the copies when hybrid, and accumulated into this
// rank's shard. no_shard / optim then all-gather the accumulated shard into their full
// gradient during the last micro-batch's backward. Every strategy runs the same collectives on
// the same layout, which is what keeps them bitwise identical.
#pragma once

#include "shard/bucket.h"
#include "shard/comm_clock.h"
#include "shard/layout.h"
#include "shard/strategy_plan.h"
#include "zeroshard/comm.h"

#include <deque>
#include <memory>
#include <vector>

namespace zeroshard::shard {

class GradReducer {
 public:
  // replica_comm: hybrid only (null otherwise). Blocking waits are timed on `clock`.
  GradReducer(const StrategyPlan& plan, Communicator& shard_comm, Communicator* replica_comm,
              at::ScalarType reduce_dtype, int64_t bucket_bytes, CommClock& clock);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Registers a trainable flat buffer laid out over the shard group; returns its index (the
  // optimizer's buffer index: buffers are added in the engine's unit order).
  size_t add_buffer(const ShardLayout& layout);
  size_t num_buffers() const { return buffers_.size(); }

  // A micro-batch's backward starts. last: no_shard / optim all-gather each shard into the
  // full gradient as soon as it is final (any value is correct; false saves those gathers).
  void begin_micro_batch(bool last_micro_batch) { last_micro_batch_ = last_micro_batch; }
  // An empty local gradient for buffer i (padded, in the reduce dtype) for the caller to fill:
  // the full gradient buffer itself when it holds nothing yet (no_shard / optim, first
  // micro-batch, fp32 reduction), else a spare of a finished reduction or a new tensor.
  at::Tensor new_local_gradient(size_t i);
  // Buffer i's local gradient of this micro-batch is complete: reduce it (asynchronously).
  void reduce(size_t i, at::Tensor local);
  // The micro-batch's backward is over: issues the open bucket, finishes every reduction.
  void finish_micro_batch();
  // no_shard / optim: waits for the full-gradient all-gathers in flight; complete: first
  // issues those a backward(loss, false) on the last micro-batch left out.
  void wait_gradient_gathers(bool complete);
  // After an optimizer step or a dropped step: the next reduction starts a new sum.
  void start_new_sum();

  // Buffer i's accumulated reduced gradient: this rank's shard, and (gather_reduced_grads)
  // the full buffer the shard is a view into.
  const at::Tensor& shard(size_t i) const { return buffers_.at(i).shard; }
  const at::Tensor& full(size_t i) const { return buffers_.at(i).full; }

  // Persistent gradient bytes (fp32 shards, or full buffers), and the bytes held only while
  // a reduction is under way (unreduced gradients, collective buffers).
  int64_t resident_bytes() const;
  int64_t transient_bytes() const;

 private:
  struct Buffer {
    ShardLayout layout;
    at::Tensor shard;  // accumulated over micro-batches; a view into `full` when there is one
    at::Tensor full;
    bool has_data = false;
    // gather_reduced_grads: the all-gather of the accumulated shard into `full`, issued during
    // the last micro-batch's backward; full_current once issued after the shard's last change.
    WorkHandle gather;
    bool full_current = false;
  };
  // A reduce-scatter in flight: one buffer's gradient, or a bucket of small ones.
  struct Pending {
    std::vector<size_t> buffers;       // part k is buffers_[buffers[k]]
    BucketLayout layout;               // part k's shard is reduced[offsets[k], + sizes[k])
    std::vector<at::Tensor> locals;    // unreduced gradients, until the bucket is laid out
    int64_t bytes = 0;                 // of those gradients
    at::Tensor input;                  // reduce-scattered
    at::Tensor reduced;                // this rank's shard_elems elements
    WorkHandle work;                   // reduce-scatter in the shard group
    WorkHandle replica_work;           // hybrid: then the all-reduce across the copies
    const WorkHandle& last() const { return replica_work ? replica_work : work; }
  };
  void issue_bucket();
  // t shares buffer i's full gradient buffer (a local gradient written in place).
  bool is_full_buffer(size_t i, const at::Tensor& t) const;
  // Finishes reductions (oldest first) until at most max_in_flight remain; completed ones
  // are always finished, so each transient gradient is freed early.
  void drain(size_t max_in_flight);
  // Reusing the buffers of finished reductions within a micro-batch: a fresh allocation of a
  // unit's gradient (tens of MB and more) comes from the kernel zero-filled page by page on
  // first touch, which cost more than the copy into it (docs/benchmarks.md, issue 15). Spares
  // live until the micro-batch's backward ends and count as transient bytes.
  at::Tensor take_spare(int64_t numel, at::ScalarType dtype);
  void keep_spare(at::Tensor t);

  StrategyPlan plan_;
  Communicator& shard_comm_;
  Communicator* replica_comm_;
  at::ScalarType reduce_dtype_;
  CommClock& clock_;
  BucketPlanner planner_;
  std::vector<Buffer> buffers_;
  std::unique_ptr<Pending> open_;  // small gradients waiting to be reduced together
  std::deque<std::unique_ptr<Pending>> pending_;
  std::vector<at::Tensor> spares_;  // buffers of finished reductions, for the next ones
  bool last_micro_batch_ = true;
};

}  // namespace zeroshard::shard
