// CLIP's text transformer as FLUX.1 uses it (its `text_encoder`, openai/clip-vit-large-patch14's
// text half), transformers' CLIPTextModel with its parameter names ("text_model.*"):
//  - embeddings: token + learned position (rows 0 .. S-1), no scaling;
//  - pre-LN blocks: x += out_proj(attn(layer_norm1 x)); x += fc2(act(fc1(layer_norm2 x))),
//    act quick_gelu (t sigmoid(1.702 t), CLIP-L) or gelu; LayerNorms with weight and bias, every
//    projection with a bias; attention causal (finfo.min above the diagonal), q scaled by
//    head_dim^-0.5 (nn::attention); an attention mask (1 = token) only when given (FLUX
//    passes none: pads follow the end token, so causality keeps them out of every earlier row);
//  - final_layer_norm on every position (last_hidden_state);
//  - the pooled vector (pooler_output, what FLUX.1's vector_in takes): the final state at the end
//    token. transformers' rule: a config whose eos_token_id is 2 (the released FLUX.1 config's
//    legacy value) takes the row of argmax(input_ids) (the first occurrence of the largest id: the
//    end token is CLIP's largest id and the pads repeat it); any other eos_token_id takes the
//    first position holding that id (position 0 when a row has none, as argmax of all zeros).
// The blocks are HookableModules (sharding units); the embeddings and the final norm join the
// enclosing unit.
#pragma once

#include "nn/layers.h"
#include "nn/norms.h"
#include "zeroshard/nn/hookable.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <string>

namespace zeroshard::models::flux {

struct ClipTextConfig {
  int64_t vocab_size = 49408;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t max_position_embeddings = 77;
  std::string hidden_act = "quick_gelu";  // quick_gelu | gelu
  double layer_norm_eps = 1e-5;
  int64_t eos_token_id = 2;  // the pooling rule (see above); 2 in FLUX.1's released config

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  void validate(const std::string& where) const;  // throws std::invalid_argument naming the field
  int64_t num_params() const;                     // 123,060,480 for CLIP-L
  // transformers' CLIPTextConfig (model_type clip_text_model) or a whole CLIPConfig (model_type
  // clip, its text_config). Fields with no effect on the text model's forward are not read.
  static ClipTextConfig from_hf_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_hf_json() const;  // a CLIPTextModel config.json
};

// The released FLUX.1 text_encoder (CLIP ViT-L/14's text model).
ClipTextConfig clip_vit_large_text();

struct ClipTextOutput {
  torch::Tensor last_hidden_state;  // [B, S, hidden]
  torch::Tensor pooled;             // [B, hidden]
};

class ClipEncoderLayerImpl : public nn::HookableModule {
 public:
  explicit ClipEncoderLayerImpl(const ClipTextConfig& c);
  // x [B, S, hidden]; key_padding [B, S] bool (true: a token) or undefined (every key a token).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_padding);

  nn::LayerNorm layer_norm1{nullptr}, layer_norm2{nullptr};
  nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, out_proj{nullptr};
  nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  int64_t heads_;
  bool quick_gelu_;
};
TORCH_MODULE(ClipEncoderLayer);

// Below "text_model.": embeddings.{token,position}_embedding, encoder.layers.N.*, final_layer_norm.
class ClipTextTransformerImpl : public torch::nn::Module {
 public:
  explicit ClipTextTransformerImpl(const ClipTextConfig& c);
  ClipTextOutput forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  std::shared_ptr<torch::nn::Module> embeddings, encoder;
  nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};  // held by `embeddings`
  torch::nn::ModuleList layers{nullptr};                                // held by `encoder`
  nn::LayerNorm final_layer_norm{nullptr};

 private:
  ClipTextConfig config_;
};
TORCH_MODULE(ClipTextTransformer);

// CLIPTextModel: the transformer under "text_model." (the released key names as they are).
class ClipTextModelImpl : public torch::nn::Module {
 public:
  explicit ClipTextModelImpl(const ClipTextConfig& c);
  // input_ids [B, S] int64 (S <= max_position_embeddings); attention_mask [B, S] or undefined.
  ClipTextOutput forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  const ClipTextConfig& config() const { return config_; }

  ClipTextTransformer text_model{nullptr};

 private:
  ClipTextConfig config_;
};
TORCH_MODULE(ClipTextModel);

// transformers' CLIP initialization (CLIPPreTrainedModel._init_weights, initializer_factor 1),
// keyed by (seed, name), `name` as the model's ("text_model.*"): embeddings N(0, 0.02), q/k/v and
// fc2 N(0, hidden^-0.5 (2 layers)^-0.5), out_proj N(0, hidden^-0.5), fc1 N(0, (2 hidden)^-0.5),
// biases 0, LayerNorm weights 1.
void clip_text_init(const ClipTextConfig& c, uint64_t seed, const std::string& name, at::Tensor& param);

}  // namespace zeroshard::models::flux
