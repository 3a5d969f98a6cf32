// Series `qwen3` and `qwen3_moe`: their config keys and registration (the parts: series_parts.h).
#include "models/qwen3/series.h"

#include "data/token_sampler.h"
#include "models/qwen3/reference.h"
#include "models/qwen3/series_parts.h"
#include "util/text.h"

#include <filesystem>
#include <fstream>
#include <limits>

namespace zeroshard::models::qwen3 {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json_file(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(key + ": " + path + " does not exist (not a Hugging Face model folder?)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(key + ": " + path + " is not valid JSON (" + e.what() + ")");
  }
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

}  // namespace

QwenSeriesConfig::QwenSeriesConfig(bool moe) : moe_series(moe) {
  // A small model that trains in seconds: the defaults of configs/qwen3/base.yaml's shapes.
  model.model_type = moe ? "qwen3_moe" : "qwen3";
  model.vocab_size = 151936;
  model.hidden_size = 64;
  model.intermediate_size = 192;
  model.num_hidden_layers = 2;
  model.num_attention_heads = 4;
  model.num_key_value_heads = 2;
  model.head_dim = 32;
  model.rms_norm_eps = 1e-6;
  model.rope_theta = 1000000.0;
  model.tie_word_embeddings = true;
  model.max_position_embeddings = 40960;
  if (moe) {
    model.num_experts = 8;
    model.num_experts_per_tok = 2;
    model.moe_intermediate_size = 64;
    model.norm_topk_prob = true;
    model.output_router_logits = true;
  }
}

void QwenSeriesConfig::register_keys(train::ConfigKeys& k) {
  const int64_t big = std::numeric_limits<int32_t>::max();
  k.add_custom("model.from_hf", "path", "a Hugging Face model folder",
               "read every model.* key from DIR/config.json and the initial weights from its safetensors",
               [this](const std::string& v) {
                 from_hf = v;
                 if (!v.empty()) apply_hf_folder(v);
               },
               [this] { return from_hf; });
  {
    train::ConfigKeys::ModelScope scope(k);
    std::vector<std::string> types = moe_series ? std::vector<std::string>{"qwen3_moe"}
                                                : std::vector<std::string>{"qwen3", "qwen2"};
    k.add_string("model.model_type", &model.model_type, types,
                 moe_series ? "config.json model_type" : "config.json model_type (qwen2: Qwen2/2.5, q/k/v biases, no q/k norm)");
    k.add_int("model.vocab_size", &model.vocab_size, 1, big, "embedding rows (>= the tokenizer's ids)");
    k.add_int("model.hidden_size", &model.hidden_size, 1, big, "model width");
    k.add_int("model.intermediate_size", &model.intermediate_size, 0, big, "SwiGLU width of the dense layers");
    k.add_int("model.num_hidden_layers", &model.num_hidden_layers, 0, 100000, "decoder layers");
    k.add_int("model.num_attention_heads", &model.num_attention_heads, 1, 100000, "query heads");
    k.add_int("model.num_key_value_heads", &model.num_key_value_heads, 1, 100000, "key/value heads (GQA)");
    k.add_int("model.head_dim", &model.head_dim, 2, 100000, "per-head width (q_proj: heads x head_dim)");
    k.add_float("model.rms_norm_eps", &model.rms_norm_eps, 1e-12, 1.0, "RMSNorm epsilon");
    k.add_float("model.rope_theta", &model.rope_theta, 1.0, 1e12, "RoPE base");
    k.add_bool("model.tie_word_embeddings", &model.tie_word_embeddings, "lm_head is model.embed_tokens");
    k.add_bool("model.attention_bias", &attention_bias, "biases on q/k/v/o_proj (Qwen3 types)");
    k.add_int("model.max_position_embeddings", &model.max_position_embeddings, 1, big, "longest sequence");
    k.add_int("model.pad_token_id", &model.pad_token_id, -1, big,
              "embedding row without gradient (transformers' padding_idx); -1: none");
    if (moe_series) {
      k.add_int("model.num_experts", &model.num_experts, 2, 100000, "routed experts per MoE layer");
      k.add_int("model.num_experts_per_tok", &model.num_experts_per_tok, 1, 100000, "experts per token (top-k)");
      k.add_int("model.moe_intermediate_size", &model.moe_intermediate_size, 1, big, "SwiGLU width of an expert");
      k.add_bool("model.norm_topk_prob", &model.norm_topk_prob, "renormalize the top-k probabilities to sum 1");
      k.add_int("model.decoder_sparse_step", &model.decoder_sparse_step, 1, 100000,
                "layer i is routed when (i + 1) % step == 0 (and not in mlp_only_layers)");
      k.add_custom("model.mlp_only_layers", "list", "layer indices", "layers that stay dense",
                   [this](const std::string& v) {
                     model.mlp_only_layers.clear();
                     for (const std::string& item : util::split_trimmed(v)) {
                       if (item.empty()) continue;
                       size_t used = 0;
                       int64_t layer = -1;
                       try {
                         layer = std::stoll(item, &used);
                       } catch (const std::exception&) {
                         used = 0;
                       }
                       if (used != item.size() || layer < 0) throw std::invalid_argument("'" + item + "' is not a layer index");
                       model.mlp_only_layers.push_back(layer);
                     }
                   },
                   [this] { return join_ints(model.mlp_only_layers); });
    }
  }
  if (moe_series) {
    k.add_float("model.router_aux_loss_coef", &model.router_aux_loss_coef, 0.0, 100.0,
                "weight of the load-balancing loss");
    k.add_bool("model.output_router_logits", &model.output_router_logits,
               "add router_aux_loss_coef x the load-balancing loss to the loss (as transformers)");
    k.add_string("model.router_aux_loss_scope", &aux_loss_scope, {"all_layers", "per_layer"},
                 "all_layers: transformers' loss over every layer's router logits at once; per_layer: the mean of "
                 "each layer's own loss");
  }
  k.add_float("model.initializer_range", &model.initializer_range, 0.0, 10.0, "std of the seeded initial weights");
  k.add_int("train.seq_len", &seq_len, 1, 1 << 24, "tokens per training sequence");

  k.add_string("data.kind", &kind, {"text", "chat"},
               "what `prepare` makes: text (pretraining) or chat (jsonl `messages`, loss on assistant tokens)");
  k.add_path("data.tokenizer", &tokenizer, "tokenizer.json or its folder (default: model.from_hf's)");
  k.add_custom("data.inputs", "paths", "files or folders", "`prepare`: jsonl and plain text files to tokenize",
               [this](const std::string& v) { inputs = v; }, [this] { return inputs; });
  k.add_path("data.output", &output, "`prepare`: the dataset prefix it writes (P.bin, P.idx, P.json)");
  k.add_custom("data.datasets", "paths", "P, or w1, P1, w2, P2, ...",
               "training corpora (prepared prefixes) mixed by weight; empty: data.output",
               [this](const std::string& v) { datasets_text = v; }, [this] { return datasets_text; });
  k.add_string("data.text_key", &text_key, {}, "`prepare`: the jsonl field holding a text document");
  k.add_string("data.text_split", &text_split, {"file", "paragraph", "line"},
               "`prepare`: a plain text file is one document, or one per paragraph or line");
  k.add_string("data.eos_token", &eos_token, {},
               "`prepare`: the token after every text document; empty: <|endoftext|> if the tokenizer has it, "
               "else its eos_token");
  k.add_string("data.on_bad_record", &on_bad_record, {"error", "skip"},
               "`prepare`: a malformed or unusable record stops it, or is skipped, counted and listed");
  k.add_float("data.valid_fraction", &valid_fraction, 0.0, 0.9,
              "the last fraction of each corpus' documents held out for validation (train.eval_every)");
  k.add_int("data.eval_samples", &eval_samples, 1, big, "validation sequences per evaluation");
  k.add_bool("data.packing", &packing, "chat: pack several conversations per sequence (no attention across them)");
}

void QwenSeriesConfig::apply_hf_folder(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  const QwenConfig c = QwenConfig::from_hf_config(read_json_file(path, "model.from_hf"), path);
  const bool ok = moe_series ? c.model_type == "qwen3_moe" : (c.model_type == "qwen3" || c.model_type == "qwen2");
  if (!ok) {
    throw std::invalid_argument("model.from_hf: " + path + " has model_type '" + c.model_type + "'; model.series " +
                                (moe_series ? "qwen3_moe builds qwen3_moe" : "qwen3 builds qwen3 and qwen2") +
                                (c.model_type == "qwen3_moe" ? " (use model.series: qwen3_moe)" : "") +
                                (c.model_type == "qwen3" ? " (use model.series: qwen3)" : ""));
  }
  model = c;
  attention_bias = is_qwen3_type(c.model_type) && c.qkv_bias;
  if (tokenizer.empty() && fs::exists(fs::path(dir) / "tokenizer.json")) tokenizer = dir;
}

QwenConfig QwenSeriesConfig::qwen() const {
  QwenConfig c = model;
  if (is_qwen3_type(c.model_type)) {
    c.qk_norm = true;
    c.qkv_bias = c.o_bias = attention_bias;
  } else {  // qwen2: q/k/v biases, none on o_proj, no q/k norm (Qwen2Attention)
    c.qk_norm = false;
    c.qkv_bias = true;
    c.o_bias = false;
  }
  if (!moe_series) {
    c.num_experts = c.num_experts_per_tok = c.moe_intermediate_size = 0;
    c.mlp_only_layers.clear();
  }
  return c;
}

std::vector<std::pair<double, std::string>> QwenSeriesConfig::datasets() const {
  const std::string& text = datasets_text.empty() ? output : datasets_text;
  if (text.empty()) {
    throw std::invalid_argument("data.datasets is empty (and so is data.output): name the corpora `zeroshard prepare` "
                                "wrote, e.g. data.datasets: [0.7, corpus_a, 0.3, corpus_b]");
  }
  return data::parse_weighted_prefixes(text, datasets_text.empty() ? "data.output" : "data.datasets");
}

std::string QwenSeriesConfig::tokenizer_json() const {
  if (tokenizer.empty()) {
    throw std::invalid_argument("data.tokenizer is not set (a tokenizer.json or its folder; model.from_hf sets it to "
                                "the folder's when it has one)");
  }
  const fs::path p(tokenizer);
  const fs::path file = fs::is_directory(p) ? p / "tokenizer.json" : p;
  if (!fs::exists(file)) throw std::invalid_argument("data.tokenizer: " + file.string() + " does not exist");
  return file.string();
}

void QwenSeriesConfig::validate(const train::TrainConfig& c) const {
  const QwenConfig q = qwen();
  if (!from_hf.empty() && !c.init_from.empty()) {
    throw std::invalid_argument("model.from_hf and model.init_from both set: the folder's weights are the initial "
                                "ones; set only one");
  }
  q.validate("model.* keys");
  if (!is_qwen3_type(q.model_type) && attention_bias) {
    throw std::invalid_argument("model.attention_bias applies to model_type qwen3; qwen2 has q/k/v biases always");
  }
  if (seq_len > q.max_position_embeddings) {
    throw std::invalid_argument("train.seq_len (" + std::to_string(seq_len) + ") exceeds model.max_position_embeddings (" +
                                std::to_string(q.max_position_embeddings) + ")");
  }
  if (!datasets_text.empty()) data::parse_weighted_prefixes(datasets_text, "data.datasets");
  if (from_hf.empty()) return;
  // model.from_hf fixes the model: an explicit key that contradicts its config.json would build a
  // model the folder's weights do not fit.
  const std::string path = (fs::path(from_hf) / "config.json").string();
  const QwenConfig hf = QwenConfig::from_hf_config(read_json_file(path, "model.from_hf"), path);
  const nlohmann::json mine = q.to_hf_config(), theirs = hf.to_hf_config();
  std::string diffs;
  for (const char* key : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
                          "tie_word_embeddings", "attention_bias", "max_position_embeddings", "num_experts",
                          "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
                          "mlp_only_layers"}) {
    const nlohmann::json a = mine.value(key, nlohmann::json()), b = theirs.value(key, nlohmann::json());
    const bool same = a == b || (a.is_number() && b.is_number() && a.get<double>() == b.get<double>());
    if (!same) diffs += "\n  model." + std::string(key) + "=" + a.dump() + " but " + path + " has " + b.dump();
  }
  if (!diffs.empty()) {
    throw std::invalid_argument("model.from_hf: keys contradict the folder's config.json (remove them):" + diffs);
  }
}

