// The Qwen decoder family as transformers defines it (Qwen3ForCausalLM, Qwen3MoeForCausalLM,
// Qwen2ForCausalLM, the language model of Qwen2.5-VL), with modules named as the Hugging Face
// checkpoints name them:
//   model.embed_tokens
//   model.layers.N.input_layernorm, model.layers.N.post_attention_layernorm
//   model.layers.N.self_attn.{q_proj,k_proj,v_proj,o_proj}  (+ q_norm, k_norm for Qwen3)
//   model.layers.N.mlp.{gate_proj,up_proj,down_proj}         (dense layers)
//   model.layers.N.mlp.gate, model.layers.N.mlp.experts.E.{gate_proj,up_proj,down_proj}  (routed)
//   model.norm, lm_head (with tie_word_embeddings: the same tensor as model.embed_tokens.weight,
//   registered under both names; the engine and the reference loader deduplicate by tensor)
//
// Sharding units: every DecoderLayer is a HookableModule run through call_hooked; the root
// (QwenForCausalLM, holding embed_tokens, norm and lm_head) is one too. A routed layer returns
// its router logits as a second hooked output: the load-balancing loss computed from all layers'
// router logits together (loss.h) then back-propagates into each layer through those outputs,
// i.e. while an engine has that layer gathered (and through activation checkpointing's
// recompute), not through some side channel that bypasses the hooks.
#pragma once

#include "models/qwen3/config.h"
#include "models/qwen3/layers.h"
#include "nn/attention.h"
#include "nn/layers.h"
#include "nn/rope.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/param_source.h"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::models::qwen3 {

// Keys and values (after RoPE, as transformers' DynamicCache holds them) of the tokens seen so
// far, per layer, for generation without recomputing the prefix.
struct KVCache {
  std::vector<torch::Tensor> keys, values;  // per layer: [B, num_key_value_heads, length, head_dim]
  int64_t length = 0;                       // tokens cached
};

// What every layer of one forward shares: RoPE angles of the tokens, the attention mask, the
// cache. Built once per forward by the root.
struct LayerContext {
  nn::RopeAngles rope;             // cos/sin [B, S, head_dim / 2]
  nn::AttentionOptions attention;  // causal, plus key padding from the attention mask
  KVCache* cache = nullptr;
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const QwenConfig& c);
  torch::Tensor forward(const torch::Tensor& x, const LayerContext& ctx, int64_t layer);
  nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  nn::RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3 only

 private:
  int64_t heads_, kv_heads_, head_dim_;
};
TORCH_MODULE(Attention);

// SwiGLU: down_proj(silu(gate_proj x) * up_proj x), no biases.
class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(int64_t hidden, int64_t intermediate);
  torch::Tensor forward(const torch::Tensor& x);
  nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(MLP);

struct MoeOutput {
  torch::Tensor out;            // x's shape
  torch::Tensor router_logits;  // [B * S, num_experts], in x's dtype (transformers' gate output)
};

// Qwen3MoeSparseMoeBlock: router logits = gate(x); probabilities = softmax in float32 (float64
// for float64); the top-k probabilities (renormalized to sum 1 when norm_topk_prob), cast to x's
// dtype, weight the chosen experts' outputs; each expert runs only on the tokens routed to it
// (an expert no token chose gets no gradient).
class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  explicit SparseMoeBlockImpl(const QwenConfig& c);
  MoeOutput forward(const torch::Tensor& x);
  nn::Linear gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  torch::Tensor last_tokens_per_expert;  // int64 [E]: (token, slot) pairs routed in the last forward

 private:
  int64_t top_k_;
  bool norm_topk_prob_;
};
TORCH_MODULE(SparseMoeBlock);

class DecoderLayerImpl : public nn::HookableModule {
 public:
  DecoderLayerImpl(const QwenConfig& c, int64_t index);
  // {hidden} for a dense layer, {hidden, router_logits} for a routed one (see the file comment).
  std::vector<torch::Tensor> forward(const torch::Tensor& hidden, const LayerContext& ctx);
  bool routed() const { return !moe.is_empty(); }

  nn::RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Attention self_attn{nullptr};
  MLP mlp{nullptr};             // dense layers ("mlp")
  SparseMoeBlock moe{nullptr};  // routed layers (registered as "mlp" too)

 private:
  int64_t index_;
};
TORCH_MODULE(DecoderLayer);

// transformers' Qwen3Model / Qwen2Model: the part under the key prefix "model.".
class QwenModelImpl : public torch::nn::Module {
 public:
  explicit QwenModelImpl(const QwenConfig& c);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  nn::RMSNorm norm{nullptr};
};
TORCH_MODULE(QwenModel);

// lm_head sharing model.embed_tokens.weight (tie_word_embeddings): no parameter of its own.
class TiedHeadImpl : public torch::nn::Module {
 public:
  explicit TiedHeadImpl(const torch::Tensor& shared) { weight = register_parameter("weight", shared); }
  torch::Tensor weight;
};
TORCH_MODULE(TiedHead);

