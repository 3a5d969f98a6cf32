// Compiled with -ffp-contract=off (see CMakeLists.txt): the vectorized body and the scalar
// tail must round identically, or the bits would depend on the shard boundary.
#include "zeroshard/optim.h"

#include "shard/engine_internal.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace zeroshard {

AdamWStep AdamWStep::make(const AdamWOptions& o, double lr, int64_t t) {
  AdamWStep s;
  const double bias1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bias2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  s.decay = static_cast<float>(1.0 - lr * o.weight_decay);
  s.beta1 = static_cast<float>(o.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  s.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  s.step_size = static_cast<float>(lr / bias1);
  s.eps = static_cast<float>(o.eps);
  return s;
}

void adamw_update(float* __restrict param, const float* __restrict grad, float* __restrict exp_avg,
                  float* __restrict exp_avg_sq, int64_t n, const AdamWStep& s) {
  const AdamWStep c = s;  // by value: lets the compiler keep the scalars in registers
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * c.grad_scale;
      const float m = exp_avg[i] * c.beta1 + g * c.one_minus_beta1;
      const float v = exp_avg_sq[i] * c.beta2 + (g * g) * c.one_minus_beta2;
      const float denom = std::sqrt(v) / c.bias2_sqrt + c.eps;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      param[i] = param[i] * c.decay - c.step_size * (m / denom);
    }
  });
}

ShardedAdamW::ShardedAdamW(std::shared_ptr<ShardedModel> model, AdamWOptions options)
    : model_(std::move(model)), options_(options) {
  for (const auto& view : shard::optimizer_views(*model_)) {
    exp_avg_.push_back(at::zeros_like(view.master));
    exp_avg_sq_.push_back(at::zeros_like(view.master));
  }
  shard::set_optimizer_state_bytes(*model_, state_bytes());
}

int64_t ShardedAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < exp_avg_.size(); ++i) bytes += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
  return bytes;
}

void ShardedAdamW::step(double lr) {
  ++t_;
  const AdamWStep s = AdamWStep::make(options_, lr, t_);
  auto views = shard::optimizer_views(*model_);
  TORCH_CHECK(views.size() == exp_avg_.size(), "ShardedAdamW: the model's trainable buffers changed");
  for (size_t i = 0; i < views.size(); ++i) {
    AdamWStep si = s;
    si.grad_scale = views[i].grad_scale;
    adamw_update(views[i].master.data_ptr<float>(), views[i].grad.data_ptr<float>(), exp_avg_[i].data_ptr<float>(),
                 exp_avg_sq_[i].data_ptr<float>(), views[i].master.numel(), si);
    shard::after_buffer_update(*model_, i);
  }
  shard::after_optimizer_step(*model_);
}

}  // namespace zeroshard
