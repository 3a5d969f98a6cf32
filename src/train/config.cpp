#include "train/config.h"

#include "util/text.h"
#include "zeroshard/shard.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace zeroshard::train {
namespace {

namespace fs = std::filesystem;

struct Key {
  std::string name;
  std::string type;  // int, float, bool, string
  std::function<void(const std::string&)> set;
  std::function<std::string()> get;
  std::string allowed;  // human-readable range
};

// Shortest text that parses back to the same double.
std::string to_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::vector<Key> registry(TrainConfig& c) {
  std::vector<Key> keys;
  auto add_int = [&](const std::string& name, int64_t* p, int64_t lo, int64_t hi) {
    keys.push_back({name, "int",
                    [=](const std::string& v) {
                      size_t used = 0;
                      long long x = 0;
                      try {
                        x = std::stoll(v, &used);
                      } catch (...) {
                        used = 0;
                      }
                      if (used != v.size() || v.empty()) throw std::invalid_argument("'" + v + "' is not an integer");
                      if (x < lo || x > hi) {
                        throw std::invalid_argument(v + " is out of range [" + std::to_string(lo) + ", " +
                                                    std::to_string(hi) + "]");
                      }
                      *p = x;
                    },
                    [=] { return std::to_string(*p); }, "integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"});
  };
  auto add_float = [&](const std::string& name, double* p, double lo, double hi) {
    keys.push_back({name, "float",
                    [=](const std::string& v) {
                      size_t used = 0;
                      double x = 0;
                      try {
                        x = std::stod(v, &used);
                      } catch (...) {
                        used = 0;
                      }
                      if (used != v.size() || v.empty()) throw std::invalid_argument("'" + v + "' is not a number");
                      if (!(x >= lo && x <= hi)) {
                        throw std::invalid_argument(v + " is out of range [" + to_text(lo) + ", " + to_text(hi) + "]");
                      }
                      *p = x;
                    },
                    [=] { return to_text(*p); }, "number in [" + to_text(lo) + ", " + to_text(hi) + "]"});
  };
  auto add_bool = [&](const std::string& name, bool* p) {
    keys.push_back({name, "bool",
                    [=](const std::string& v) {
                      if (v == "true" || v == "1" || v == "yes" || v == "on") *p = true;
                      else if (v == "false" || v == "0" || v == "no" || v == "off") *p = false;
                      else throw std::invalid_argument("'" + v + "' is not a boolean (true/false)");
                    },
                    [=] { return std::string(*p ? "true" : "false"); }, "true or false"});
  };
  auto add_string = [&](const std::string& name, std::string* p, std::vector<std::string> choices) {
    std::string allowed = "any string";
    if (!choices.empty()) {
      allowed = "one of:";
      for (auto& ch : choices) allowed += " " + ch;
    }
    keys.push_back({name, "string",
                    [=](const std::string& v) {
                      if (!choices.empty() && std::find(choices.begin(), choices.end(), v) == choices.end()) {
                        throw std::invalid_argument("'" + v + "' is not allowed");
                      }
                      *p = v;
                    },
                    [=] { return *p; }, allowed});
  };
  const int64_t big = std::numeric_limits<int32_t>::max();
  add_string("model.series", &c.model_series, {"llama", "moe", "vae", "flux", "wan"});
  add_int("model.vocab_size", &c.llama.vocab_size, 1, big);
  add_int("model.dim", &c.llama.dim, 1, big);
  add_int("model.n_layers", &c.llama.n_layers, 0, 10000);
  add_int("model.n_heads", &c.llama.n_heads, 1, 10000);
  add_int("model.n_kv_heads", &c.llama.n_kv_heads, 1, 10000);
  add_int("model.ffn_hidden", &c.llama.ffn_hidden, 1, big);
  add_float("model.norm_eps", &c.llama.norm_eps, 1e-12, 1.0);
  add_float("model.rope_theta", &c.llama.rope_theta, 1.0, 1e9);
  add_bool("model.tie_embeddings", &c.llama.tie_embeddings);
  add_int("model.max_seq_len", &c.llama.max_seq_len, 1, 1 << 20);
  add_int("model.n_experts", &c.llama.moe.n_experts, 0, 4096);
  add_int("model.top_k", &c.llama.moe.top_k, 1, 4096);
  add_int("model.shared_expert_hidden", &c.llama.moe.shared_expert_hidden, 0, big);
  add_float("model.aux_loss_coef", &c.llama.moe.aux_loss_coef, 0.0, 100.0);
  add_string("model.init_from", &c.init_from, {});
  add_int("vae.base_channels", &c.vae.base_channels, 1, 1 << 16);
  keys.push_back({"vae.channel_mult", "string",
                  [&c](const std::string& v) { c.vae.channel_mult = models::parse_int_list("vae.channel_mult", v); },
                  [&c] { return models::int_list_text(c.vae.channel_mult); },
                  "a list of integers >= 1, one per level, e.g. [1, 2, 2]"});
  keys.push_back({"vae.temporal_down", "string",
                  [&c](const std::string& v) { c.vae.temporal_down = models::parse_bool_list("vae.temporal_down", v); },
                  [&c] { return models::bool_list_text(c.vae.temporal_down); },
                  "a list of true/false, one per downsampling (levels - 1), e.g. [false, true]"});
  add_int("vae.z_channels", &c.vae.z_channels, 1, 1 << 16);
  add_int("vae.num_res_blocks", &c.vae.num_res_blocks, 1, 64);
  add_float("vae.norm_eps", &c.vae.norm_eps, 1e-12, 1.0);
  add_float("vae.kl_weight", &c.vae.kl_weight, 0.0, 1e6);
  add_int("vae.chunk_frames", &c.vae.chunk_frames, 0, 1 << 20);
  add_int("flux.dim", &c.flux.dim, 4, 1 << 16);
  add_int("flux.n_heads", &c.flux.n_heads, 1, 1024);
  add_int("flux.double_blocks", &c.flux.double_blocks, 0, 1024);
  add_int("flux.single_blocks", &c.flux.single_blocks, 0, 1024);
  add_int("flux.mlp_ratio", &c.flux.mlp_ratio, 1, 64);
  add_int("flux.patch_size", &c.flux.patch_size, 1, 64);
  add_float("flux.rope_theta", &c.flux.rope_theta, 1.0, 1e9);
  add_float("flux.latent_scale", &c.flux.latent_scale, 1e-6, 1e6);
  // The diffusion pipelines' frozen towers: the text encoder's shape and both towers' files.
  auto add_towers = [&](const std::string& series, models::TextEncoderConfig& t, std::string* vae_from,
                        std::string* text_from) {
    add_int(series + ".text_dim", &t.dim, 2, 1 << 16);
    add_int(series + ".text_layers", &t.n_layers, 0, 1024);
    add_int(series + ".text_heads", &t.n_heads, 1, 1024);
    add_int(series + ".text_ffn_hidden", &t.ffn_hidden, 1, 1 << 20);
    add_int(series + ".text_len", &t.max_len, 1, 4096);
    add_string(series + ".vae_from", vae_from, {});
    add_string(series + ".text_encoder_from", text_from, {});
  };
  add_towers("flux", c.flux.text, &c.flux_vae_from, &c.flux_text_encoder_from);
  add_int("wan.dim", &c.wan.dim, 6, 1 << 16);
  add_int("wan.n_heads", &c.wan.n_heads, 1, 1024);
  add_int("wan.layers", &c.wan.layers, 0, 1024);
  add_int("wan.ffn_hidden", &c.wan.ffn_hidden, 1, 1 << 20);
  add_int("wan.patch_size", &c.wan.patch_size, 1, 64);
  add_float("wan.rope_theta", &c.wan.rope_theta, 1.0, 1e9);
  add_float("wan.latent_scale", &c.wan.latent_scale, 1e-6, 1e6);
  add_towers("wan", c.wan.text, &c.wan_vae_from, &c.wan_text_encoder_from);
  add_int("lora.rank", &c.lora_rank, 0, 1 << 16);
  add_float("lora.alpha", &c.lora_alpha, 0.0, 1e6);
  add_string("lora.targets", &c.lora_targets, {});
  add_int("train.steps", &c.steps, 1, big);
  add_int("train.micro_batch_size", &c.micro_batch_size, 1, 1 << 20);
  add_int("train.grad_accum", &c.grad_accum, 1, 1 << 20);
  add_int("train.global_batch_size", &c.global_batch_size, 0, 1 << 30);
  add_int("train.seq_len", &c.seq_len, 1, 1 << 20);
  add_float("train.lr", &c.lr, 0.0, 10.0);
  add_float("train.min_lr", &c.min_lr, 0.0, 10.0);
  add_int("train.warmup_steps", &c.warmup_steps, 0, big);
  add_float("train.weight_decay", &c.weight_decay, 0.0, 10.0);
  add_float("train.beta1", &c.beta1, 0.0, 0.999999);
  add_float("train.beta2", &c.beta2, 0.0, 0.99999999);
  add_float("train.eps", &c.eps, 1e-30, 1.0);
  add_float("train.clip_grad_norm", &c.clip_grad_norm, 0.0, 1e12);
  add_int("train.seed", &c.seed, 0, std::numeric_limits<int64_t>::max());
  add_bool("train.activation_checkpointing", &c.activation_checkpointing);
  add_string("mixed_precision.param_dtype", &c.param_dtype, {"fp32", "bf16"});
  add_string("mixed_precision.reduce_dtype", &c.reduce_dtype, {"fp32", "bf16"});
  add_string("mixed_precision.bf16_matmul", &c.bf16_matmul, {"auto", "native", "via_fp32"});
  add_int("train.log_every", &c.log_every, 1, big);
  add_int("train.save_every", &c.save_every, 0, big);
  add_int("train.keep_last", &c.keep_last, 0, big);
  add_bool("train.save_final", &c.save_final);
  add_bool("train.save_on_signal", &c.save_on_signal);
  add_string("train.on_nonfinite", &c.on_nonfinite, {"abort", "skip"});
  add_string("train.resume", &c.resume, {});
  keys.push_back({"parallel.strategy", "string",
                  // parse_strategy accepts the zero-stage aliases and lists the valid names.
                  [&c](const std::string& v) { c.strategy = strategy_name(parse_strategy(v)); },
                  [&c] { return c.strategy; },
                  "no_shard, optim, optim_grads, optim_grads_params, or a zero stage 0-3"});
  add_int("parallel.zero_stage", &c.zero_stage, 0, 3);
  add_float("parallel.comm_timeout_s", &c.comm_timeout_s, 1.0, 86400.0);
  add_int("parallel.threads", &c.threads, 0, 1024);
  add_bool("parallel.prefetch", &c.prefetch);
  add_int("parallel.max_live_units", &c.max_live_units, 1, 1 << 20);
  add_int("parallel.persistence_threshold", &c.persistence_threshold, 0, big);
  add_int("parallel.reduce_bucket_bytes", &c.reduce_bucket_bytes, 0, big);
  add_bool("parallel.hybrid", &c.hybrid);
  add_int("parallel.shard_group_size", &c.shard_group_size, 0, 1 << 20);
  add_string("data.source", &c.data_source, {"system_text", "synthetic", "file", "shapes"});
  add_string("data.path", &c.data_path, {});
  add_int("data.synthetic_bytes", &c.data_synthetic_bytes, 1024, int64_t{1} << 34);
  add_int("data.seed", &c.data_seed, 0, std::numeric_limits<int64_t>::max());
  add_int("data.frames", &c.frames, 1, 1 << 16);
  add_int("data.image_size", &c.image_size, 1, 1 << 16);
  add_string("run.dir", &c.run_dir, {});
  add_bool("run.dump_init", &c.dump_init);
  add_bool("run.dump_batches", &c.dump_batches);
  add_bool("run.dump_final_shards", &c.dump_final_shards);
  add_bool("run.progress", &c.progress);
  add_int("run.max_rss_mb", &c.max_rss_mb, 0, big);
  add_int("debug.fail_at_step", &c.debug_fail_at_step, 0, big);
  add_int("debug.fail_rank", &c.debug_fail_rank, 0, 1 << 20);
  add_bool("debug.check_desync", &c.check_desync);
  add_string("debug.check_recompute", &c.check_recompute, {"off", "shape", "bitwise"});
  add_string("debug.fail_kind", &c.debug_fail_kind, {"exception", "sigkill", "sigkill_in_save", "nan", "desync"});
  return keys;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Key& find_key(std::vector<Key>& keys, const std::string& name, const std::string& where) {
  for (auto& k : keys) {
    if (k.name == name) return k;
  }
  const Key* best = nullptr;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : keys) {
    size_t d = edit_distance(name, k.name);
    // also compare the last path component, so "train.stpes" and "stpes" both find train.steps
    const auto dot = k.name.rfind('.');
    if (dot != std::string::npos) d = std::min(d, edit_distance(name, k.name.substr(dot + 1)) + 1);
    if (d < best_d) {
      best_d = d;
      best = &k;
    }
  }
  throw std::invalid_argument(where + ": unknown config key '" + name + "'" +
                              (best ? "; did you mean '" + best->name + "'?" : std::string()));
}

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& file,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, file, out);
    }
  } else if (node.IsScalar()) {
    out.emplace_back(prefix, node.Scalar());
  } else if (node.IsSequence()) {
    // A list of scalars (e.g. vae.channel_mult: [1, 2, 2]) reaches its key as "1,2,2".
    std::string joined;
    for (const auto& item : node) {
      if (!item.IsScalar()) throw std::invalid_argument(file + ": key '" + prefix + "' must be a list of plain values");
      joined += (joined.empty() ? "" : ",") + item.Scalar();
    }
    out.emplace_back(prefix, joined);
  } else if (node.IsNull()) {
    throw std::invalid_argument(file + ": key '" + prefix + "' has no value");
  } else {
    throw std::invalid_argument(file + ": key '" + prefix + "' must be a value or a list of values");
  }
}

