// The engine's state behind ShardedModel (include/zeroshard/shard.h): units, the strategy's
// plan, the prefetch scheduler, the gradient reducer, and the hook entry points the forward
// hooks and the autograd glue call. Internal to src/shard.
//
// Parts: StrategyPlan (what the strategy shards, decided once), PrefetchScheduler (which
// units to gather ahead), GradReducer (buckets, reductions in flight, replica all-reduce,
// full-gradient all-gathers), FlatParam (one buffer's shard, full buffer and masters),
// torch_internals.h (the libtorch internals used). Files: sharded_model.cpp (building,
// queries), unit_hooks.cpp (gather/free around forward and backward), step.cpp (backward,
// norm and clipping, the optimizer hand-over).
#pragma once

#include "shard/comm_clock.h"
#include "shard/engine_internal.h"
#include "shard/grad_reduction.h"
#include "shard/prefetch.h"
#include "shard/strategy_plan.h"
#include "shard/torch_internals.h"
#include "shard/unit.h"
#include "zeroshard/shard.h"

#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

class ShardedModel::Impl {
 public:
  Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Communicator> comm, ShardOptions options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // --- what ShardedModel's public methods do ---
  void backward(const at::Tensor& loss, bool last_micro_batch);
  double finish_gradients(double max_norm);
  void discard_gradients();
  const shard::StrategyPlan& plan() const { return plan_; }
  Communicator& comm() const { return *comm_; }
  Communicator& shard_comm() const { return *shard_comm_; }
  const std::shared_ptr<torch::nn::Module>& module() const { return module_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  std::vector<std::string> unit_names() const;
  const std::vector<std::string>& notes() const { return notes_; }
  MemoryStats memory() const;
  CommStats comm_stats() const;
  void reset_gathered_peak() { gathered_peak_ = gathered_bytes_; }
  shard::CommClock& clock() { return clock_; }
  std::vector<at::Tensor> local_shards() const;
  at::Tensor local_shard(size_t buffer) const;
  std::vector<FlatBufferInfo> flat_buffers() const;
  void for_each_full_parameter(const std::function<void(const std::string&, const at::Tensor&)>& fn);

  // --- the optimizer's hand-over (shard/engine_internal.h) ---
  std::vector<shard::TrainableView> optimizer_views();
  void after_buffer_update(size_t i);
  void after_optimizer_step();
  void set_optimizer_state_bytes(int64_t bytes) { optim_bytes_ = bytes; }

  // --- hook entry points: the unit's ForwardHooks and its autograd nodes call these ---
  void on_pre_forward(shard::Unit& unit, std::vector<at::Tensor>& inputs);
  void on_post_forward(shard::Unit& unit, std::vector<at::Tensor>& outputs);
  void on_pre_backward(shard::Unit& unit);
  void on_post_backward(shard::Unit& unit);

 private:
  void build_units();
  // Gathering a unit's sharded (or, after a step, replicated) buffers.
  void gather(shard::Unit& unit);         // start + finish
  void start_gather(shard::Unit& unit);   // allocates and issues the all-gathers, does not wait
  void finish_gather(shard::Unit& unit);  // waits for a gather in flight
  void release(shard::Unit& unit);        // frees a sharded unit's full buffers
  // Starts the gathers the scheduler chooses from position `from` of the recorded order.
  void prefetch(long from, int step);
  int live_units() const;  // non-root units whose sharded buffers are gathered
  void reduce_unit_grads(shard::Unit& unit);

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Communicator> shard_comm_;    // comm_ unless hybrid
  std::shared_ptr<Communicator> replica_comm_;  // hybrid only: this shard's owners in every copy
  ShardOptions options_;
  shard::StrategyPlan plan_;
  shard::CommClock clock_;
  shard::PrefetchScheduler prefetch_;
  std::unique_ptr<shard::GradReducer> reducer_;  // after the communicators (hybrid splits first)
  // The bytes of freed gathered / cast / converted buffers, for the next one of their size (see
  // StorageBytesPool). Declared before units_: it outlives their buffers.
  shard::StorageBytesPool bytes_pool_{size_t{16} << 20};
  std::vector<std::unique_ptr<shard::Unit>> units_;
  std::vector<shard::Unit*> trainable_units_;  // the units behind optimizer_views(), in that order
  // The hooks gather and free units: optim_grads_params, or a unit whose compute copy is cast
  // on use (no_shard in bf16).
  bool gathers_units_ = false;
  std::vector<bool> published_;                // per trainable buffer: after_buffer_update done this step
  float grad_scale_ = 1.0f;
  int micro_batches_ = 0;
  shard::MappedFiles mapped_files_;  // FrozenStorage::File: each file mapped once
  std::vector<std::string> notes_;   // ShardedModel::notes()
  int64_t gathered_bytes_ = 0;
  int64_t gathered_peak_ = 0;
  int64_t optim_bytes_ = 0;
};

// The door from engine_internal.h's free functions to a model's Impl (a friend of ShardedModel).
struct EngineAccess {
  static ShardedModel::Impl& impl(ShardedModel& model) { return *model.impl_; }
};

}  // namespace zeroshard
