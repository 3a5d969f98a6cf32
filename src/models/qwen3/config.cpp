#include "models/qwen3/config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zeroshard::models::qwen3 {

using nlohmann::json;

bool is_qwen3_type(const std::string& t) { return t == "qwen3" || t == "qwen3_moe"; }

namespace {

bool is_vl_type(const std::string& t) { return t == "qwen2_5_vl" || t == "qwen2_5_vl_text"; }
// Mistral's language model (MistralModel), alone or inside Mistral3ForConditionalGeneration
// (FLUX.2 dev's text encoder, Mistral Small 3.x: its text_config).
bool is_mistral_type(const std::string& t) { return t == "mistral" || t == "mistral3"; }

// Typed access to config.json fields; every error names `where` and the field.
struct Reader {
  const json& j;
  const std::string& where;

  bool has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw std::invalid_argument(where + ": field '" + key + "' " + what);
  }
  int64_t integer(const std::string& key) const {
    if (!has(key)) fail(key, "is missing (needed to build the model)");
    if (!j[key].is_number_integer()) fail(key, "must be an integer, got " + j[key].dump());
    return j[key].get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }
  double number(const std::string& key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_number()) fail(key, "must be a number, got " + j[key].dump());
    return j[key].get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j[key].is_boolean()) fail(key, "must be true or false, got " + j[key].dump());
    return j[key].get<bool>();
  }
  std::vector<int64_t> integers(const std::string& key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    if (!j[key].is_array()) fail(key, "must be a list of integers, got " + j[key].dump());
    for (const auto& v : j[key]) {
      if (!v.is_number_integer()) fail(key, "must be a list of integers, got " + j[key].dump());
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
};

// RoPE variants: transformers' default RoPE, and Qwen2.5-VL's mrope, which on text-only input
// (one position repeated on the t/h/w axes) is exactly the default RoPE. Everything else
// (linear, dynamic, yarn, longrope, llama3) changes the angles and is refused by name.
void read_rope(const Reader& r, QwenConfig& c) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!r.has(key)) continue;
    const json& s = r.j[key];
    if (!s.is_object()) r.fail(key, "must be null or an object, got " + s.dump());
    std::string type = "default";
    if (s.contains("rope_type") && s["rope_type"].is_string())
      type = s["rope_type"].get<std::string>();
    else if (s.contains("type") && s["type"].is_string())
      type = s["type"].get<std::string>();
    if (type == "mrope" && !is_vl_type(c.model_type)) {
      r.fail(std::string(key) + ".type", "'mrope' is Qwen2.5-VL's; model_type '" + c.model_type + "' has no mrope");
    }
    if (type != "default" && type != "mrope") {
      r.fail(std::string(key) + ".type",
             "'" + type + "' is not supported (only the default RoPE and Qwen2.5-VL's mrope)");
    }
    if (s.contains("rope_theta")) {
      if (!s["rope_theta"].is_number()) r.fail(std::string(key) + ".rope_theta", "must be a number");
      c.rope_theta = s["rope_theta"].get<double>();
    }
    if (is_vl_type(c.model_type) && s.contains("mrope_section")) {
      const Reader sub{s, r.where};
      c.mrope_section = sub.integers("mrope_section");
    }
  }
}

}  // namespace

bool QwenConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int64_t QwenConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