void load_file(const std::string& path, std::vector<Key>& keys, Provenance* prov, std::set<std::string>& chain) {
  const std::string canon = fs::weakly_canonical(path).string();
  if (!chain.insert(canon).second) throw std::invalid_argument(path + ": 'base' inheritance forms a cycle");
  if (!fs::exists(path)) throw std::invalid_argument("config file '" + path + "' does not exist");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("config file '" + path + "' is not valid YAML: " + e.what());
  }
  if (!root.IsMap()) throw std::invalid_argument("config file '" + path + "' must be a mapping of keys");
  if (root["base"]) {
    fs::path base = root["base"].as<std::string>();
    if (base.is_relative()) base = fs::path(path).parent_path() / base;
    load_file(base.string(), keys, prov, chain);
  }
  std::vector<std::pair<std::string, std::string>> items;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key == "base") continue;
    flatten(kv.second, key, path, items);
  }
  for (const auto& [k, v] : items) {
    Key& key = find_key(keys, k, path);
    try {
      key.set(v);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(path + ": " + k + ": " + e.what() + " (expected " + key.allowed + ")");
    }
    if (prov) (*prov)[k] = path;
  }
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides, Provenance* provenance) {
  TrainConfig c;
  Provenance local;
  if (provenance == nullptr) provenance = &local;
  auto keys = registry(c);
  if (provenance) {
    for (const auto& k : keys) (*provenance)[k.name] = "default";
  }
  if (!path.empty()) {
    std::set<std::string> chain;
    load_file(path, keys, provenance, chain);
    c.config_path = path;
  }
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument("--set '" + o + "': expected key=value, e.g. --set train.steps=100");
    }
    const std::string k = o.substr(0, eq), v = o.substr(eq + 1);
    Key& key = find_key(keys, k, "--set");
    try {
      key.set(v);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--set " + k + ": " + e.what() + " (expected " + key.allowed + ")");
    }
    if (provenance) (*provenance)[k] = "--set";
  }
  // parallel.strategy and its alias parallel.zero_stage: the later source wins (--set over a
  // file over the default); the same source giving both, differently, is an error.
  if (c.zero_stage >= 0) {
    auto level = [](const std::string& from) { return from == "default" ? 0 : from == "--set" ? 2 : 1; };
    const std::string from_stage = strategy_name(strategy_from_zero_stage(static_cast<int>(c.zero_stage)));
    const std::string& sp = (*provenance)["parallel.strategy"];
    const std::string& zp = (*provenance)["parallel.zero_stage"];
    if (from_stage != c.strategy) {
      if (level(sp) == level(zp)) {
        throw std::invalid_argument("parallel.zero_stage=" + std::to_string(c.zero_stage) + " (" + from_stage +
                                    ", from " + zp + ") contradicts parallel.strategy=" + c.strategy + " (from " +
                                    sp + "); set only one of them");
      }
      if (level(sp) > level(zp)) c.zero_stage = static_cast<int64_t>(parse_strategy(c.strategy));
    }
  }
  validate(c);
  return c;
}

