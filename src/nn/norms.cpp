#include "nn/norms.h"

#include "zeroshard/nn/deferred.h"

namespace zeroshard::nn {

LayerNormImpl::LayerNormImpl(int64_t dim, double eps, bool affine, bool with_bias) : dim_(dim), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", new_parameter({dim}));
    if (!DeferredInit::active()) {
      torch::NoGradGuard no_grad;
      weight.fill_(1.0);
    }
    if (with_bias) bias = register_parameter("bias", new_parameter({dim}));
  }
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  const auto dt = norm_dtype(x);
  const torch::Tensor w = weight.defined() ? weight.to(dt) : torch::Tensor();
  const torch::Tensor b = bias.defined() ? bias.to(dt) : torch::Tensor();
  return torch::layer_norm(x.to(dt), {dim_}, w, b, eps_).to(x.scalar_type());
}

GroupNormImpl::GroupNormImpl(int64_t groups, int64_t channels, double eps) : groups_(groups), eps_(eps) {
  TORCH_CHECK(channels % groups == 0, "GroupNorm: ", channels, " channels are not divisible into ", groups, " groups");
  weight = register_parameter("weight", new_parameter({channels}));
  bias = register_parameter("bias", new_parameter({channels}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor GroupNormImpl::forward(const torch::Tensor& x) {
  const auto dt = norm_dtype(x);
  return torch::group_norm(x.to(dt), groups_, weight.to(dt), bias.to(dt), eps_).to(x.scalar_type());
}

}  // namespace zeroshard::nn
