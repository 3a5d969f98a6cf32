#include "checkpoint/peft.h"

#include "checkpoint/checkpoint.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "util/text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

namespace zeroshard::ckpt {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPeftPrefix = "base_model.model.";

// "1,2" -> {"1", "2"} without empty entries.
std::vector<std::string> split_targets(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& t : util::split_trimmed(text)) {
    if (!t.empty()) out.push_back(t);
  }
  return out;
}

std::string joined(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return nlohmann::json(v).dump();
}

}  // namespace

std::string peft_key(const std::string& our_name, const std::string& adapter_root) {
  std::string kind;
  std::string module;
  if (util::ends_with(our_name, ".lora_a")) {
    kind = "lora_A";
    module = our_name.substr(0, our_name.size() - 7);
  } else if (util::ends_with(our_name, ".lora_b")) {
    kind = "lora_B";
    module = our_name.substr(0, our_name.size() - 7);
  } else {
    throw std::invalid_argument("'" + our_name + "' is no LoRA adapter parameter (<module>.lora_a / .lora_b)");
  }
  if (!util::starts_with(module, adapter_root)) {
    throw std::invalid_argument("LoRA parameter '" + our_name + "' lies outside the adapted model '" + adapter_root +
                                "': a PEFT adapter names the modules of one model");
  }
  return kPeftPrefix + module.substr(adapter_root.size()) + "." + kind + ".weight";
}

std::string peft_dir(const std::string& path) {
  if (fs::is_directory(path)) return path;
  if (fs::path(path).filename() == kPeftWeights) return fs::path(path).parent_path().string();
  throw std::invalid_argument("'" + path + "' is no PEFT adapter: expected a folder holding " + kPeftWeights +
                              " and " + kPeftConfig + ", or the path of its " + kPeftWeights);
}

PeftAdapterConfig read_peft_config(const std::string& path) {
  const std::string file = (fs::path(peft_dir(path)) / kPeftConfig).string();
  std::ifstream in(file);
  if (!in) throw std::invalid_argument("cannot read PEFT adapter config '" + file + "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(file + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw std::invalid_argument(file + ": expected a JSON object");
  auto refuse = [&](const std::string& key, const std::string& why) {
    throw std::invalid_argument(file + ": " + key + " = " + (j.contains(key) ? j[key].dump() : "(absent)") + ": " + why);
  };
  if (j.value("peft_type", std::string()) != "LORA") refuse("peft_type", "zeroshard reads LoRA adapters only (\"LORA\")");
  // Settings that change what the adapter computes, which zeroshard does not reproduce.
  auto is_true = [&](const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); };
  if (is_true("use_rslora")) refuse("use_rslora", "rank-stabilized scaling alpha / sqrt(r); zeroshard scales by alpha / r");
  if (is_true("use_dora")) refuse("use_dora", "DoRA's magnitude vectors are not implemented");
  if (is_true("fan_in_fan_out")) refuse("fan_in_fan_out", "transposed (Conv1D) base weights; zeroshard's Linear is [out, in]");
  if (j.contains("bias") && j["bias"] != "none") refuse("bias", "adapters with trained biases are not implemented");
  if (j.contains("lora_dropout") && j["lora_dropout"].is_number() && j["lora_dropout"].get<double>() != 0.0) {
    refuse("lora_dropout", "zeroshard has no adapter dropout; to continue training without it, set 0.0 in " + file);
  }
  for (const char* key : {"modules_to_save", "layers_to_transform", "layers_pattern", "layer_replication"}) {
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty())) {
      refuse(key, "not supported: zeroshard's adapters are exactly lora_A / lora_B on the target Linear layers");
    }
  }
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (j.contains(key) && !j[key].is_null() && !j[key].empty()) refuse(key, "per-module ranks / alphas are not supported");
  }
  PeftAdapterConfig c;
  if (!j.contains("r") || !j["r"].is_number_integer()) refuse("r", "expected the integer rank");
  c.r = j["r"].get<int64_t>();
  if (!j.contains("lora_alpha") || !j["lora_alpha"].is_number()) refuse("lora_alpha", "expected a number");
  c.lora_alpha = j["lora_alpha"].get<double>();
  if (!j.contains("target_modules") || !j["target_modules"].is_array()) {
    refuse("target_modules", "expected a list of module names (a regex string is not supported)");
  }
  for (const auto& t : j["target_modules"]) {
    if (!t.is_string() || t.get<std::string>().empty() || t.get<std::string>().find('.') != std::string::npos) {
      refuse("target_modules", "expected last name components of Linear layers, e.g. [\"wq\", \"wv\"]");
    }
    c.target_modules.push_back(t.get<std::string>());
  }
  return c;
}

namespace {

class PeftAdapterSource : public ParamSource {
 public:
  PeftAdapterSource(const std::string& path, std::string root)
      : file_((fs::path(peft_dir(path)) / kPeftWeights).string()), root_(std::move(root)) {}

