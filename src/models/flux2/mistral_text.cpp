#include "models/flux2/mistral_text.h"

#include "io/safetensors.h"

#include <stdexcept>

namespace zeroshard::models::flux2 {

const char* const kFlux2SystemMessage =
    "You are an AI that reasons about image descriptions. You give structured responses focusing on object "
    "relationships, object attribution and actions without speculation.";

std::string mistral_chat_text(const std::string& prompt, const std::string& system) {
  return "<s>[SYSTEM_PROMPT]" + system + "[/SYSTEM_PROMPT][INST]" + prompt + "[/INST]";
}

std::pair<at::Tensor, at::Tensor> mistral_prompt_ids(text::BpeTokenizer& tok, const std::string& prompt,
                                                     int64_t text_len) {
  std::vector<int32_t> ids = tok.encode(mistral_chat_text(prompt));
  if (static_cast<int64_t>(ids.size()) > text_len) ids.resize(static_cast<size_t>(text_len));  // truncation=True
  std::optional<int32_t> pad = tok.pad_id();
  if (!pad) pad = tok.token_to_id("<pad>");
  if (!pad) throw std::invalid_argument("flux2.tokenizer: the Mistral tokenizer has no pad token (<pad>)");
  at::Tensor t = at::full({1, text_len}, static_cast<int64_t>(*pad), at::kLong);
  at::Tensor mask = at::zeros({1, text_len}, at::kLong);
  const int64_t first = text_len - static_cast<int64_t>(ids.size());  // left padding
  for (size_t i = 0; i < ids.size(); ++i) {
    t[0][first + static_cast<int64_t>(i)] = static_cast<int64_t>(ids[i]);
    mask[0][first + static_cast<int64_t>(i)] = 1;
  }
  return {t, mask};
}

qwen3::QwenConfig mistral_small_3_1() {
  const nlohmann::json text = {{"model_type", "mistral"},
                               {"attention_dropout", 0.0},
                               {"head_dim", 128},
                               {"hidden_act", "silu"},
                               {"hidden_size", 5120},
                               {"initializer_range", 0.02},
                               {"intermediate_size", 32768},
                               {"max_position_embeddings", 131072},
                               {"num_attention_heads", 32},
                               {"num_hidden_layers", 40},
                               {"num_key_value_heads", 8},
                               {"rms_norm_eps", 1e-05},
                               {"rope_theta", 1000000000.0},
                               {"sliding_window", nullptr},
                               {"vocab_size", 131072}};
  return qwen3::QwenConfig::from_hf_config(text, "Mistral-Small-3.1-24B (text_config)");
}

namespace {

void ignore_beside_text(nn::NameMap& map, const std::string& vision, const std::string& projector,
                        const std::string& head) {
  map.ignore(vision, "Mistral Small 3.1's vision tower (Pixtral): FLUX.2 encodes text prompts only");
  map.ignore(projector, "the vision-to-text projector: FLUX.2 encodes text prompts only");
  map.ignore(head, "the output head: FLUX.2 reads hidden states, not logits");
}

}  // namespace

std::shared_ptr<ParamSource> mistral_text_source(const std::string& path) {
  bool nested = false;  // transformers >= 4.52: model.language_model.*, model.vision_tower.*
  {
    const io::SafetensorsSet set(path);
    for (const auto& [name, w] : set.tensors()) {
      (void)w;
      if (name.rfind("model.language_model.", 0) == 0) nested = true;
    }
  }
  nn::NameMap map;
  if (nested) {
    ignore_beside_text(map, "model.vision_tower.**", "model.multi_modal_projector.**", "lm_head.weight");
    map.rename("model.**", "model.language_model.**");
  } else {
    ignore_beside_text(map, "vision_tower.**", "multi_modal_projector.**", "language_model.lm_head.weight");
    map.rename("model.**", "language_model.model.**");
  }
  return nn::name_mapped_param_source(path, std::move(map));
}

nn::NameMap mistral_release_map() {
  nn::NameMap map;
  map.rename("model.**", "language_model.model.**");
  return map;
}

std::vector<ReleasedFolder::NotRun> mistral_not_run(int64_t vocab, int64_t hidden, bool vision) {
  std::vector<ReleasedFolder::NotRun> t{{"language_model.lm_head.weight", {vocab, hidden}}};
  if (!vision) return t;
  // Mistral-Small-3.1-24B-Instruct-2503's vision_config (Pixtral: 24 layers of 1024, SwiGLU 4096,
  // 14x14 patches of 3 channels, no biases) and Mistral3MultiModalProjector (RMSNorm, a 2x2 patch
  // merger, two linears without bias: multimodal_projector_bias false).
  const int64_t w = 1024, ffn = 4096, layers = 24, patch = 14, merge = 2;
  t.push_back({"vision_tower.patch_conv.weight", {w, 3, patch, patch}});
  t.push_back({"vision_tower.ln_pre.weight", {w}});
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = "vision_tower.transformer.layers." + std::to_string(i) + ".";
    t.push_back({l + "attention_norm.weight", {w}});
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) t.push_back({l + "attention." + p + ".weight", {w, w}});
    t.push_back({l + "ffn_norm.weight", {w}});
    t.push_back({l + "feed_forward.gate_proj.weight", {ffn, w}});
    t.push_back({l + "feed_forward.up_proj.weight", {ffn, w}});
    t.push_back({l + "feed_forward.down_proj.weight", {w, ffn}});
  }
  t.push_back({"multi_modal_projector.norm.weight", {w}});
  t.push_back({"multi_modal_projector.patch_merger.merging_layer.weight", {w, w * merge * merge}});
  t.push_back({"multi_modal_projector.linear_1.weight", {hidden, w}});
  t.push_back({"multi_modal_projector.linear_2.weight", {hidden, hidden}});
  return t;
}

}  // namespace zeroshard::models::flux2