void QwenConfig::validate(const std::string& where) const {
  auto need = [&where](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(where + ": " + what);
  };
  auto positive = [&need](int64_t v, const std::string& key) {
    need(v > 0, "field '" + key + "' must be > 0, got " + std::to_string(v));
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  need(num_hidden_layers >= 0, "field 'num_hidden_layers' must be >= 0, got " + std::to_string(num_hidden_layers));
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  need(num_attention_heads % num_key_value_heads == 0,
       "field 'num_attention_heads' (" + std::to_string(num_attention_heads) +
           ") must be a multiple of 'num_key_value_heads' (" + std::to_string(num_key_value_heads) + ")");
  need(head_dim > 0 && head_dim % 2 == 0,
       "field 'head_dim' must be even and > 0 for RoPE, got " + std::to_string(head_dim));
  need(rms_norm_eps > 0, "field 'rms_norm_eps' must be > 0");
  need(rope_theta > 0, "field 'rope_theta' must be > 0");
  need(pad_token_id < vocab_size,
       "field 'pad_token_id' (" + std::to_string(pad_token_id) + ") is outside the vocabulary");
  if (!mrope_section.empty()) {
    int64_t pairs = 0;
    for (int64_t s : mrope_section) pairs += s;
    need(2 * pairs == head_dim, "field 'rope_scaling.mrope_section' must cover head_dim / 2 = " +
                                    std::to_string(head_dim / 2) + " pairs, covers " + std::to_string(pairs));
  }
  bool any_dense = false;
  for (int64_t i = 0; i < num_hidden_layers; ++i) any_dense = any_dense || !is_moe_layer(i);
  if (any_dense) positive(intermediate_size, "intermediate_size");
  if (num_experts > 0) {
    need(num_experts_per_tok > 0 && num_experts_per_tok <= num_experts,
         "field 'num_experts_per_tok' must be in 1 .. num_experts (" + std::to_string(num_experts) + "), got " +
             std::to_string(num_experts_per_tok));
    positive(moe_intermediate_size, "moe_intermediate_size");
    positive(decoder_sparse_step, "decoder_sparse_step");
    for (int64_t l : mlp_only_layers) {
      need(l >= 0 && l < num_hidden_layers, "field 'mlp_only_layers' names layer " + std::to_string(l) +
                                                " of a model with " + std::to_string(num_hidden_layers) + " layers");
    }
  }
}

int64_t QwenConfig::num_params(bool lm_head) const {
  const int64_t D = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attention = D * q + 2 * D * kv + q * D;
  if (qkv_bias) attention += q + 2 * kv;
  if (o_bias) attention += D;
  if (qk_norm) attention += 2 * head_dim;
  int64_t total = vocab_size * D + D;  // embed_tokens, final norm
  for (int64_t i = 0; i < num_hidden_layers; ++i) {
    const int64_t ffn =
        is_moe_layer(i) ? D * num_experts + num_experts * 3 * D * moe_intermediate_size : 3 * D * intermediate_size;
    total += attention + ffn + 2 * D;
  }
  if (lm_head && !tie_word_embeddings) total += vocab_size * D;
  return total;
}

QwenConfig QwenConfig::from_hf_config(const json& source, const std::string& where) {
  if (!source.is_object()) throw std::invalid_argument(where + ": a config.json must be a JSON object");
  QwenConfig c;
  c.source = source;
  {
    const Reader top{source, where};
    if (!top.has("model_type") || !source["model_type"].is_string()) top.fail("model_type", "is missing");
    c.model_type = source["model_type"].get<std::string>();
  }
  const std::string& t = c.model_type;
  if (!is_qwen3_type(t) && t != "qwen2" && !is_vl_type(t) && !is_mistral_type(t)) {
    throw std::invalid_argument(where + ": field 'model_type' is '" + t +
                                "'; the qwen3 family builds qwen3, qwen3_moe, qwen2, qwen2_5_vl (its language "
                                "model), qwen2_5_vl_text, mistral and mistral3 (its language model)");
  }
  // Qwen2.5-VL configs written by recent transformers nest the language model's fields in
  // text_config; older ones (the released Qwen-Image text encoder) keep them at the top level.
  json merged = source;
  if ((t == "qwen2_5_vl" || t == "mistral3") && source.contains("text_config") && source["text_config"].is_object()) {
    for (const auto& [k, v] : source["text_config"].items()) merged[k] = v;
  }
  const std::string text_where = merged.contains("text_config") ? where + " (with text_config)" : where;
  const Reader r{merged, text_where};

  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.num_hidden_layers = r.integer("num_hidden_layers");
  c.num_attention_heads = r.integer("num_attention_heads");
  if (!merged.contains("num_key_value_heads")) r.fail("num_key_value_heads", "is missing (needed to build the model)");
  c.num_key_value_heads = r.integer("num_key_value_heads", c.num_attention_heads);  // null: as many as query heads
  // head_dim: absent -> the class default (Qwen3Config: 128; Qwen2 has no such field, so
  // hidden/heads); null -> hidden/heads; set -> its value (transformers reads it through
  // getattr(config, "head_dim", hidden // heads) in every one of these classes).
  if (merged.contains("head_dim")) {
    c.head_dim = r.integer("head_dim", c.hidden_size / std::max<int64_t>(1, c.num_attention_heads));
  } else {
    c.head_dim = is_qwen3_type(t) ? 128 : c.hidden_size / std::max<int64_t>(1, c.num_attention_heads);
  }
  c.rms_norm_eps = r.number("rms_norm_eps", 1e-6);
  c.rope_theta = r.number("rope_theta", is_vl_type(t) ? 1000000.0 : 10000.0);
  read_rope(r, c);
  c.max_position_embeddings = r.integer("max_position_embeddings", is_vl_type(t) ? 128000 : 32768);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.pad_token_id = r.integer("pad_token_id", -1);
  c.initializer_range = r.number("initializer_range", 0.02);
  if (r.has("hidden_act") && merged["hidden_act"] != "silu") {
    r.fail("hidden_act", "is " + merged["hidden_act"].dump() + "; the family implements silu (SwiGLU)");
  }
  if (r.number("attention_dropout", 0.0) != 0.0) {
    r.fail("attention_dropout", "is " + merged["attention_dropout"].dump() + "; attention dropout is not implemented");
  }
  if (r.boolean("use_sliding_window", false)) {
    r.fail("use_sliding_window", "is true; sliding-window attention is not implemented");
  }
  // Mistral windows its attention whenever sliding_window is set (MistralConfig's default is
  // 4096); Mistral Small 3.x sets null.
  if (is_mistral_type(t) && r.has("sliding_window")) {
    r.fail("sliding_window", "is " + merged["sliding_window"].dump() +
                                 "; sliding-window attention is not implemented (Mistral Small 3.x has null)");
  }
  if (r.has("layer_types")) {
    for (const auto& lt : merged["layer_types"]) {
      if (lt != "full_attention")
        r.fail("layer_types", "has " + lt.dump() + "; only full_attention layers are implemented");
    }
  }
  // Per-type switches, as transformers' classes hard-code them.
  if (is_qwen3_type(t)) {
    c.qk_norm = true;
    c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);
  } else if (is_mistral_type(t)) {  // Mistral: no biases, no q/k norm
    c.qk_norm = false;
    c.qkv_bias = c.o_bias = false;
  } else {  // Qwen2 / Qwen2.5(-VL): q/k/v biases always, none on o_proj, no q/k norm
    c.qk_norm = false;
    c.qkv_bias = true;
    c.o_bias = false;
  }
  c.intermediate_size = r.integer("intermediate_size", 0);
  if (t == "qwen3_moe") {  // Qwen3MoeConfig's defaults where a field is absent
    c.num_experts = r.integer("num_experts", 128);
    c.num_experts_per_tok = r.integer("num_experts_per_tok", 8);
    c.moe_intermediate_size = r.integer("moe_intermediate_size", 768);
    c.norm_topk_prob = r.boolean("norm_topk_prob", false);
    c.decoder_sparse_step = r.integer("decoder_sparse_step", 1);
    c.mlp_only_layers = r.integers("mlp_only_layers");
    c.router_aux_loss_coef = r.number("router_aux_loss_coef", 0.001);
    c.output_router_logits = r.boolean("output_router_logits", false);
  }
  c.validate(where);
  return c;
}

