#include "sample/sample.h"

#include "checkpoint/checkpoint.h"
#include "sample/checkpoint_model.h"
#include "util/text.h"
#include "data/text_dataset.h"
#include "models/llama/llama.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <stdexcept>

namespace zeroshard::sample {

train::TrainConfig model_config_of(const ckpt::Checkpoint& ck) {
  const nlohmann::json& cfg = ck.config();
  if (!cfg.contains("model") || !cfg["model"].is_object()) {
    throw std::runtime_error(ck.dir() + "/manifest.json: its config has no 'model' section");
  }
  std::vector<std::string> overrides;
  auto add = [&](const std::string& section, const std::string& key, const nlohmann::json& v) {
    // Lists were saved as their comma-joined text; numbers and booleans as JSON.
    overrides.push_back(section + "." + key + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
  };
  // model.*, a LoRA run's adapters (lora.*), the VAE (vae.*) and the flux pipeline (flux.*)
  // make the model; init_from / *_from name where the run's first weights came from, not the
  // model (the checkpoint holds them now).
  for (const char* section : {"model", "lora", "vae", "flux", "wan"}) {
    if (!cfg.contains(section) || !cfg[section].is_object()) continue;  // older checkpoints
    for (auto it = cfg[section].begin(); it != cfg[section].end(); ++it) {
      if (!util::ends_with(it.key(), "_from")) add(section, it.key(), it.value());
    }
  }
  // The run's data shapes, so the cross-field checks see the run's own values.
  if (cfg.contains("train") && cfg["train"].contains("seq_len")) add("train", "seq_len", cfg["train"]["seq_len"]);
  if (cfg.contains("data")) {
    for (const char* key : {"source", "frames", "image_size", "seed"}) {
      if (cfg["data"].contains(key)) add("data", key, cfg["data"][key]);
    }
  }
  return train::load_config("", overrides);
}

std::string output_path(const ckpt::Checkpoint& ck, const std::string& out, const std::string& name) {
  if (!out.empty()) return out;
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(ck.dir());
  return (dir.parent_path().filename() == "checkpoints" ? dir.parent_path().parent_path() : dir).string() + "/" + name;
}

std::string checkpoint_series(const std::string& checkpoint) {
  const ckpt::Checkpoint ck(ckpt::resolve_checkpoint(checkpoint));
  return model_config_of(ck).model_series;
}

std::string generate_text(const SampleOptions& o, const RendezvousInfo& rdv) {
  if (o.tokens < 1) throw std::invalid_argument("--tokens must be >= 1, got " + std::to_string(o.tokens));
  if (o.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (o.top_k < 0) throw std::invalid_argument("--top-k must be >= 0");
  if (o.prompt.empty()) throw std::invalid_argument("--prompt must not be empty (the model needs a first token)");
  ckpt::Checkpoint ck(ckpt::resolve_checkpoint(o.checkpoint));
  const train::TrainConfig cfg = model_config_of(ck);
  const auto prompt = data::ByteTokenizer::encode(o.prompt);
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.tokens;
  if (total > cfg.llama.max_seq_len) {
    throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + --tokens " +
                                std::to_string(o.tokens) + " = " + std::to_string(total) + " exceeds model.max_seq_len " +
                                std::to_string(cfg.llama.max_seq_len) + " of " + ck.dir());
  }

  auto comm = make_communicator(rdv);
  models::Llama model{nullptr};
  {
    nn::DeferredInit deferred;
    model = models::Llama(cfg.llama);
    if (cfg.lora_rank > 0) nn::apply_lora(*model, train::lora_options(cfg));
  }
  ShardOptions so;
  so.strategy = parse_strategy(o.strategy);
  so.param_source = ck.param_source();
  auto sharded = fully_shard(model.ptr(), comm, so);

  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  models::KVCache cache;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  at::Tensor logits = model->forward(torch::tensor(seq, torch::kLong).unsqueeze(0), o.kv_cache ? &cache : nullptr);
  for (int64_t i = 0; i < o.tokens; ++i) {
    at::Tensor next = at::zeros({1}, at::kLong);
    if (comm->rank() == 0) {
      at::Tensor last = logits[0][-1].to(at::kFloat);
      if (o.temperature == 0.0) {
        next.fill_(last.argmax().item<int64_t>());
      } else {
        at::Tensor scaled = last / o.temperature;
        if (o.top_k > 0 && o.top_k < scaled.numel()) {
          const double kth = std::get<0>(scaled.topk(o.top_k)).min().item<double>();
          scaled = scaled.masked_fill(scaled < kth, -std::numeric_limits<float>::infinity());
        }
        next.fill_(at::multinomial(torch::softmax(scaled, -1), 1, false, gen).item<int64_t>());
      }
    }
    comm->broadcast(next, 0);  // every rank continues with rank 0's token
    seq.push_back(next.item<int64_t>());
    if (i + 1 == o.tokens) break;
    logits = o.kv_cache ? model->forward(next.view({1, 1}), &cache)
                        : model->forward(torch::tensor(seq, torch::kLong).unsqueeze(0));
  }
  return data::ByteTokenizer::decode(seq);
}

}  // namespace zeroshard::sample