namespace {

// A key of another series' model or data, changed from its default, would be silently
// ignored: name it instead.
void check_series_keys(const TrainConfig& c) {
  const bool lm = c.model_series == "llama" || c.model_series == "moe";
  auto lm_only = [](const std::string& k) {
    return (k.rfind("model.", 0) == 0 && k != "model.series" && k != "model.init_from") || k == "train.seq_len" ||
           k == "data.path" || k == "data.synthetic_bytes";
  };
  // Which series each other key applies to (the flux pipeline's VAE tower takes vae.*).
  auto owners = [](const std::string& k) -> std::vector<std::string> {
    if (k.rfind("vae.", 0) == 0) return {"vae", "flux", "wan"};
    if (k == "data.frames") return {"vae", "wan"};
    if (k.rfind("flux.", 0) == 0) return {"flux"};
    if (k.rfind("wan.", 0) == 0) return {"wan"};
    if (k.rfind("lora.", 0) == 0) return {"llama", "moe", "flux", "wan"};
    return {};
  };
  const auto now = config_items(c);
  const auto defaults = config_items(TrainConfig());
  for (size_t i = 0; i < now.size(); ++i) {
    const std::string& key = now[i].first;
    if (now[i].second == defaults[i].second) continue;
    if (!lm && lm_only(key)) {
      throw std::invalid_argument(key + "=" + now[i].second + " applies to the language-model series (llama, moe), not " +
                                  c.model_series);
    }
    const auto series = owners(key);
    if (!series.empty() && std::find(series.begin(), series.end(), c.model_series) == series.end()) {
      std::string names;
      for (const auto& s : series) names += (names.empty() ? "" : ", ") + s;
      throw std::invalid_argument(key + "=" + now[i].second + " applies to model.series: " + names + ", not " +
                                  c.model_series);
    }
  }
  const bool clips = c.data_source == "shapes";
  if (!lm && !clips) {
    throw std::invalid_argument("model.series: " + c.model_series + " trains on generated clips: set data.source: shapes (got " +
                                c.data_source + ")");
  }
  if (lm && clips) {
    throw std::invalid_argument("data.source: shapes makes clips, not text; model.series: " + c.model_series +
                                " needs system_text, synthetic or file");
  }
}

}  // namespace