namespace {

// Writes `value` under `key` unless an equal value is already there (so a config.json read and
// written back keeps its own spelling of numbers, e.g. 1000000 vs 1000000.0).
void put(json& out, const std::string& key, const json& value) {
  if (out.contains(key)) {
    const json& old = out[key];
    if (old == value) return;
    if (old.is_number() && value.is_number() && old.get<double>() == value.get<double>()) return;
  }
  out[key] = value;
}

const char* architecture(const std::string& t) {
  if (t == "qwen3") return "Qwen3ForCausalLM";
  if (t == "qwen3_moe") return "Qwen3MoeForCausalLM";
  if (t == "qwen2") return "Qwen2ForCausalLM";
  if (t == "mistral") return "MistralForCausalLM";
  if (t == "mistral3") return "Mistral3ForConditionalGeneration";
  return "Qwen2_5_VLForConditionalGeneration";
}

}  // namespace

json QwenConfig::to_hf_config() const {
  json out = source.is_object() ? source : json::object();
  json fields = json::object();
  fields["model_type"] = model_type;
  fields["vocab_size"] = vocab_size;
  fields["hidden_size"] = hidden_size;
  fields["intermediate_size"] = intermediate_size;
  fields["num_hidden_layers"] = num_hidden_layers;
  fields["num_attention_heads"] = num_attention_heads;
  fields["num_key_value_heads"] = num_key_value_heads;
  if (is_qwen3_type(model_type) || head_dim != hidden_size / num_attention_heads) fields["head_dim"] = head_dim;
  fields["hidden_act"] = "silu";
  fields["rms_norm_eps"] = rms_norm_eps;
  fields["rope_theta"] = rope_theta;
  fields["max_position_embeddings"] = max_position_embeddings;
  fields["tie_word_embeddings"] = tie_word_embeddings;
  fields["initializer_range"] = initializer_range;
  if (is_qwen3_type(model_type)) fields["attention_bias"] = qkv_bias;
  if (pad_token_id >= 0) fields["pad_token_id"] = pad_token_id;
  if (model_type == "qwen3_moe") {
    fields["num_experts"] = num_experts;
    fields["num_experts_per_tok"] = num_experts_per_tok;
    fields["moe_intermediate_size"] = moe_intermediate_size;
    fields["norm_topk_prob"] = norm_topk_prob;
    fields["decoder_sparse_step"] = decoder_sparse_step;
    fields["mlp_only_layers"] = mlp_only_layers;
    fields["router_aux_loss_coef"] = router_aux_loss_coef;
    fields["output_router_logits"] = output_router_logits;
  }
  const bool nested =
      (model_type == "qwen2_5_vl" || model_type == "mistral3") && out.contains("text_config") && out["text_config"].is_object();
  for (const auto& [k, v] : fields.items()) {
    put(out, k, v);
    if (nested && out["text_config"].contains(k) && k != "model_type") put(out["text_config"], k, v);
  }
  if (!out.contains("rope_scaling") && !out.contains("rope_parameters")) {
    if (mrope_section.empty()) {
      out["rope_scaling"] = nullptr;
    } else {
      out["rope_scaling"] = {{"type", "mrope"}, {"rope_type", "default"}, {"mrope_section", mrope_section}};
    }
  }
  if (!out.contains("architectures")) out["architectures"] = json::array({architecture(model_type)});
  if (!out.contains("use_sliding_window") && !is_mistral_type(model_type)) out["use_sliding_window"] = false;
  if (is_mistral_type(model_type)) put(nested ? out["text_config"] : out, "sliding_window", nullptr);
  if (!out.contains("attention_dropout")) out["attention_dropout"] = 0.0;
  return out;
}

