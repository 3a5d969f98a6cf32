// T5 encoders as the released video/image pipelines use them, in one implementation:
//  - umT5 (Wan 2.1's text encoder, umt5-xxl): every layer owns a relative-position table;
//  - T5 v1.1 (FLUX.1's text_encoder_2, t5-v1_1-xxl): one table, built once, added in every layer.
// Both: pre-norm blocks with T5 RMS norms (no mean subtraction, no bias), attention without
// the 1/sqrt(head_dim) scaling, a gated-GELU (tanh) feed-forward, no biases anywhere,
// unscaled token embeddings, a final norm.
//
// The modules carry the names of Wan's T5Encoder (wan/modules/t5.py, the keys of Wan's
// umt5-xxl .pth); hf_t5_name_map() maps them to transformers' T5EncoderModel / UMT5EncoderModel
// names (FLUX.1-dev text_encoder_2, the Wan -Diffusers text_encoder). The blocks are
// HookableModules (sharding units); the shared table lives in the root unit and reaches the
// blocks as a tensor input.
#pragma once

#include "nn/layers.h"
#include "nn/name_map.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace zeroshard::models::t5 {

struct T5Config {
  int64_t vocab_size = 256384;
  int64_t dim = 4096;
  int64_t dim_attn = 4096;  // num_heads * head_dim
  int64_t dim_ffn = 10240;
  int64_t num_heads = 64;
  int64_t num_layers = 24;
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  bool shared_pos = false;  // true: one table for all layers (T5 v1.1); false: one per layer (umT5)
  double eps = 1e-6;

  int64_t head_dim() const { return dim_attn / num_heads; }
  void validate() const;  // throws std::invalid_argument naming the field
  int64_t num_params() const;  // counted on a model built inside nn::DeferredInit

  // Wan's T5Encoder keyword names (vocab_size, dim, dim_attn, dim_ffn, num_heads,
  // encoder_layers, num_buckets, shared_pos), as in wan/modules/t5.py's umt5_xxl config.
  // `_hf_config.relative_attention_max_distance` (when present) sets max_distance.
  static T5Config from_wan_json(const nlohmann::json& j, const std::string& source);
  // transformers' T5Config / UMT5Config (d_model, d_kv, d_ff, num_heads, num_layers,
  // relative_attention_num_buckets, relative_attention_max_distance, layer_norm_epsilon,
  // vocab_size; feed_forward_proj must be "gated-gelu"). shared_pos from model_type: "t5" -> one
  // table, "umt5" -> one per layer.
  static T5Config from_hf_json(const nlohmann::json& j, const std::string& source);
};

// Published configurations.
T5Config umt5_xxl();     // Wan 2.1's text encoder: 5,680,910,336 parameters (encoder only)
T5Config t5_v1_1_xxl();  // FLUX.1's text_encoder_2: 4,762,310,656 parameters

// x * rsqrt(mean(x^2) + eps) * weight over the last dimension; statistics in float32 for
// reduced precision (float64 stays float64). Parameter "weight".
class T5LayerNormImpl : public torch::nn::Module {
 public:
  T5LayerNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(T5LayerNorm);

// The relative-position bias: table "embedding.weight" [num_buckets, num_heads];
// forward(L) -> [1, heads, L, L] with bias[h, i, j] = table[bucket(j - i), h].
class T5RelativeEmbeddingImpl : public torch::nn::Module {
 public:
  T5RelativeEmbeddingImpl(int64_t num_buckets, int64_t num_heads, int64_t max_distance);
  torch::Tensor forward(int64_t length);
  nn::Embedding embedding{nullptr};

 private:
  int64_t num_buckets_, max_distance_;
};
TORCH_MODULE(T5RelativeEmbedding);

// Bidirectional T5 buckets of rel = j - i: half the buckets per direction (+half when j > i);
// |rel| < half/2 exact, then logarithmic up to max_distance, capped at half - 1. [lq, lk] int64.
torch::Tensor relative_position_buckets(int64_t lq, int64_t lk, int64_t num_buckets, int64_t max_distance);

class T5AttentionImpl : public torch::nn::Module {
 public:
  T5AttentionImpl(int64_t dim, int64_t dim_attn, int64_t num_heads);
  // x [B, L, dim]; key_mask [B, L] int (0 = padding) or undefined; bias [1 or B, H, L, L].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask, const torch::Tensor& bias);
  nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};

