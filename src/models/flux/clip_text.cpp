#include "models/flux/clip_text.h"

#include "nn/attention.h"
#include "nn/init.h"
#include "util/text.h"

#include <cmath>
#include <stdexcept>

namespace zeroshard::models::flux {

using nlohmann::json;

void ClipTextConfig::validate(const std::string& where) const {
  auto positive = [&where](int64_t v, const char* key) {
    if (v <= 0) throw std::invalid_argument(where + ": field '" + key + "' must be > 0, got " + std::to_string(v));
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_attention_heads, "num_attention_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_hidden_layers < 0) throw std::invalid_argument(where + ": field 'num_hidden_layers' must be >= 0");
  if (hidden_size % num_attention_heads != 0) {
    throw std::invalid_argument(where + ": field 'hidden_size' (" + std::to_string(hidden_size) +
                                ") must be a multiple of 'num_attention_heads' (" +
                                std::to_string(num_attention_heads) + ")");
  }
  if (hidden_act != "quick_gelu" && hidden_act != "gelu") {
    throw std::invalid_argument(where + ": field 'hidden_act' is '" + hidden_act +
                                "'; CLIP's text model here runs quick_gelu (CLIP-L) or gelu");
  }
  if (!(layer_norm_eps > 0)) throw std::invalid_argument(where + ": field 'layer_norm_eps' must be > 0");
}

int64_t ClipTextConfig::num_params() const {
  const int64_t H = hidden_size, I = intermediate_size;
  const int64_t layer = 4 * (H * H + H) + 2 * 2 * H + (H * I + I) + (I * H + H);
  return vocab_size * H + max_position_embeddings * H + num_hidden_layers * layer + 2 * H;
}

ClipTextConfig ClipTextConfig::from_hf_json(const json& source, const std::string& where) {
  if (!source.is_object()) throw std::invalid_argument(where + ": a config.json must be a JSON object");
  const std::string type = source.value("model_type", std::string());
  const json* j = &source;
  std::string at = where;
  if (type == "clip") {
    if (!source.contains("text_config") || !source["text_config"].is_object()) {
      throw std::invalid_argument(where + ": a CLIPConfig (model_type clip) needs its 'text_config' object");
    }
    j = &source["text_config"];
    at = where + " (text_config)";
  } else if (type != "clip_text_model") {
    throw std::invalid_argument(where + ": field 'model_type' is '" + type +
                                "'; CLIP's text model reads clip_text_model (CLIPTextModel) or clip (CLIPConfig)");
  }
  ClipTextConfig c;
  auto integer = [&](const char* key, int64_t& out) {
    if (!j->contains(key) || (*j)[key].is_null()) return;  // CLIPTextConfig's default (CLIP-L's values)
    if (!(*j)[key].is_number_integer()) {
      throw std::invalid_argument(at + ": field '" + key + "' must be an integer, got " + (*j)[key].dump());
    }
    out = (*j)[key].get<int64_t>();
  };
  integer("vocab_size", c.vocab_size);
  integer("hidden_size", c.hidden_size);
  integer("intermediate_size", c.intermediate_size);
  integer("num_hidden_layers", c.num_hidden_layers);
  integer("num_attention_heads", c.num_attention_heads);
  integer("max_position_embeddings", c.max_position_embeddings);
  integer("eos_token_id", c.eos_token_id);
  if (j->contains("hidden_act") && (*j)["hidden_act"].is_string()) c.hidden_act = (*j)["hidden_act"].get<std::string>();
  if (j->contains("layer_norm_eps") && (*j)["layer_norm_eps"].is_number())
    c.layer_norm_eps = (*j)["layer_norm_eps"].get<double>();
  for (const char* key : {"attention_dropout", "dropout"}) {
    if (j->contains(key) && (*j)[key].is_number() && (*j)[key].get<double>() != 0.0) {
      throw std::invalid_argument(at + ": field '" + key + "' is " + (*j)[key].dump() + "; dropout is not implemented");
    }
  }
  c.validate(at);
  return c;
}

json ClipTextConfig::to_hf_json() const {
  return json{{"architectures", {"CLIPTextModel"}},
              {"model_type", "clip_text_model"},
              {"vocab_size", vocab_size},
              {"hidden_size", hidden_size},
              {"intermediate_size", intermediate_size},
              {"num_hidden_layers", num_hidden_layers},
              {"num_attention_heads", num_attention_heads},
              {"max_position_embeddings", max_position_embeddings},
              {"hidden_act", hidden_act},
              {"layer_norm_eps", layer_norm_eps},
              {"attention_dropout", 0.0},
              {"dropout", 0.0},
              {"bos_token_id", 0},
              {"eos_token_id", eos_token_id},
              {"pad_token_id", 1},
              {"projection_dim", 768},
              {"torch_dtype", "bfloat16"}};
}

ClipTextConfig clip_vit_large_text() { return ClipTextConfig{}; }

ClipEncoderLayerImpl::ClipEncoderLayerImpl(const ClipTextConfig& c)
    : heads_(c.num_attention_heads), quick_gelu_(c.hidden_act == "quick_gelu") {
  const int64_t H = c.hidden_size;
  q_proj = nn::Linear(H, H, true);
  k_proj = nn::Linear(H, H, true);
  v_proj = nn::Linear(H, H, true);
  out_proj = nn::Linear(H, H, true);
  auto attn = std::make_shared<torch::nn::Module>("CLIPAttention");
  attn->register_module("q_proj", q_proj);
  attn->register_module("k_proj", k_proj);
  attn->register_module("v_proj", v_proj);
  attn->register_module("out_proj", out_proj);
  register_module("self_attn", attn);
  layer_norm1 = register_module("layer_norm1", nn::LayerNorm(H, c.layer_norm_eps));
  fc1 = nn::Linear(H, c.intermediate_size, true);
  fc2 = nn::Linear(c.intermediate_size, H, true);
  auto mlp = std::make_shared<torch::nn::Module>("CLIPMLP");
  mlp->register_module("fc1", fc1);
  mlp->register_module("fc2", fc2);
  register_module("mlp", mlp);
  layer_norm2 = register_module("layer_norm2", nn::LayerNorm(H, c.layer_norm_eps));
}

torch::Tensor ClipEncoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& key_padding) {
  return call_hooked(x, [this, &key_padding](const at::Tensor& h0) {
    const int64_t B = h0.size(0), S = h0.size(1), H = h0.size(2), hd = H / heads_;
    const at::Tensor h = layer_norm1(h0);
    auto heads = [&](nn::Linear& p) { return p(h).view({B, S, heads_, hd}).transpose(1, 2); };
    nn::AttentionOptions options;
    options.causal = true;
    options.key_padding = key_padding;
    const at::Tensor a =
        nn::attention(heads(q_proj), heads(k_proj), heads(v_proj), options).transpose(1, 2).reshape({B, S, H});
    const at::Tensor y = h0 + out_proj(a);
    at::Tensor f = fc1(layer_norm2(y));
    f = quick_gelu_ ? f * at::sigmoid(1.702 * f) : at::gelu(f);
    return y + fc2(f);
  });
}

ClipTextTransformerImpl::ClipTextTransformerImpl(const ClipTextConfig& c) : config_(c) {
  embeddings = register_module("embeddings", std::make_shared<torch::nn::Module>("CLIPTextEmbeddings"));
  token_embedding = embeddings->register_module("token_embedding", nn::Embedding(c.vocab_size, c.hidden_size));
  position_embedding =
      embeddings->register_module("position_embedding", nn::Embedding(c.max_position_embeddings, c.hidden_size));
  encoder = register_module("encoder", std::make_shared<torch::nn::Module>("CLIPEncoder"));
  layers = encoder->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(ClipEncoderLayer(c));
  final_layer_norm = register_module("final_layer_norm", nn::LayerNorm(c.hidden_size, c.layer_norm_eps));
}

ClipTextOutput ClipTextTransformerImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  TORCH_CHECK(input_ids.dim() == 2, "CLIP text model: input_ids must be [batch, length], got ", input_ids.sizes());
  const int64_t B = input_ids.size(0), S = input_ids.size(1);
  TORCH_CHECK(S >= 1 && S <= config_.max_position_embeddings, "CLIP text model: ", S,
              " tokens, the model has max_position_embeddings ", config_.max_position_embeddings);
  const at::Tensor positions = at::arange(S, input_ids.options().dtype(at::kLong));
  at::Tensor h = token_embedding(input_ids) + position_embedding(positions).unsqueeze(0);
  const at::Tensor key_padding = attention_mask.defined() ? attention_mask.ne(0) : at::Tensor();
  for (const auto& l : *layers) h = l->as<ClipEncoderLayerImpl>()->forward(h, key_padding);
  ClipTextOutput out;
  out.last_hidden_state = final_layer_norm(h);
  const at::Tensor ids = input_ids.to(at::kInt);
  const at::Tensor row = config_.eos_token_id == 2 ? ids.argmax(-1) : ids.eq(config_.eos_token_id).to(at::kInt).argmax(-1);
  out.pooled = out.last_hidden_state.index({at::arange(B, row.options().dtype(at::kLong)), row});
  return out;
}

