#include "train/task.h"

#include "io/safetensors.h"
#include "util/text.h"

#include <fstream>

namespace zeroshard::train {

std::unique_ptr<Task> make_task(const TrainConfig& cfg, int rank, int world) {
  if (cfg.model_series == "vae") return make_video_vae_task(cfg, rank, world);
  if (cfg.model_series == "flux") return make_flux_task(cfg, rank, world);
  if (cfg.model_series == "wan") return make_wan_task(cfg, rank, world);
  return make_language_model_task(cfg, rank, world);
}

std::shared_ptr<ParamSource> with_tower_files(std::shared_ptr<ParamSource> seeded, const std::string& vae_from,
                                              const std::string& text_encoder_from) {
  std::shared_ptr<ParamSource> source = std::move(seeded);
  auto from_file = [&](const std::string& path, const std::string& prefix) {
    if (path.empty()) return;
    source = combine_param_sources(source, prefixed_param_source(io::safetensors_param_source(path), prefix),
                                   [prefix](const std::string& n) { return util::starts_with(n, prefix); });
  };
  from_file(vae_from, "vae.");
  from_file(text_encoder_from, "text_encoder.");
  return source;
}

double GeneratedSampleTask::items_per_step() const {
  return static_cast<double>(cfg_.micro_batch_size * cfg_.grad_accum * world_);
}

int64_t GeneratedSampleTask::first_index(int64_t step, int64_t micro) const {
  return (step * cfg_.grad_accum + micro) * cfg_.micro_batch_size * world_ + rank_ * cfg_.micro_batch_size;
}

void GeneratedSampleTask::dump_batches(const std::string& path, int64_t steps) const {
  std::ofstream out(path, std::ios::binary);
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t m = 0; m < cfg_.grad_accum; ++m) {
      const at::Tensor b = samples(first_index(s, m));
      out.write(static_cast<const char*>(b.data_ptr()), static_cast<std::streamsize>(b.nbytes()));
    }
  }
}

nlohmann::json towers_time_metrics(Communicator& comm, double* seconds) {
  at::Tensor t = at::full({1}, *seconds, at::kDouble);
  comm.all_reduce(t);
  *seconds = 0.0;
  return {{"towers_s", t.item<double>() / comm.world_size()}};
}

}  // namespace zeroshard::train