  void check(const std::vector<ParamInfo>& params) override {
    std::set<std::string> used;
    for (const auto& p : params) {
      const std::string key = peft_key(p.name, root_);
      const io::TensorEntry* e = file_.find(key);
      if (e == nullptr) {
        throw std::invalid_argument(file_.path() + " has no tensor '" + key + "' for the model's adapter '" + p.name +
                                    "' (an adapter of another model, or other lora.targets?)");
      }
      if (e->shape != p.shape) {
        throw std::invalid_argument(file_.path() + ": tensor '" + key + "' has shape " + io::shape_text(e->shape) +
                                    ", the model's adapter '" + p.name + "' " + io::shape_text(p.shape));
      }
      used.insert(key);
      keys_[p.name] = e;
    }
    for (const auto& e : file_.entries()) {
      if (!used.count(e.name)) {
        throw std::invalid_argument(file_.path() + " holds '" + e.name +
                                    "', which is no adapter of this model (wrong model or lora.targets?)");
      }
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    auto it = keys_.find(param.name);
    if (it == keys_.end()) throw std::logic_error("PEFT adapter source: '" + param.name + "' was not checked");
    file_.read_range(*it->second, begin, end, out);
  }

 private:
  io::SafetensorsFile file_;
  std::string root_;
  std::map<std::string, const io::TensorEntry*> keys_;
};

}  // namespace

std::shared_ptr<ParamSource> peft_adapter_source(const std::string& path, const std::string& adapter_root,
                                                 int64_t rank, double alpha, const std::vector<std::string>& targets) {
  const PeftAdapterConfig c = read_peft_config(path);
  const std::string where = (fs::path(peft_dir(path)) / kPeftConfig).string();
  if (c.r != rank) {
    throw std::invalid_argument("lora.init_from: " + where + " has r = " + std::to_string(c.r) + ", this run lora.rank=" +
                                std::to_string(rank) + "; set --set lora.rank=" + std::to_string(c.r));
  }
  if (c.lora_alpha != alpha) {
    throw std::invalid_argument("lora.init_from: " + where + " has lora_alpha = " + number_text(c.lora_alpha) +
                                ", this run lora.alpha=" + number_text(alpha) + "; set --set lora.alpha=" +
                                number_text(c.lora_alpha));
  }
  if (joined(c.target_modules) != joined(targets)) {
    throw std::invalid_argument("lora.init_from: " + where + " has target_modules " + joined(c.target_modules) +
                                ", this run lora.targets=" + joined(targets) + "; set --set lora.targets=" +
                                joined(c.target_modules));
  }
  return std::make_shared<PeftAdapterSource>(path, adapter_root);
}

std::vector<std::string> export_peft_adapter(const std::string& checkpoint_dir, const std::string& out_dir,
                                             const std::string& adapter_root, at::ScalarType dtype) {
  if (dtype != at::kFloat && dtype != at::kBFloat16) throw std::invalid_argument("export --peft: dtype must be fp32 or bf16");
  Checkpoint ck(checkpoint_dir);
  const nlohmann::json& lora = ck.config().contains("lora") ? ck.config()["lora"] : nlohmann::json::object();
  const int64_t r = lora.value("rank", int64_t{0});
  if (r <= 0) {
    throw std::invalid_argument("export --peft: " + checkpoint_dir + " was not a LoRA run (lora.rank is " +
                                std::to_string(r) + "): it has no adapters");
  }
  std::vector<const TensorRecord*> adapters;
  std::vector<io::TensorEntry> entries;
  for (const auto& t : ck.tensors()) {
    if (!t.trainable || !(util::ends_with(t.name, ".lora_a") || util::ends_with(t.name, ".lora_b"))) continue;
    adapters.push_back(&t);
    entries.push_back({peft_key(t.name, adapter_root), dtype, t.shape});
  }
  if (adapters.empty()) throw std::invalid_argument("export --peft: " + checkpoint_dir + " holds no *.lora_a / *.lora_b");
  fs::create_directories(out_dir);
  const std::string weights = (fs::path(out_dir) / kPeftWeights).string();
  io::SafetensorsWriter writer(weights, entries, {{"format", "pt"}});
  for (size_t i = 0; i < adapters.size(); ++i) {
    at::Tensor full = at::empty({adapters[i]->numel}, at::kFloat);
    ck.read(*adapters[i], "param", 0, adapters[i]->numel, full);
    writer.write(entries[i].name, full.view(adapters[i]->shape));
  }
  writer.finish();
  const double alpha = lora.value("alpha", 16.0);
  nlohmann::json config = {
      {"peft_type", "LORA"},
      {"r", r},
      {"target_modules", split_targets(lora.value("targets", std::string()))},
      {"lora_dropout", 0.0},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"task_type", nullptr},
      {"revision", nullptr},
      {"base_model_name_or_path", nullptr}};
  // An integral alpha as an integer, as PEFT writes its default configs.
  config["lora_alpha"] = alpha == std::floor(alpha) && std::fabs(alpha) < 1e15 ? nlohmann::json(static_cast<int64_t>(alpha))
                                                                              : nlohmann::json(alpha);
  const std::string base = ck.config().contains("model") ? ck.config()["model"].value("init_from", std::string()) : "";
  if (!base.empty()) config["base_model_name_or_path"] = base;
  const std::string config_path = (fs::path(out_dir) / kPeftConfig).string();
  io::write_file_atomic(config_path, config.dump(2) + "\n");
  return {weights, config_path};
}

}  // namespace zeroshard::ckpt
