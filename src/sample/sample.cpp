#include "sample/sample.h"

#include "checkpoint/checkpoint.h"
#include "models/series.h"
#include "train/config.h"

#include <filesystem>
#include <stdexcept>

namespace zeroshard::sample {

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
