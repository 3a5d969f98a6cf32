// Hugging Face model folders in and out: model.from_hf's parameter source and
// `zeroshard export --format hf`. The model's parameter names are the checkpoint names
// (model.h), so no name map is needed; what differs is tying and the folder layout.
#include "checkpoint/checkpoint.h"
#include "io/file.h"
#include "io/safetensors.h"
#include "models/qwen3/series_parts.h"
#include "nn/layers.h"
#include "text/bpe_tokenizer.h"
#include "util/text.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace zeroshard::models::qwen3 {

namespace fs = std::filesystem;

namespace {

constexpr const char* kEmbed = "model.embed_tokens.weight";
constexpr const char* kHead = "lm_head.weight";

class HfFolderSource : public ParamSource {
 public:
  // The folder's model.safetensors.index.json or model.safetensors (io::SafetensorsSet).
  HfFolderSource(const std::string& dir, bool tied) : dir_(dir), tied_(tied), set_(checked_folder(dir)) {}

  void check(const std::vector<ParamInfo>& params) override {
    std::set<std::string> used;
    for (const auto& p : params) {
      const std::string stored = stored_name(p.name);
      const io::SafetensorsSet::Where* w = set_.find(stored);
      if (w == nullptr) {
        throw std::runtime_error(set_.path() + ": has no tensor '" + p.name + "' (shape " + io::shape_text(p.shape) +
                                 (p.name == kEmbed && tied_ ? ", nor lm_head.weight (tied)" : "") +
                                 "): the folder does not hold this model's weights");
      }
      const auto& [file, e] = *w;
      if (e->shape != p.shape) {
        throw std::runtime_error(file->path() + ": tensor '" + stored + "' has shape " + io::shape_text(e->shape) +
                                 " but config.json's model expects " + io::shape_text(p.shape));
      }
      if (e->dtype != at::kFloat && e->dtype != at::kBFloat16 && e->dtype != at::kHalf) {
        throw std::runtime_error(file->path() + ": tensor '" + stored + "' has dtype " + io::safetensors_dtype(e->dtype) +
                                 "; weights load from F32, BF16 or F16");
      }
      used.insert(stored);
    }
    // A tied folder may store lm_head.weight beside the embedding (transformers ignores it and
    // ties); read() checks that each rank's range of it equals the embedding's.
    if (tied_ && used.count(kEmbed) && set_.find(kHead)) check_tied_copy_ = true;
    for (const auto& [name, loc] : set_.tensors()) {
      if (used.count(name) || (check_tied_copy_ && name == kHead)) continue;
      throw std::runtime_error(loc.file->path() + ": tensor '" + name +
                               "' is not a parameter of the model config.json describes (a folder of another model?)");
    }
  }

  void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) override {
    const auto& [file, e] = *set_.find(stored_name(param.name));
    file->read_range(*e, begin, end, out);
    if (check_tied_copy_ && param.name == kEmbed) {
      const auto& [head_file, head] = *set_.find(kHead);
      at::Tensor copy = at::empty_like(out);
      head_file->read_range(*head, begin, end, copy);
      if (!at::equal(copy, out)) {
        throw std::runtime_error(dir_ + ": tie_word_embeddings is true but the stored lm_head.weight differs from "
                                 "model.embed_tokens.weight in elements [" + std::to_string(begin) + ", " +
                                 std::to_string(end) + ")");
      }
    }
  }

  ParamLocation locate(const ParamInfo& param) const override {
    const io::SafetensorsSet::Where* w = set_.find(stored_name(param.name));
    if (w == nullptr) return {};
    ParamLocation l = w->file->location(*w->entry);
    // A tied copy is compared with the embedding as it is read: that check needs read().
    l.whole = !(check_tied_copy_ && param.name == kEmbed);
    if (!l.whole) {
      const std::string& head = set_.find(kHead)->file->path();
      if (head != l.file) l.also_reads.push_back(head);
    }
    return l;
  }

 private:
  std::string stored_name(const std::string& name) const {
    if (tied_ && name == kEmbed && !set_.find(kEmbed) && set_.find(kHead)) return kHead;
    return name;
  }

  static std::string checked_folder(const std::string& dir) {
    if (!fs::exists(fs::path(dir) / "model.safetensors.index.json") && !fs::exists(fs::path(dir) / "model.safetensors")) {
      throw std::runtime_error("model.from_hf: " + dir + " has neither model.safetensors nor model.safetensors.index.json");
    }
    return dir;
  }

  std::string dir_;
  bool tied_;
  bool check_tied_copy_ = false;
  io::SafetensorsSet set_;
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

void copy_whole_file(const fs::path& from, const fs::path& to) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// What the tokenizer folder says the special ids are (for config.json / generation_config.json
// when the run did not start from a folder that had them).
struct SpecialIds {
  std::optional<int32_t> bos, eos, pad, endoftext;
};

SpecialIds special_ids(const std::string& tokenizer_json) {
  SpecialIds ids;
  if (tokenizer_json.empty()) return ids;
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(tokenizer_json);
  ids.bos = tok.bos_id();
  ids.eos = tok.eos_id();
  ids.pad = tok.pad_id();
  ids.endoftext = tok.token_to_id("<|endoftext|>");
  return ids;
}

}  // namespace

