#include "models/llama/llama.h"

#include "nn/cross_entropy.h"
#include "nn/init.h"
#include "nn/matmul.h"
#include "util/text.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models {

int64_t LlamaConfig::num_params() const {
  const int64_t hd = head_dim();
  const int64_t attn = dim * n_heads * hd + 2 * dim * n_kv_heads * hd + n_heads * hd * dim;
  const int64_t ffn = moe.enabled() ? moe.num_params(dim, ffn_hidden) : 3 * dim * ffn_hidden;
  const int64_t block = attn + ffn + 2 * dim;
  return vocab_size * dim * (tie_embeddings ? 1 : 2) + n_layers * block + dim;
}

void LlamaConfig::validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("model config: " + what);
  };
  need(vocab_size > 0, "vocab_size must be > 0, got " + std::to_string(vocab_size));
  need(dim > 0, "dim must be > 0, got " + std::to_string(dim));
  need(n_layers >= 0, "n_layers must be >= 0, got " + std::to_string(n_layers));
  need(n_heads > 0 && dim % n_heads == 0,
       "dim (" + std::to_string(dim) + ") must be a positive multiple of n_heads (" + std::to_string(n_heads) + ")");
  need((dim / n_heads) % 2 == 0, "head_dim = dim / n_heads must be even for RoPE, got " + std::to_string(dim / n_heads));
  need(n_kv_heads > 0 && n_heads % n_kv_heads == 0,
       "n_heads (" + std::to_string(n_heads) + ") must be a multiple of n_kv_heads (" + std::to_string(n_kv_heads) + ")");
  need(ffn_hidden > 0, "ffn_hidden must be > 0, got " + std::to_string(ffn_hidden));
  need(max_seq_len > 0, "max_seq_len must be > 0, got " + std::to_string(max_seq_len));
  need(norm_eps > 0, "norm_eps must be > 0");
  moe.validate();
}

AttentionImpl::AttentionImpl(const LlamaConfig& c, std::shared_ptr<const nn::RopeTables> rope)
    : n_heads_(c.n_heads), n_kv_heads_(c.n_kv_heads), head_dim_(c.head_dim()), rope_(std::move(rope)) {
  auto lin = [](int64_t in, int64_t out) { return nn::Linear(in, out); };
  wq = register_module("wq", lin(c.dim, c.n_heads * head_dim_));
  wk = register_module("wk", lin(c.dim, c.n_kv_heads * head_dim_));
  wv = register_module("wv", lin(c.dim, c.n_kv_heads * head_dim_));
  wo = register_module("wo", lin(c.n_heads * head_dim_, c.dim));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, torch::Tensor* cache_k, torch::Tensor* cache_v,
                                     int64_t offset) {
  const int64_t B = x.size(0), T = x.size(1);
  auto q = wq(x).view({B, T, n_heads_, head_dim_}).transpose(1, 2);
  auto k = wk(x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  auto v = wv(x).view({B, T, n_kv_heads_, head_dim_}).transpose(1, 2);
  q = nn::apply_rope(q, *rope_, offset);
  k = nn::apply_rope(k, *rope_, offset);
  if (cache_k != nullptr) {
    if (cache_k->defined()) {
      k = torch::cat({*cache_k, k}, 2);
      v = torch::cat({*cache_v, v}, 2);
    }
    *cache_k = k;
    *cache_v = v;
  }
  auto out = nn::causal_attention(q, k, v);
  return wo(out.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_}));
}

LlamaBlockImpl::LlamaBlockImpl(const LlamaConfig& c, std::shared_ptr<const nn::RopeTables> rope) {
  attention_norm = register_module("attention_norm", nn::RMSNorm(c.dim, c.norm_eps));
  attention = register_module("attention", Attention(c, rope));
  ffn_norm = register_module("ffn_norm", nn::RMSNorm(c.dim, c.norm_eps));
  if (c.moe.enabled()) {
    moe = register_module("feed_forward", MoeFeedForward(c.dim, c.ffn_hidden, c.moe));
    aux_loss_coef_ = c.moe.aux_loss_coef;
  } else {
    feed_forward = register_module("feed_forward", nn::FeedForward(c.dim, c.ffn_hidden));
  }
}