ClipTextModelImpl::ClipTextModelImpl(const ClipTextConfig& c) : config_(c) {
  c.validate("CLIP text config");
  text_model = register_module("text_model", ClipTextTransformer(c));
}

ClipTextOutput ClipTextModelImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return text_model->forward(input_ids, attention_mask);
}

void clip_text_init(const ClipTextConfig& c, uint64_t seed, const std::string& name, at::Tensor& param) {
  using util::ends_with;
  const double H = static_cast<double>(c.hidden_size), L = static_cast<double>(c.num_hidden_layers);
  const double in_proj_std = std::pow(H, -0.5) * std::pow(std::max(2.0 * L, 1.0), -0.5);
  auto normal = [&](double std) { nn::init_normal(param, seed, name, std); };
  if (ends_with(name, "_embedding.weight")) {
    normal(0.02);
  } else if (ends_with(name, "q_proj.weight") || ends_with(name, "k_proj.weight") || ends_with(name, "v_proj.weight") ||
             ends_with(name, "fc2.weight")) {
    normal(in_proj_std);
  } else if (ends_with(name, "out_proj.weight")) {
    normal(std::pow(H, -0.5));
  } else if (ends_with(name, "fc1.weight")) {
    normal(std::pow(2.0 * H, -0.5));
  } else if (ends_with(name, "norm1.weight") || ends_with(name, "norm2.weight") || ends_with(name, "layer_norm.weight")) {
    nn::init_constant(param, 1.0);
  } else if (ends_with(name, ".bias")) {
    nn::init_constant(param, 0.0);
  } else {
    throw std::invalid_argument("clip_text_init: no rule for parameter '" + name + "'");
  }
}

}  // namespace zeroshard::models::flux