std::shared_ptr<ParamSource> hf_param_source(const std::string& dir, const QwenConfig& config) {
  return std::make_shared<HfFolderSource>(dir, config.tie_word_embeddings);
}

std::vector<std::string> export_hf(ckpt::Checkpoint& ck, const train::TrainConfig& cfg, const HfExportOptions& o) {
  if (o.dtype != "fp32" && o.dtype != "bf16") throw std::invalid_argument("export: --dtype must be fp32 or bf16");
  const at::ScalarType dtype = o.dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const auto& series = cfg.series_config<QwenSeriesConfig>();
  QwenConfig config = series.qwen();
  const fs::path out(o.out_dir);
  fs::create_directories(out);
  std::vector<std::string> written;

  // config.json: the folder the run started from keeps its other fields (token ids, ...).
  std::string from_hf;
  const nlohmann::json& saved = ck.config();
  if (saved.contains("model") && saved["model"].contains("from_hf") && saved["model"]["from_hf"].is_string()) {
    from_hf = saved["model"]["from_hf"].get<std::string>();
  }
  if (!from_hf.empty() && fs::exists(fs::path(from_hf) / "config.json")) config.source = read_json(fs::path(from_hf) / "config.json");
  nlohmann::json hf = config.to_hf_config();
  hf["torch_dtype"] = o.dtype == "bf16" ? "bfloat16" : "float32";
  const std::string tokenizer = tokenizer_path_of(cfg);
  const SpecialIds ids = special_ids(tokenizer);
  if (!hf.contains("bos_token_id")) hf["bos_token_id"] = ids.bos ? nlohmann::json(*ids.bos) : ids.endoftext ? nlohmann::json(*ids.endoftext) : nlohmann::json();
  if (!hf.contains("eos_token_id")) hf["eos_token_id"] = ids.eos ? nlohmann::json(*ids.eos) : nlohmann::json();
  io::write_file_atomic((out / "config.json").string(), hf.dump(2) + "\n");
  written.push_back((out / "config.json").string());

  // generation_config.json: the starting folder's, else the token ids.
  if (!from_hf.empty() && fs::exists(fs::path(from_hf) / "generation_config.json")) {
    copy_whole_file(fs::path(from_hf) / "generation_config.json", out / "generation_config.json");
  } else {
    nlohmann::json g = {{"_from_model_config", true}, {"bos_token_id", hf["bos_token_id"]}, {"eos_token_id", hf["eos_token_id"]}};
    if (ids.pad) g["pad_token_id"] = *ids.pad;
    io::write_file_atomic((out / "generation_config.json").string(), g.dump(2) + "\n");
  }
  written.push_back((out / "generation_config.json").string());

  // The tokenizer files beside the run's tokenizer.json.
  if (tokenizer.empty()) {
    std::fprintf(stderr, "export: warning: the run names no tokenizer (data.tokenizer), so %s has no tokenizer files\n",
                 out.string().c_str());
  } else {
    const fs::path dir = fs::path(tokenizer).parent_path();
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
                          "added_tokens.json", "chat_template.jinja"}) {
      if (!fs::exists(dir / f)) continue;
      copy_whole_file(dir / f, out / f);
      written.push_back((out / f).string());
    }
  }

  // The weights: a LoRA run's adapters merged into their base weights (W + alpha / rank * B A).
  std::set<std::string> adapters;
  for (const auto& t : ck.tensors()) {
    if (nn::is_lora_parameter(t.name)) adapters.insert(t.name);
  }
  const double lora_scale = cfg.lora.rank > 0 ? cfg.lora.alpha / static_cast<double>(cfg.lora.rank) : 0.0;
  std::vector<const ckpt::TensorRecord*> tensors;
  for (const auto& t : ck.tensors()) {
    if (!adapters.count(t.name)) tensors.push_back(&t);
  }
  auto full = [&ck](const ckpt::TensorRecord& t) {
    at::Tensor v = at::empty({t.numel}, at::kFloat);
    ck.read(t, "param", 0, t.numel, v);
    return v.view(t.shape);
  };
  auto value = [&](const ckpt::TensorRecord& t) {
    at::Tensor v = full(t);
    if (util::ends_with(t.name, ".weight")) {
      const std::string stem = t.name.substr(0, t.name.size() - 7);
      const ckpt::TensorRecord* a = ck.find(stem + ".lora_a");
      const ckpt::TensorRecord* b = ck.find(stem + ".lora_b");
      if (a != nullptr && b != nullptr) v = v + at::matmul(full(*b), full(*a)) * lora_scale;
    }
    return v;
  };
  std::vector<std::vector<io::TensorEntry>> groups;
  for (const auto* t : tensors) groups.push_back({{t->name, dtype, t->shape}});
  for (const std::string& f : io::write_sharded_safetensors(
           out.string(), "model", groups, [&](size_t g) { return std::vector<at::Tensor>{value(*tensors[g])}; },
           o.max_shard_bytes)) {
    written.push_back(f);
  }
  return written;
}

}  // namespace zeroshard::models::qwen3
