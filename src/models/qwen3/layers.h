// Small pieces the Qwen family needs in a form the shared ones (src/nn) do not offer; each
// gives bit-identical results to its shared counterpart in float32/bf16 and differs only where
// noted:
//  - RMSNorm: nn::RMSNorm normalizes in float32 even for float64 input; this one uses
//    nn::norm_dtype (float64 stays float64), so a float64 run checks conventions to ~1e-12.
//  - Embedding: with transformers' padding_idx (that row receives no gradient).
//  - attend(): nn::attention for float32/bf16; for float64 the same conventions computed in
//    float64 (nn::attention rounds the scores to float32 before its softmax).
#pragma once

#include "nn/attention.h"

#include <torch/torch.h>

namespace zeroshard::models::qwen3 {

// Qwen2RMSNorm / Qwen3RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)) with the normalization in
// float32 (float64 for float64 input) and the result cast back to x's dtype *before* the weight
// multiplies it. Parameter "weight" (ones outside DeferredInit).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

// nn.Embedding(vocab, dim, padding_idx): rows picked by id; with padding_idx >= 0 that row's
// gradient is zero (as torch.nn.Embedding). Parameter "weight" (N(0, 1) outside DeferredInit).
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, int64_t padding_idx = -1);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;

 private:
  int64_t padding_idx_;
};
TORCH_MODULE(Embedding);

// transformers' eager attention (repeat_kv, scores * head_dim^-0.5, masked scores at the lowest
// finite value of the dtype (finfo.min), softmax in float32, probabilities cast back to the
// query's dtype): nn::attention, or its float64 equivalent for float64 inputs.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const nn::AttentionOptions& options);

}  // namespace zeroshard::models::qwen3