// ---- Published configurations: the released config.json files' values ----

namespace {

json qwen3_dense_json(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, bool tied) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645},
          {"head_dim", 128},
          {"hidden_act", "silu"},
          {"hidden_size", hidden},
          {"initializer_range", 0.02},
          {"intermediate_size", intermediate},
          {"max_position_embeddings", 40960},
          {"max_window_layers", layers},
          {"model_type", "qwen3"},
          {"num_attention_heads", heads},
          {"num_hidden_layers", layers},
          {"num_key_value_heads", 8},
          {"rms_norm_eps", 1e-06},
          {"rope_scaling", nullptr},
          {"rope_theta", 1000000},
          {"sliding_window", nullptr},
          {"tie_word_embeddings", tied},
          {"torch_dtype", "bfloat16"},
          {"use_cache", true},
          {"use_sliding_window", false},
          {"vocab_size", 151936}};
}

}  // namespace

// Qwen/Qwen3-0.6B, -4B, -8B config.json (the same values DiffSynth-Studio's z_image_text_encoder
// embeds for Z-Image's Qwen3 text encoders).
QwenConfig qwen3_0_6b() { return QwenConfig::from_hf_config(qwen3_dense_json(1024, 3072, 28, 16, true), "Qwen3-0.6B"); }
QwenConfig qwen3_4b() { return QwenConfig::from_hf_config(qwen3_dense_json(2560, 9728, 36, 32, true), "Qwen3-4B"); }
QwenConfig qwen3_8b() { return QwenConfig::from_hf_config(qwen3_dense_json(4096, 12288, 36, 32, false), "Qwen3-8B"); }

