#include "models/text/text_encoder.h"

namespace zeroshard::models {

TextEncoderLayerImpl::TextEncoderLayerImpl(const TextEncoderConfig& c, std::shared_ptr<const nn::RopeTables> rope)
    : n_heads_(c.n_heads), rope_(std::move(rope)) {
  norm1 = register_module("norm1", nn::RMSNorm(c.dim, c.norm_eps));
  wq = register_module("wq", nn::Linear(c.dim, c.dim));
  wk = register_module("wk", nn::Linear(c.dim, c.dim));
  wv = register_module("wv", nn::Linear(c.dim, c.dim));
  wo = register_module("wo", nn::Linear(c.dim, c.dim));
  norm2 = register_module("norm2", nn::RMSNorm(c.dim, c.norm_eps));
  ffn = register_module("ffn", nn::FeedForward(c.dim, c.ffn_hidden));
}

torch::Tensor TextEncoderLayerImpl::forward(const torch::Tensor& x) {
  return call_hooked(x, [this](const torch::Tensor& in) {
    const int64_t B = in.size(0), T = in.size(1), D = in.size(2), hd = D / n_heads_;
    const torch::Tensor h = norm1(in);
    auto heads = [&](nn::Linear& w) { return w(h).view({B, T, n_heads_, hd}).transpose(1, 2); };
    const torch::Tensor q = nn::apply_rope(heads(wq), *rope_), k = nn::apply_rope(heads(wk), *rope_);
    const torch::Tensor a = nn::full_attention(q, k, heads(wv)).transpose(1, 2).reshape({B, T, D});
    const torch::Tensor y = in + wo(a);
    return y + ffn(norm2(y));
  });
}

TextEncoderImpl::TextEncoderImpl(const TextEncoderConfig& c) : config_(c) {
  TORCH_CHECK(c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0, "text encoder: dim ", c.dim,
              " must be a multiple of n_heads ", c.n_heads, " with an even head size");
  auto rope = std::make_shared<const nn::RopeTables>(nn::RopeTables::make(c.max_len, c.dim / c.n_heads, c.rope_theta));
  embed = register_module("embed", nn::Embedding(256, c.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layers; ++i) layers->push_back(TextEncoderLayer(c, rope));
  norm = register_module("norm", nn::RMSNorm(c.dim, c.norm_eps));
}

TextEncoding TextEncoderImpl::forward(const torch::Tensor& tokens) {
  torch::Tensor h = embed(tokens);
  for (const auto& l : *layers) h = l->as<TextEncoderLayerImpl>()->forward(h);
  TextEncoding out;
  out.hidden = norm(h);
  out.pooled = out.hidden.mean(1);
  return out;
}

torch::Tensor caption_tokens(const std::string& caption, int64_t max_len) {
  torch::Tensor t = torch::zeros({max_len}, torch::kLong);
  for (int64_t i = 0; i < max_len && i < static_cast<int64_t>(caption.size()); ++i) {
    t[i] = static_cast<int64_t>(static_cast<unsigned char>(caption[static_cast<size_t>(i)]));
  }
  return t;
}

}  // namespace zeroshard::models
