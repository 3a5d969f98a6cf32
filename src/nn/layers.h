// Layers shared by the model zoo: RMSNorm, rotary position embeddings, causal attention.
#pragma once

#include <torch/torch.h>

namespace zeroshard::nn {

// x * rsqrt(mean(x^2) + eps) * weight, normalized in fp32.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// cos/sin tables for the half-split ("rotate_half") RoPE convention, shape [T, head_dim].
struct RopeTables {
  torch::Tensor cos, sin;
  static RopeTables make(int64_t max_seq_len, int64_t head_dim, double theta);
};

// x: [B, H, T, head_dim]; positions 0..T-1.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTables& rope);

// Causal scaled-dot-product attention. q: [B, H, T, D]; k, v: [B, Hkv, T, D] with H a
// multiple of Hkv (grouped-query: kv head j serves q heads j*H/Hkv .. (j+1)*H/Hkv - 1).
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

}  // namespace zeroshard::nn
