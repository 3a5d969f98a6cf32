#include "train/task.h"

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

}  // namespace zeroshard::train
