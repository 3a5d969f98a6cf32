// The one layer the Qwen family needs beyond the shared ones (src/nn): an Embedding with
// transformers' padding_idx. Qwen2/Qwen3 build nn.Embedding(vocab, hidden, config.pad_token_id):
// when a config.json sets pad_token_id, that row receives no gradient, which nn::Embedding does
// not offer. Normalization is nn::RMSNorm (src/nn/layers.h: float32 for reduced precision,
// float64 kept) and attention nn::attention (src/nn/attention.h), whose conventions are
// transformers' eager ones (see model.cpp).
#pragma once

#include <torch/torch.h>

namespace zeroshard::models::qwen3 {

// nn.Embedding(vocab, dim, padding_idx): rows picked by id; with padding_idx >= 0 that row's
// gradient is zero (as torch.nn.Embedding). Parameter "weight" (N(0, 1) outside DeferredInit).
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t dim, int64_t padding_idx = -1);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
  bool sparse_grad = false;  // as nn::Embedding's: set when the head is tied to this weight

 private:
  int64_t padding_idx_;
};
TORCH_MODULE(Embedding);

}  // namespace zeroshard::models::qwen3
