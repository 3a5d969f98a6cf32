#include "train/task.h"

#include <fstream>

namespace zeroshard::train {

std::unique_ptr<Task> make_task(const TrainConfig& cfg, int rank, int world) {
  if (cfg.model_series == "vae") return make_video_vae_task(cfg, rank, world);
  if (cfg.model_series == "flux") return make_flux_task(cfg, rank, world);
  return make_language_model_task(cfg, rank, world);
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

}  // namespace zeroshard::train
