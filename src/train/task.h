// What a model series brings to the trainer: its module (built without parameter bytes), the
// seeded value of each parameter, this rank's micro-batches and their loss, and its own
// per-step figures. Everything else — sharding, optimizer, checkpoints, metrics, signals — the
// trainer does alike for every series. A series makes its Task through models::Series.
#pragma once

#include "train/config.h"
#include "zeroshard/comm.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::train {

class Task {
 public:
  virtual ~Task() = default;
  // The model, built inside nn::DeferredInit (LoRA adapters already attached, if asked).
  virtual std::shared_ptr<nn::HookableModule> module() const = 0;
  // The seeded initial value of parameter `name` (the same for every world size and strategy).
  virtual void init_parameter(const std::string& name, at::Tensor& param) const = 0;
  // Where a fresh run's values come from: `seeded` (init_parameter), unless the series loads
  // parts from files (a pipeline's frozen towers).
  virtual std::shared_ptr<ParamSource> initial_source(std::shared_ptr<ParamSource> seeded) const { return seeded; }
  // The loss of micro-batch `micro` of optimizer step `step` (0-based) on this rank.
  virtual at::Tensor loss(int64_t step, int64_t micro) = 0;
  // What one optimizer step trains on over all ranks, e.g. 4096 "tokens" or 8 "clips".
  virtual double items_per_step() const = 0;
  virtual std::string item_name() const = 0;
  // Model FLOPs to train on one item (forward and backward, all ranks' work counted once),
  // for the throughput/MFU figures (TFLOP/s per rank, MFU in the progress line and
  // metrics.jsonl). Matmul FLOPs as torchtitan counts them: 2 per multiply-add, backward twice
  // the forward for trained paths (docs/throughput.md says how each series counts). 0: the
  // series does not say, and no FLOPs are reported.
  virtual double flops_per_item() const { return 0.0; }
  // run.dump_batches: this rank's inputs of steps [0, steps) as raw bytes.
  virtual void dump_batches(const std::string& path, int64_t steps) const = 0;
  // After a step's micro-batches, on every rank (may run collectives): the series' figures for
  // metrics.jsonl, the same on every rank; resets them for the next step.
  virtual nlohmann::json finish_step(Communicator& comm) {
    (void)comm;
    return nlohmann::json::object();
  }
  // Whether the series holds out validation data (train.eval_every needs it).
  virtual bool has_validation() const { return false; }
  // The validation figures (train.eval_every), e.g. {"val_loss": ...}, the same on every rank: a
  // collective every rank runs after the same step (forwards without gradients through the
  // sharded module). They go into that step's metrics.jsonl line.
  virtual nlohmann::json evaluate(Communicator& comm) {
    (void)comm;
    return nlohmann::json::object();
  }
  // Once, after the task is made and before notes() and the first step, on every rank (may run
  // collectives): the ranks agree on what the data holds where no rank can tell alone, e.g. which
  // files read under <series>.on_bad_file=skip with the towers in the loop, each rank reading its
  // share.
  virtual void agree_on_data(Communicator& comm) { (void)comm; }
  // What the task found in its data (sizes, splits, truncations): logged by every rank, printed
  // by rank 0 at the start of training.
  virtual std::vector<std::string> notes() const { return {}; }
  // Linear layers that got LoRA adapters (empty without lora.rank).
  const std::vector<std::string>& adapted() const { return adapted_; }

 protected:
  std::vector<std::string> adapted_;
};

// A series trained on generated samples (images, clips) numbered 0, 1, 2, ...: micro-batch m of
// step s on rank r takes consecutive numbers, so a step's global batch is the same set for
// every world size with the same global batch (and so are its seeded noises).
class GeneratedSampleTask : public Task {
 public:
  GeneratedSampleTask(const TrainConfig& cfg, int rank, int world) : cfg_(cfg), rank_(rank), world_(world) {}
  double items_per_step() const override;
  void dump_batches(const std::string& path, int64_t steps) const override;

 protected:
  int64_t first_index(int64_t step, int64_t micro) const;
  // micro_batch_size samples, numbers first .. first + micro_batch_size - 1.
  virtual at::Tensor samples(int64_t first) const = 0;
  TrainConfig cfg_;
  int rank_, world_;
};

// Where a fresh run's parameter values come from: model.init_from (a LoRA run's fresh adapters
// seeded), else the task's initial_source over its seeded init. The trainer's, and `plan`'s to
// see which frozen parameters lie in files (model.frozen_storage=file).
std::shared_ptr<ParamSource> initial_param_source(const TrainConfig& cfg, const Task& task);

}  // namespace zeroshard::train
