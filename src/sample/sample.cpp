#include "sample/sample.h"

#include "checkpoint/checkpoint.h"
#include "models/series.h"
#include "train/config.h"

#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <stdexcept>

namespace zeroshard::sample {

void check_token_options(const SampleOptions& o) {
  if (o.tokens < 1) throw std::invalid_argument("--tokens must be >= 1, got " + std::to_string(o.tokens));
  if (o.temperature < 0) throw std::invalid_argument("--temperature must be >= 0");
  if (o.top_k < 0) throw std::invalid_argument("--top-k must be >= 0");
}

int64_t draw_next_token(const at::Tensor& logits, const SampleOptions& o, at::Generator& gen, Communicator& comm) {
  at::Tensor next = at::zeros({1}, at::kLong);
  if (comm.rank() == 0) {
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
  comm.broadcast(next, 0);  // every rank continues with rank 0's token
  return next.item<int64_t>();
}

train::TrainConfig model_config_of(const ckpt::Checkpoint& ck) {
  const nlohmann::json& cfg = ck.config();
  if (!cfg.contains("model") || !cfg["model"].is_object()) {
    throw std::runtime_error(ck.dir() + "/manifest.json: its config has no 'model' section");
  }
  return train::load_config("", train::model_overrides(cfg));
}

ShardOptions sampling_shard_options(const train::TrainConfig& cfg, const SampleOptions& o, ckpt::Checkpoint& ck) {
  ShardOptions so = train::shard_options(cfg);
  so.strategy = parse_strategy(o.strategy);
  so.param_source = ck.param_source();
  return so;
}

std::string output_path(const ckpt::Checkpoint& ck, const std::string& out, const std::string& name) {
  if (!out.empty()) return out;
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(ck.dir());
  return (dir.parent_path().filename() == "checkpoints" ? dir.parent_path().parent_path() : dir).string() + "/" + name;
}

std::string run_sample(const SampleOptions& o, const RendezvousInfo& rdv) {
  ckpt::Checkpoint ck(ckpt::resolve_checkpoint(o.checkpoint));
  const train::TrainConfig cfg = model_config_of(ck);
  const models::Series& series = models::find_series(cfg.series);
  if (!series.sample) throw std::invalid_argument(ck.dir() + ": series " + cfg.series + " has no sampling");
  return series.sample(o, ck, cfg, rdv);
}

}  // namespace zeroshard::sample