void validate(TrainConfig& c) {
  if (c.zero_stage >= 0) {
    // The alias sets the strategy (load_config rejects contradicting both).
    c.strategy = strategy_name(strategy_from_zero_stage(static_cast<int>(c.zero_stage)));
  }
  parse_strategy(c.strategy);
  check_series_keys(c);
  if (c.model_series == "llama" && !(c.llama.moe == models::MoeConfig{})) {
    throw std::invalid_argument(
        "model.n_experts, model.top_k, model.shared_expert_hidden and model.aux_loss_coef apply to model.series: moe, "
        "not llama");
  }
  if (c.model_series == "moe" && c.llama.moe.n_experts < 2) {
    throw std::invalid_argument("model.series: moe needs model.n_experts >= 2, got " +
                                std::to_string(c.llama.moe.n_experts));
  }
  c.llama.validate();
  if (c.model_series == "vae") c.vae.validate(c.frames, c.image_size);
  if (c.model_series == "flux") {
    for (bool t : c.vae.temporal_down) {
      if (t) {
        throw std::invalid_argument("vae.temporal_down=" + models::bool_list_text(c.vae.temporal_down) +
                                    ": the flux pipeline's VAE codes single images; set every entry to false");
      }
    }
    c.vae.validate(1, c.image_size);
    c.flux.validate(c.image_size / c.vae.spatial_factor());
  }
  if (c.model_series == "wan") {
    c.vae.validate(c.frames, c.image_size);
    c.wan.validate(c.image_size / c.vae.spatial_factor());
  }
  // The pipelines' tower files.
  for (const auto& [key, path] : {std::pair<std::string, const std::string*>{"flux.vae_from", &c.flux_vae_from},
                                  {"flux.text_encoder_from", &c.flux_text_encoder_from},
                                  {"wan.vae_from", &c.wan_vae_from},
                                  {"wan.text_encoder_from", &c.wan_text_encoder_from}}) {
    if (path->empty()) continue;
    if (!c.init_from.empty()) {
      throw std::invalid_argument("model.init_from holds the whole pipeline, towers included; drop " + key +
                                  " or model.init_from");
    }
    if (!fs::exists(*path)) throw std::invalid_argument(key + ": file '" + *path + "' does not exist");
  }

  if (c.seq_len > c.llama.max_seq_len) {
    throw std::invalid_argument("train.seq_len (" + std::to_string(c.seq_len) + ") exceeds model.max_seq_len (" +
                                std::to_string(c.llama.max_seq_len) + ")");
  }
  if (c.llama.vocab_size < 256) {
    throw std::invalid_argument("model.vocab_size (" + std::to_string(c.llama.vocab_size) +
                                ") must be >= 256 for the byte-level tokenizer");
  }
  if (!c.init_from.empty() && !c.resume.empty()) {
    throw std::invalid_argument("model.init_from and train.resume both set: a resumed run takes its weights from the "
                                "checkpoint; set only one");
  }
  if (!c.init_from.empty() && !fs::exists(c.init_from)) {
    throw std::invalid_argument("model.init_from: file '" + c.init_from + "' does not exist");
  }
  if (c.lora_rank == 0 && (c.lora_alpha != TrainConfig().lora_alpha || c.lora_targets != TrainConfig().lora_targets)) {
    throw std::invalid_argument("lora.alpha and lora.targets apply only with lora.rank > 0 (LoRA is off)");
  }
  if (c.lora_rank > 0 && c.lora_targets.empty()) {
    throw std::invalid_argument("lora.targets is empty: name the Linear layers to adapt, e.g. wq,wv");
  }
  if (c.check_recompute != "off" && !c.activation_checkpointing) {
    throw std::invalid_argument("debug.check_recompute=" + c.check_recompute +
                                " checks activation checkpointing, which is off; set train.activation_checkpointing: true");
  }
  if (c.max_live_units != TrainConfig().max_live_units && !c.prefetch) {
    throw std::invalid_argument("parallel.max_live_units=" + std::to_string(c.max_live_units) +
                                " bounds what prefetch gathers ahead, which is off; set parallel.prefetch: true");
  }
  if (c.shard_group_size != 0 && !c.hybrid) {
    throw std::invalid_argument("parallel.shard_group_size=" + std::to_string(c.shard_group_size) +
                                " only applies to hybrid sharding; set parallel.hybrid: true as well");
  }
  if (c.min_lr > c.lr) {
    throw std::invalid_argument("train.min_lr (" + to_text(c.min_lr) + ") exceeds train.lr (" + to_text(c.lr) + ")");
  }
}

