// A Llama-style decoder LM: RMSNorm, RoPE, causal grouped-query attention, SwiGLU, optional
// tied embeddings. Plain torch::nn modules: the blocks and the root are HookableModules so an
// engine can wrap them, but nothing here knows about sharding.
#pragma once

#include "models/moe/moe.h"
#include "nn/layers.h"
#include "zeroshard/nn/hookable.h"

#include <torch/torch.h>

#include <memory>

namespace zeroshard::models {

struct LlamaConfig {
  int64_t vocab_size = 256;
  int64_t dim = 128;
  int64_t n_layers = 2;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t ffn_hidden = 352;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;
  int64_t max_seq_len = 256;
  MoeConfig moe;  // n_experts > 0: every block's feed-forward is routed (series moe), each
                  // expert a SwiGLU of ffn_hidden

  int64_t head_dim() const { return dim / n_heads; }
  int64_t num_params() const;
  void validate() const;  // throws std::invalid_argument naming the bad field
};

// Keys and values of the tokens seen so far, per block, for generation without recomputing
// the prefix: each forward with a cache appends its tokens and attends over all of them.
struct KVCache {
  std::vector<torch::Tensor> keys, values;  // per block: [B, n_kv_heads, length, head_dim]
  int64_t length = 0;                       // tokens cached
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const LlamaConfig& c, std::shared_ptr<const nn::RopeTables> rope);
  // cache_k / cache_v (null: no cache) hold the earlier tokens' keys/values and get this
  // call's appended; `offset` is the position of x's first token.
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* cache_k = nullptr, torch::Tensor* cache_v = nullptr,
                        int64_t offset = 0);
  nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  std::shared_ptr<const nn::RopeTables> rope_;
};
TORCH_MODULE(Attention);

class LlamaBlockImpl : public nn::HookableModule {
 public:
  LlamaBlockImpl(const LlamaConfig& c, std::shared_ptr<const nn::RopeTables> rope);
  torch::Tensor forward(const torch::Tensor& x, KVCache* cache = nullptr, size_t index = 0);
  nn::RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  Attention attention{nullptr};
  nn::FeedForward feed_forward{nullptr};  // dense blocks
  MoeFeedForward moe{nullptr};            // routed blocks (registered as "feed_forward" too)
  // The last forward's load-balancing loss (detached) and routed tokens per expert
  // (int64 [n_experts]); undefined for dense blocks.
  torch::Tensor last_aux_loss, last_tokens_per_expert;

 private:
  double aux_loss_coef_ = 0.0;
};
TORCH_MODULE(LlamaBlock);

class LlamaImpl : public nn::HookableModule {
 public:
  explicit LlamaImpl(const LlamaConfig& c);
  // tokens [B, T] int64 -> logits [B, T, vocab] float. With a cache, tokens continue the
  // cached sequence (positions cache->length ...) and are appended to it.
  torch::Tensor forward(const torch::Tensor& tokens, KVCache* cache = nullptr);
  // Re-initializes every parameter from (seed, name) with llama_init (not for a model built
  // inside nn::DeferredInit: fully_shard materializes those from a ParamSource).
  void reset_parameters(uint64_t seed);
  const LlamaConfig& config() const { return config_; }
  // MoE: the sum over blocks of the last forward's load-balancing losses (0 for dense).
  double last_aux_loss() const;
  // MoE: routed (token, slot) pairs per block and expert in the last forward, int64 [L, E].
  torch::Tensor last_tokens_per_expert() const;

  nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  nn::RMSNorm norm{nullptr};
  nn::Linear output{nullptr};  // null when tie_embeddings

 private:
  LlamaConfig config_;
  std::shared_ptr<const nn::RopeTables> rope_;
};
TORCH_MODULE(Llama);

// The initial value of parameter `name`, keyed by (seed, name): norm weights 1, residual
// output projections N(0, 0.02 / sqrt(2 n_layers)), everything else N(0, 0.02).
void llama_init(const LlamaConfig& c, uint64_t seed, const std::string& name, at::Tensor& param);

// Mean next-token cross entropy over all positions, in fp32.
torch::Tensor lm_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace zeroshard::models