torch::Tensor LlamaBlockImpl::forward(const torch::Tensor& x, KVCache* cache, size_t index) {
  return call_hooked(x, [this, cache, index](const torch::Tensor& in) {
    auto h = in + (cache == nullptr ? attention(attention_norm(in))
                                    : attention(attention_norm(in), &cache->keys[index], &cache->values[index],
                                                cache->length));
    if (!moe) return h + feed_forward(ffn_norm(h));
    MoeOutput routed = moe(ffn_norm(h));
    last_aux_loss = routed.aux_loss.detach();
    last_tokens_per_expert = routed.tokens_per_expert;
    // The block's output carries the aux loss's gradient (see attach_aux_loss).
    return attach_aux_loss(h + routed.out, routed.aux_loss, aux_loss_coef_);
  });
}

LlamaImpl::LlamaImpl(const LlamaConfig& c) : config_(c) {
  c.validate();
  rope_ = std::make_shared<nn::RopeTables>(nn::RopeTables::make(c.max_seq_len, c.head_dim(), c.rope_theta));
  tok_embeddings = register_module("tok_embeddings", nn::Embedding(c.vocab_size, c.dim));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layers; ++i) layers->push_back(LlamaBlock(c, rope_));
  norm = register_module("norm", nn::RMSNorm(c.dim, c.norm_eps));
  if (!c.tie_embeddings) {
    output = register_module("output", nn::Linear(c.dim, c.vocab_size));
  } else {
    tok_embeddings->sparse_grad = true;  // its rows are added into the head's dense gradient
  }
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens, KVCache* cache) {
  return call_hooked(tokens, [this, cache](const torch::Tensor& toks) {
    TORCH_CHECK(toks.dim() == 2, "Llama: tokens must be [batch, seq], got ", toks.sizes());
    const int64_t past = cache == nullptr ? 0 : cache->length;
    TORCH_CHECK(past + toks.size(1) <= config_.max_seq_len, "Llama: sequence length ", past + toks.size(1),
                " exceeds max_seq_len ", config_.max_seq_len);
    if (cache != nullptr) {
      cache->keys.resize(layers->size());
      cache->values.resize(layers->size());
    }
    auto h = tok_embeddings(toks);
    for (size_t i = 0; i < layers->size(); ++i) h = layers[i]->as<LlamaBlockImpl>()->forward(h, cache, i);
    if (cache != nullptr) cache->length = past + toks.size(1);
    h = norm(h);
    const auto& w = config_.tie_embeddings ? tok_embeddings->weight : output->weight;
    return nn::linear(h, w);
  });
}

double LlamaImpl::last_aux_loss() const {
  double sum = 0.0;
  for (const auto& layer : *layers) {
    const auto& aux = layer->as<LlamaBlockImpl>()->last_aux_loss;
    if (aux.defined()) sum += aux.item<double>();
  }
  return sum;
}

torch::Tensor LlamaImpl::last_tokens_per_expert() const {
  std::vector<torch::Tensor> rows;
  for (const auto& layer : *layers) rows.push_back(layer->as<LlamaBlockImpl>()->last_tokens_per_expert);
  return torch::stack(rows);
}

void LlamaImpl::reset_parameters(uint64_t seed) {
  for (auto& item : named_parameters(/*recurse=*/true)) llama_init(config_, seed, item.key(), item.value());
}

void llama_init(const LlamaConfig& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  const double std = 0.02;
  const double out_std = std / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(1, c.n_layers)));
  if (nn::is_lora_parameter(name)) {
    nn::lora_init(seed, name, param);
  } else if (param.dim() == 1) {
    nn::init_constant(param, 1.0);  // norm weights
  } else if (util::ends_with(name, "wo.weight") || util::ends_with(name, "w2.weight")) {
    nn::init_normal(param, seed, name, out_std);  // residual-branch outputs, scaled by depth
  } else {
    nn::init_normal(param, seed, name, std);
  }
}

torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // torch's cross_entropy(logits.float(), targets) without the fp32 copy (nn/cross_entropy.h).
  return nn::cross_entropy_mean(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace zeroshard::models
