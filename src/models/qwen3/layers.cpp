#include "models/qwen3/layers.h"

#include "nn/matmul.h"
#include "nn/norms.h"
#include "zeroshard/nn/deferred.h"

#include <cmath>
#include <limits>

namespace zeroshard::models::qwen3 {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", nn::new_parameter({dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.fill_(1.0);
  }
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // The same operations as nn::RMSNorm (bitwise equal for float32/bf16), in nn::norm_dtype.
  const auto xf = x.to(nn::norm_dtype(x));
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return normed.to(x.scalar_type()) * weight;
}

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t dim, int64_t padding_idx) : padding_idx_(padding_idx) {
  weight = register_parameter("weight", nn::new_parameter({num_embeddings, dim}));
  if (!nn::DeferredInit::active()) {
    torch::NoGradGuard no_grad;
    weight.normal_();
    if (padding_idx_ >= 0) weight[padding_idx_].zero_();
  }
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids, padding_idx_); }

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const nn::AttentionOptions& o) {
  if (q.scalar_type() != at::kDouble) return nn::attention(q, k, v, o);
  // float64: nn::attention's conventions step by step, without its float32 scores.
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  TORCH_CHECK(H % Hkv == 0, "attention: ", H, " query heads are not a multiple of ", Hkv, " key/value heads");
  const at::Tensor kk = H == Hkv ? k : k.repeat_interleave(H / Hkv, 1);
  const at::Tensor vv = H == Hkv ? v : v.repeat_interleave(H / Hkv, 1);
  at::Tensor scores = at::matmul(q, kk.transpose(-2, -1));
  scores = o.scale ? scores * *o.scale : scores / std::sqrt(static_cast<double>(D));
  at::Tensor keep;
  auto combine = [&keep](const at::Tensor& m) { keep = keep.defined() ? keep.logical_and(m) : m; };
  if (o.causal) {
    TORCH_CHECK(Tk >= Tq, "attention: causal with ", Tk, " keys for ", Tq, " queries");
    combine(at::ones({Tq, Tk}, at::kBool).tril(Tk - Tq).view({1, 1, Tq, Tk}));
  }
  if (o.key_padding.defined()) {
    TORCH_CHECK(o.key_padding.sizes() == at::IntArrayRef({B, Tk}), "attention: key_padding must be [", B, ", ", Tk,
                "], got ", o.key_padding.sizes());
    combine(o.key_padding.to(at::kBool).view({B, 1, 1, Tk}));
  }
  if (o.query_segments.defined() || o.key_segments.defined()) {
    TORCH_CHECK(o.query_segments.defined() && o.key_segments.defined(),
                "attention: query_segments and key_segments go together");
    combine(o.query_segments.view({B, 1, Tq, 1}).eq(o.key_segments.view({B, 1, 1, Tk})));
  }
  if (keep.defined()) scores = scores.masked_fill(keep.logical_not(), std::numeric_limits<double>::lowest());
  return at::matmul(at::softmax(scores, -1), vv);
}

}  // namespace zeroshard::models::qwen3