std::string tokenizer_path_of(const train::TrainConfig& cfg) {
  const auto& s = cfg.series_config<QwenSeriesConfig>();
  return s.tokenizer.empty() ? std::string() : s.tokenizer_json();
}

namespace {

Series make_series(bool moe) {
  Series s;
  s.name = moe ? "qwen3_moe" : "qwen3";
  s.summary = moe ? "Qwen3-MoE as released (Hugging Face config and weights, routed SwiGLU experts, HF load-balancing "
                    "loss), trained on prepared text or chat corpora"
                  : "Qwen3 (and Qwen2/2.5) as released (Hugging Face config and weights, q/k norm, GQA, SwiGLU), trained "
                    "on prepared text or chat corpora";
  s.make_config = [moe] { return std::make_unique<QwenSeriesConfig>(moe); };
  s.make_task = make_task;
  // Wrap policy: one unit per decoder layer (model.layers.N); the root keeps the embedding, the
  // final norm and the (tied) lm_head.
  s.is_unit = [](const std::string& name) {
    const std::string prefix = "model.layers.";
    return name.compare(0, prefix.size(), prefix) == 0 && name.find('.', prefix.size()) == std::string::npos;
  };
  s.sample = generate;
  s.prepare = prepare;
  s.check_prepare = check_prepare;
  s.unprepared = [](const train::TrainConfig& cfg) -> std::string {
    const auto& q = cfg.series_config<QwenSeriesConfig>();
    if (q.inputs.empty() || q.output.empty()) return {};  // prepare would not write it
    std::vector<std::pair<double, std::string>> corpora;
    try {
      corpora = q.datasets();
    } catch (const std::invalid_argument&) {
      return {};  // the trainer names what is wrong
    }
    for (const auto& corpus : corpora) {
      if (corpus.second == q.output && !fs::exists(q.output + ".json")) {
        return "data.output: " + q.output + " is not prepared yet (" + q.output + ".json does not exist)";
      }
    }
    return {};
  };
  s.dry_run = describe_corpora;
  s.export_hf = export_hf;
  s.seeded_model = seeded_model;
  // seed-weights: a Hugging Face folder (config.json + model-*.safetensors + index) that
  // model.from_hf reads; the tokenizer files are the user's (data.tokenizer).
  s.released_folders = [](const train::TrainConfig& cfg) {
    const nlohmann::json hf = cfg.series_config<QwenSeriesConfig>().qwen().to_hf_config();
    ReleasedFolder f{"", "", "model", "model.from_hf", {}, false, "not written: the tokenizer files (data.tokenizer names them)", {}, {}};
    f.files["config.json"] = hf.dump(2) + "\n";
    return std::vector<ReleasedFolder>{f};
  };
  s.supports_lora = true;
  // The family's reference kinds (the dense ones with the dense series, the routed with MoE).
  for (auto& k : reference_kinds()) {
    if ((k.kind == "qwen3_moe_lm") == moe) s.reference_kinds.push_back(k);
  }
  return s;
}

}  // namespace

Series qwen3_series() { return make_series(false); }
Series qwen3_moe_series() { return make_series(true); }

}  // namespace zeroshard::models::qwen3
