#include "nn/causal_conv.h"

#include "nn/matmul.h"

#include <cmath>

namespace zeroshard::nn {

CausalConv3dImpl::CausalConv3dImpl(int64_t in_channels, int64_t out_channels, std::array<int64_t, 3> kernel,
                                   std::array<int64_t, 3> stride)
    : kernel_(kernel), stride_(stride) {
  TORCH_CHECK(stride[1] == stride[2], "CausalConv3d: the two spatial strides must be equal");
  weight = register_parameter("weight", new_parameter({out_channels, in_channels, kernel[0], kernel[1], kernel[2]}));
  bias = register_parameter("bias", new_parameter({out_channels}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels * kernel[0] * kernel[1] * kernel[2]));
    weight.uniform_(-bound, bound);
    bias.uniform_(-bound, bound);
  }
}

torch::Tensor CausalConv3dImpl::forward(const torch::Tensor& x, FeatureCache* cache) {
  const int64_t carry = cached_frames();
  torch::Tensor input = x;
  if (carry > 0) {
    torch::Tensor before;  // the frames just before x: cached ones, after zeros for the rest
    if (cache != nullptr) {
      if (cache->next == cache->slots.size()) cache->slots.emplace_back();
      torch::Tensor& slot = cache->slots[cache->next++];
      if (slot.defined()) before = slot;
      // What the next chunk needs: the last `carry` frames of (cached, x).
      const torch::Tensor seen = before.defined() ? torch::cat({before, x}, 2) : x;
      const int64_t keep = std::min(carry, seen.size(2));
      // A copy, not a view: the slot outlives this call (and may leave a checkpointed unit).
      slot = seen.narrow(2, seen.size(2) - keep, keep).clone();
    }
    const int64_t have = before.defined() ? before.size(2) : 0;
    std::vector<torch::Tensor> parts;
    if (have < carry) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape[2] = carry - have;
      parts.push_back(torch::zeros(shape, x.options()));
    }
    if (have > 0) parts.push_back(before);
    parts.push_back(x);
    input = torch::cat(parts, 2);
  }
  // Computes in the parameters' dtype (bf16 under mixed precision; the clip arrives in fp32).
  return nn::conv3d(input.to(weight.scalar_type()), weight, bias, stride_, {0, kernel_[1] / 2, kernel_[2] / 2});
}

ChannelRMSNormImpl::ChannelRMSNormImpl(int64_t channels, double eps) : eps_(eps) {
  weight = register_parameter("weight", new_parameter({channels}));
  if (!DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor ChannelRMSNormImpl::forward(const torch::Tensor& x) {
  const torch::Tensor xf = x.to(torch::kFloat);
  const torch::Tensor y = xf * torch::rsqrt(xf.pow(2).mean(1, /*keepdim=*/true) + eps_) *
                          weight.to(torch::kFloat).view({1, -1, 1, 1, 1});
  return y.to(x.scalar_type());
}

}  // namespace zeroshard::nn