// Qwen/Qwen3-30B-A3B config.json: 48 layers, all routed, 128 experts, 8 per token.
QwenConfig qwen3_30b_a3b() {
  json j = qwen3_dense_json(2048, 6144, 48, 32, false);
  j["architectures"] = {"Qwen3MoeForCausalLM"};
  j["model_type"] = "qwen3_moe";
  j["num_key_value_heads"] = 4;
  j["decoder_sparse_step"] = 1;
  j["mlp_only_layers"] = json::array();
  j["moe_intermediate_size"] = 768;
  j["norm_topk_prob"] = true;
  j["num_experts"] = 128;
  j["num_experts_per_tok"] = 8;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = 0.001;
  j["rope_theta"] = 1000000.0;
  return QwenConfig::from_hf_config(j, "Qwen3-30B-A3B");
}

// Qwen-Image's text_encoder/config.json (Qwen2.5-VL-7B-Instruct): its language model.
QwenConfig qwen25_vl_7b_text() {
  json j = {{"architectures", {"Qwen2_5_VLForConditionalGeneration"}},
            {"attention_dropout", 0.0},
            {"bos_token_id", 151643},
            {"eos_token_id", 151645},
            {"hidden_act", "silu"},
            {"hidden_size", 3584},
            {"initializer_range", 0.02},
            {"intermediate_size", 18944},
            {"max_position_embeddings", 128000},
            {"max_window_layers", 28},
            {"model_type", "qwen2_5_vl"},
            {"num_attention_heads", 28},
            {"num_hidden_layers", 28},
            {"num_key_value_heads", 4},
            {"rms_norm_eps", 1e-06},
            {"rope_scaling", {{"mrope_section", {16, 24, 24}}, {"rope_type", "default"}, {"type", "default"}}},
            {"rope_theta", 1000000.0},
            {"sliding_window", 32768},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"},
            {"use_cache", true},
            {"use_sliding_window", false},
            {"vocab_size", 152064}};
  return QwenConfig::from_hf_config(j, "Qwen2.5-VL-7B (Qwen-Image text encoder)");
}

std::vector<PublishedSize> published_sizes() {
  // Exact counts: arithmetic from each released config.json (no biases except Qwen2.5's q/k/v;
  // a tied lm_head counted once), agreeing with each model card's rounded figures (total /
  // non-embedding): 0.6B / 0.44B, 4.0B / 3.6B, 8.2B / 6.95B, 30.5B / 29.9B; Qwen2.5-VL-7B's
  // language model with its lm_head has Qwen2.5-7B's published 7.61B / 6.53B (7,615,616,512),
  // the text tower without lm_head 545.0M (152064 x 3584) fewer.
  return {
      {"Qwen3-0.6B", qwen3_0_6b(), true, 596049920,
       "Qwen/Qwen3-0.6B config.json arithmetic (tied embeddings); model card 0.6B total, 0.44B non-embedding"},
      {"Qwen3-4B", qwen3_4b(), true, 4022468096,
       "Qwen/Qwen3-4B config.json arithmetic (tied embeddings); model card 4.0B total, 3.6B non-embedding"},
      {"Qwen3-8B", qwen3_8b(), true, 8190735360,
       "Qwen/Qwen3-8B config.json arithmetic; model card 8.2B total, 6.95B non-embedding"},
      {"Qwen3-30B-A3B", qwen3_30b_a3b(), true, 30532122624,
       "Qwen/Qwen3-30B-A3B config.json arithmetic; model card 30.5B total (3.3B activated), 29.9B non-embedding"},
      {"Qwen2.5-VL-7B language model", qwen25_vl_7b_text(), true, 7615616512,
       "Qwen-Image text_encoder/config.json arithmetic; equals Qwen2.5-7B's published 7.61B (6.53B non-embedding)"},
      {"Qwen-Image text tower (Qwen2.5-VL-7B language model, no lm_head)", qwen25_vl_7b_text(), false, 7070619136,
       "the line above less lm_head (152064 x 3584)"},
  };
}

}  // namespace zeroshard::models::qwen3