struct Inputs {
  Inputs() = default;
  Inputs(torch::Tensor ids, torch::Tensor mask = {}, torch::Tensor positions = {})
      : input_ids(std::move(ids)), attention_mask(std::move(mask)), position_ids(std::move(positions)) {}

  torch::Tensor input_ids;  // [B, S] int64
  // [B, past + S] (1/true: a real token; 0: padding) or undefined (every key real). As in
  // transformers it covers the cached tokens too. Keys are masked additively at finfo.min on top
  // of causality; a query whose keys are all masked (a left-padding slot) averages all keys.
  torch::Tensor attention_mask;
  // [B, S] int64 RoPE positions, or undefined: past .. past + S - 1 for every row (transformers'
  // cache_position). Qwen-Image passes cumsum(mask) - 1; Qwen2.5-VL's 3-row (t, h, w) positions
  // are equal rows for text, i.e. these.
  torch::Tensor position_ids;
  // [B, S] int64 or undefined: packed sequences (several conversations in one row). A query sees
  // only keys of its own segment (on top of causality), as transformers' packing with per-sequence
  // position_ids does through flash-attention's varlen kernels. Not with a cache.
  torch::Tensor segment_ids;
};

struct Output {
  torch::Tensor last_hidden_state;           // [B, S, hidden] after model.norm
  torch::Tensor logits;                      // [B, S, vocab] (undefined without lm_head)
  std::vector<torch::Tensor> router_logits;  // routed layers in order, each [B * S, num_experts]
};

class QwenForCausalLMImpl : public nn::HookableModule {
 public:
  // lm_head = false: the text tower alone (Qwen2Model as Qwen-Image runs it), names "model.*".
  explicit QwenForCausalLMImpl(const QwenConfig& c, bool lm_head = true);

  // The full forward. With a cache, input_ids continue the cached tokens and are appended.
  Output forward(const Inputs& in, KVCache* cache = nullptr);

  // transformers' output_hidden_states convention: index 0 is the embedding output, index i
  // (1 .. L-1) the output of layer i - 1 (the residual stream after i layers, no norm), index L
  // the last hidden state after model.norm; negative indices count from L + 1 (Python's). Only
  // the layers up to the largest index asked for run. Consumers (DiffSynth-Studio, diffusers):
  //  - Z-Image: hidden_states[-2] of Qwen3-4B (= index L - 1: the output of the second-to-last
  //    layer, before any norm), then each prompt's rows where the attention mask is 1.
  //  - FLUX.2 klein: hidden_states[9], [18], [27] of Qwen3 (4B / 8B), torch.stack(dim=1) then
  //    permute(0, 2, 1, 3).reshape(B, S, 3 * hidden): features concatenated as 9 | 18 | 27.
  //  - Qwen-Image: the last hidden state of the Qwen2.5-VL language model (index L, normed).
  std::vector<torch::Tensor> hidden_states(const Inputs& in, const std::vector<int64_t>& indices);

  // Initial value of parameter `name` as transformers' _init_weights: Linear/Embedding weights
  // N(0, initializer_range) keyed by (seed, name), biases 0, norm weights 1, the padding row 0.
  void init_parameter(uint64_t seed, const std::string& name, at::Tensor& param) const;

  const QwenConfig& config() const { return config_; }
  bool has_lm_head() const { return has_lm_head_; }
  // Distinct parameters (a tied tensor counted once); works on a deferred model.
  int64_t num_params() const;

  QwenModel model{nullptr};
  nn::Linear lm_head{nullptr};  // untied head
  TiedHead tied_head{nullptr};  // tied head (registered as "lm_head")

 private:
  LayerContext make_context(const torch::Tensor& ids, const torch::Tensor& mask, const torch::Tensor& positions,
                            const torch::Tensor& segments, const torch::Tensor& like, KVCache* cache) const;
  QwenConfig config_;
  bool has_lm_head_;
};
TORCH_MODULE(QwenForCausalLM);

// text_tower.cpp: the weights of a released Qwen causal LM used as a pipeline's text tower
// (QwenForCausalLM with lm_head = false, names "model.*"): Qwen-Image's text_encoder/ (Qwen2.5-VL:
// its vision tower "visual.*" beside the language model, or "model.visual.*" and
// "model.language_model.*" as transformers >= 4.52 saves it), Z-Image's and FLUX.2 klein's
// text_encoder/ (Qwen3). The output head (lm_head.weight) and the vision tower are left unread,
// counted in the source's notes(); any other tensor the tower lacks is refused. `path`: a file,
// an index or a folder (io::SafetensorsSet).
std::shared_ptr<ParamSource> text_tower_source(const std::string& path);

}  // namespace zeroshard::models::qwen3
