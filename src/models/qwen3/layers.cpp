#include "models/qwen3/layers.h"

#include "zeroshard/nn/deferred.h"

namespace zeroshard::models::qwen3 {

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, int64_t padding_idx) : padding_idx_(padding_idx) {
  weight = register_parameter("weight", nn::new_parameter({num_embeddings, dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.normal_();
    if (padding_idx_ >= 0) weight[padding_idx_].zero_();
  }
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  return torch::embedding(weight, ids, padding_idx_, /*scale_grad_by_freq=*/false, sparse_grad);
}

}  // namespace zeroshard::models::qwen3
