// Normalization layers of the released models, beyond nn::RMSNorm (src/nn/layers.h): layer norm
// with optional gain/bias and group norm. Statistics in float32 for reduced-precision inputs
// (float64 stays float64), the result in the input's dtype.
#pragma once

#include <torch/torch.h>

namespace zeroshard::nn {

// LayerNorm over the last dimension; `weight` and `bias` exist only when asked for (parameter
// names "weight", "bias", as torch.nn.LayerNorm).
class LayerNormImpl : public torch::nn::Module {
 public:
  LayerNormImpl(int64_t dim, double eps, bool affine = true, bool bias = true);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;  // undefined without affine / bias

 private:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

// GroupNorm over [B, C, ...] with per-channel gain and bias ("weight", "bias").
class GroupNormImpl : public torch::nn::Module {
 public:
  GroupNormImpl(int64_t groups, int64_t channels, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};
TORCH_MODULE(GroupNorm);

// The dtype reduced-precision activations are normalized in: float32, or float64 for float64.
inline at::ScalarType norm_dtype(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace zeroshard::nn