nn::LoraOptions lora_options(const TrainConfig& cfg) {
  nn::LoraOptions o;
  o.rank = cfg.lora_rank;
  o.alpha = cfg.lora_alpha;
  for (const std::string& t : util::split_trimmed(cfg.lora_targets)) {
    if (!t.empty()) o.targets.push_back(t);
  }
  return o;
}

void apply_world_size(TrainConfig& c, int world_size, int local_world_size) {
  if (c.hybrid) {
    if (c.shard_group_size == 0) c.shard_group_size = local_world_size;
    if (world_size % c.shard_group_size != 0) {
      throw std::invalid_argument("parallel.shard_group_size=" + std::to_string(c.shard_group_size) +
                                  " does not divide the world size " + std::to_string(world_size) +
                                  ": hybrid sharding holds one copy of the model per group of that many ranks");
    }
  }
  if (c.global_batch_size <= 0) return;
  const int64_t per_micro = static_cast<int64_t>(world_size) * c.micro_batch_size;
  if (c.global_batch_size % per_micro != 0) {
    throw std::invalid_argument("train.global_batch_size=" + std::to_string(c.global_batch_size) +
                                " is not a multiple of world size " + std::to_string(world_size) +
                                " x train.micro_batch_size " + std::to_string(c.micro_batch_size) + " = " +
                                std::to_string(per_micro));
  }
  const int64_t accum = c.global_batch_size / per_micro;
  if (c.grad_accum != 1 && c.grad_accum != accum) {
    throw std::invalid_argument("train.grad_accum=" + std::to_string(c.grad_accum) + " contradicts train.global_batch_size=" +
                                std::to_string(c.global_batch_size) + " (which needs " + std::to_string(accum) +
                                " at world size " + std::to_string(world_size) + "); set only one of them");
  }
  c.grad_accum = accum;
}

std::vector<std::pair<std::string, std::string>> config_items(const TrainConfig& c) {
  TrainConfig copy = c;
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& k : registry(copy)) out.emplace_back(k.name, k.get());
  return out;
}

nlohmann::json config_to_json(const TrainConfig& c, int world_size) {
  TrainConfig copy = c;
  nlohmann::json j = nlohmann::json::object();
  for (auto& k : registry(copy)) {
    const auto dot = k.name.find('.');
    const std::string section = k.name.substr(0, dot), field = k.name.substr(dot + 1);
    const std::string v = k.get();
    if (k.type == "int") j[section][field] = std::stoll(v);
    else if (k.type == "float") j[section][field] = std::stod(v);
    else if (k.type == "bool") j[section][field] = (v == "true");
    else j[section][field] = v;
  }
  j["world_size"] = world_size;
  return j;
}

}  // namespace zeroshard::train
