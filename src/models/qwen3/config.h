// The Qwen decoder family's configuration, read from (and written back to) a Hugging Face
// config.json: model_type qwen3 (Qwen3ForCausalLM), qwen3_moe (Qwen3MoeForCausalLM), qwen2
// (Qwen2 / Qwen2.5 LMs) and the language part of qwen2_5_vl (Qwen-Image's text encoder; also the
// standalone text config model_type qwen2_5_vl_text), and Mistral's decoder, which is the same
// block without q/k norm or biases: mistral (MistralModel) and the language part of mistral3
// (Mistral3ForConditionalGeneration: Mistral Small 3.x, FLUX.2 dev's text encoder). One struct
// covers them: what differs between the types is a handful of switches (per-head q/k norm,
// projection biases, routed feed-forward), set from model_type the way transformers' classes
// hard-code them.
//
// Fields the family does not implement fail naming the field (sliding windows, rope scaling
// types other than default/mrope, activations other than silu, attention dropout); a
// model_type outside the family fails naming it. Fields with no effect on the computation
// (token ids, architectures, dtype, use_cache, transformers_version, ...) are kept verbatim so
// to_hf_config() gives the same config.json back.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zeroshard::models::qwen3 {

// qwen3 or qwen3_moe: the types with per-head q/k norm and head_dim 128 unless config.json says.
bool is_qwen3_type(const std::string& model_type);

struct QwenConfig {
  std::string model_type = "qwen3";  // qwen3 | qwen3_moe | qwen2 | qwen2_5_vl | qwen2_5_vl_text | mistral | mistral3
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense SwiGLU width (dense layers of a MoE model too)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // its own field: q_proj width = heads * head_dim may differ from hidden_size
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::vector<int64_t> mrope_section;  // qwen2.5-vl: pairs per (t, h, w) axis; text-only input: plain RoPE
  bool qk_norm = true;                 // Qwen3: RMSNorm over head_dim on every q and k head before RoPE
  bool qkv_bias = false;               // biases of q/k/v_proj (Qwen2/2.5: always; Qwen3: attention_bias)
  bool o_bias = false;                 // bias of o_proj (Qwen3: attention_bias; Qwen2/2.5: never)
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 32768;
  int64_t pad_token_id = -1;  // >= 0: that embed_tokens row gets no gradient (nn.Embedding padding_idx)
  double initializer_range = 0.02;

  // Routed feed-forward (qwen3_moe): layer i is routed unless i is in mlp_only_layers or
  // (i + 1) % decoder_sparse_step != 0.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;  // renormalize the top-k probabilities to sum to 1
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;  // HF adds coef * aux to the loss only when this is set

  // config.json as read (unknown and computation-free fields included), for to_hf_config().
  nlohmann::json source = nlohmann::json::object();

  bool is_moe() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
  int64_t num_moe_layers() const;
  // Throws std::invalid_argument naming `where` and the field.
  void validate(const std::string& where = "qwen config") const;
  // Distinct parameters (a tied lm_head counts once); lm_head = false: the text tower without it.
  int64_t num_params(bool lm_head = true) const;

  // `where` (e.g. the file path) prefixes every error message.
  static QwenConfig from_hf_config(const nlohmann::json& json, const std::string& where);
  // The config.json for this configuration: the fields read, plus every field kept from source.
  nlohmann::json to_hf_config() const;
};

// Published configurations (the released config.json values; see config.cpp for sources).
QwenConfig qwen3_0_6b();
QwenConfig qwen3_4b();
QwenConfig qwen3_8b();
QwenConfig qwen3_30b_a3b();
QwenConfig qwen25_vl_7b_text();  // Qwen2.5-VL-7B's language model = Qwen-Image's text encoder

struct PublishedSize {
  std::string name;
  QwenConfig config;
  bool lm_head = true;  // false: the text tower (no lm_head), as Qwen-Image uses it
  int64_t params = 0;   // the published / released count
  std::string source;   // where the number comes from
};
std::vector<PublishedSize> published_sizes();

}  // namespace zeroshard::models::qwen3
