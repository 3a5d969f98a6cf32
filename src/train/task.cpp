#include "train/task.h"

#include "io/torch_pth.h"
#include "nn/layers.h"

#include <fstream>

namespace zeroshard::train {

double GeneratedSampleTask::items_per_step() const {
  return static_cast<double>(cfg_.train.micro_batch_size * cfg_.train.grad_accum * world_);
}

int64_t GeneratedSampleTask::first_index(int64_t step, int64_t micro) const {
  return (step * cfg_.train.grad_accum + micro) * cfg_.train.micro_batch_size * world_ +
         rank_ * cfg_.train.micro_batch_size;
}

void GeneratedSampleTask::dump_batches(const std::string& path, int64_t steps) const {
  std::ofstream out(path, std::ios::binary);
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t m = 0; m < cfg_.train.grad_accum; ++m) {
      const at::Tensor b = samples(first_index(s, m));
      out.write(static_cast<const char*>(b.data_ptr()), static_cast<std::streamsize>(b.nbytes()));
    }
  }
}

std::shared_ptr<ParamSource> initial_param_source(const TrainConfig& cfg, const Task& task) {
  const Task* t = &task;
  auto seeded = param_source_from_init([t](const std::string& name, at::Tensor& v) { t->init_parameter(name, v); });
  if (cfg.init_from.empty()) return task.initial_source(seeded);
  // A LoRA run starts from a base model's file; its fresh adapters come from the seeded init.
  std::shared_ptr<ParamSource> base = io::checkpoint_param_source(cfg.init_from);
  return cfg.lora.rank > 0 ? combine_param_sources(base, seeded, nn::is_lora_parameter) : base;
}

}  // namespace zeroshard::train