 private:
  int64_t num_heads_;
};
TORCH_MODULE(T5Attention);

// fc2(fc1(x) * gelu_tanh(gate.0(x))).
class T5FeedForwardImpl : public torch::nn::Module {
 public:
  T5FeedForwardImpl(int64_t dim, int64_t dim_ffn);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear gate0{nullptr}, fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(T5FeedForward);

// One encoder layer (Wan: T5SelfAttention): x += attn(norm1 x); x += ffn(norm2 x).
class T5BlockImpl : public nn::HookableModule {
 public:
  explicit T5BlockImpl(const T5Config& c);
  // shared_bias: the shared table's bias (shared_pos), else undefined (the layer's own table).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask, const torch::Tensor& shared_bias);
  T5LayerNorm norm1{nullptr}, norm2{nullptr};
  T5Attention attn{nullptr};
  T5FeedForward ffn{nullptr};
  T5RelativeEmbedding pos_embedding{nullptr};  // null with shared_pos
};
TORCH_MODULE(T5Block);

class T5EncoderImpl : public nn::HookableModule {
 public:
  explicit T5EncoderImpl(const T5Config& c);
  // ids [B, L] int64; mask [B, L] (1 = token, 0 = padding; only keys are masked, padded queries
  // still attend to the tokens) or undefined (every position attended, as FLUX passes it).
  // Returns the final-norm hidden states at every position, [B, L, dim].
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& mask = {});
  // Seeded initialization as upstream's init_weights (norms 1, embeddings N(0, 1), q N(0,
  // (dim * dim_attn)^-1/2), k, v N(0, dim^-1/2), o N(0, (heads * dim_attn)^-1/2), gate/fc1 N(0,
  // dim^-1/2), fc2 N(0, dim_ffn^-1/2), position tables N(0, (2 * buckets * heads)^-1/2)).
  void reset_parameters(uint64_t seed);
  const T5Config& config() const { return config_; }

  nn::Embedding token_embedding{nullptr};
  T5RelativeEmbedding pos_embedding{nullptr};  // shared_pos only
  torch::nn::ModuleList blocks{nullptr};
  T5LayerNorm norm{nullptr};

 private:
  T5Config config_;
};
TORCH_MODULE(T5Encoder);

// The initial value of parameter `name` (see reset_parameters), keyed by (seed, name).
void t5_init(const T5Config& c, uint64_t seed, const std::string& name, at::Tensor& param);

// Our (Wan T5Encoder) names <-> transformers' names: "shared.weight",
// "encoder.block.N.layer.0.{layer_norm,SelfAttention.{q,k,v,o,relative_attention_bias}}",
// "encoder.block.N.layer.1.{layer_norm,DenseReluDense.{wi_0,wi_1,wo}}",
// "encoder.final_layer_norm.weight". shared_pos (T5EncoderModel): the one table is block 0's;
// otherwise (UMT5EncoderModel) every block has its own.
nn::NameMap hf_t5_name_map(bool shared_pos);

// Wan's text conditioning (T5EncoderModel.__call__ + WanModel.forward): each prompt's states are
// cut at its real length n_i = number of nonzero mask entries (the first n_i positions: the
// tokenizer pads on the right), then zero-padded back to text_len rows before the DiT's text
// MLP, which runs on the zero rows too (no cross-attention mask). states [B, L, D], mask [B, L]
// -> [B, text_len, D]. Throws when a prompt has more than text_len tokens.
torch::Tensor trim_and_zero_pad(const torch::Tensor& states, const torch::Tensor& mask, int64_t text_len);
// The trimmed prompts alone, [n_i, D] each (what Wan's T5EncoderModel returns).
std::vector<torch::Tensor> trim_to_lengths(const torch::Tensor& states, const torch::Tensor& mask);

}  // namespace zeroshard::models::t5
