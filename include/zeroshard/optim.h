// Sharded AdamW (decoupled weight decay, bias correction) over the engine's fp32 master
// shards, and the learning-rate schedule.
#pragma once

#include "zeroshard/shard.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace zeroshard {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// Scalars of one AdamW step, precomputed once (in double, as torch does) for all elements.
struct AdamWStep {
  float decay;        // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float bias2_sqrt;   // sqrt(1 - beta2^t)
  float step_size;    // lr / (1 - beta1^t)
  float eps;
  float grad_scale = 1.0f;  // the gradient used is grad * grad_scale (mean + clipping, see finish_gradients)
  static AdamWStep make(const AdamWOptions& o, double lr, int64_t t);
};

// One fused elementwise pass: the gradient scaled, param, exp_avg, exp_avg_sq updated in
// place. The result of each element does not depend on n or on where the array starts
// (compiled without FMA contraction), so any shard boundary gives the same bits.
// Multithreaded over chunks (intra-op threads).
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                  const AdamWStep& s);

class ShardedAdamW {
 public:
  ShardedAdamW(std::shared_ptr<ShardedModel> model, AdamWOptions options);
  // Updates the local master shards with learning rate lr, handing each buffer to the model
  // as soon as it is updated (its all-gather then overlaps the next buffers' updates), then
  // lets the model finish publishing and clear gradients. Call after finish_gradients().
  void step(double lr);
  int64_t steps_taken() const { return t_; }
  void set_steps_taken(int64_t t) { t_ = t; }  // when resuming: bias correction continues
  // State of trainable buffer i (the engine's trainable buffers, in unit order): this rank's
  // shard, or the full buffer under no_shard.
  size_t num_buffers() const { return exp_avg_.size(); }
  at::Tensor& exp_avg(size_t i) { return exp_avg_.at(i); }
  at::Tensor& exp_avg_sq(size_t i) { return exp_avg_sq_.at(i); }
  int64_t state_bytes() const;
  const AdamWOptions& options() const { return options_; }

 private:
  std::shared_ptr<ShardedModel> model_;
  AdamWOptions options_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  int64_t t_ = 0;
};

// Linear warmup to max_lr over warmup_steps, then cosine decay to min_lr at total_steps.
// step is the 1-based optimizer step.
struct LrSchedule {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double at(int64_t step) const;
};

}  // namespace zeroshard
