// Distributed sampler over fixed-length windows of a token stream. The windows of optimizer
// step s are a function of (seed, s) only: the global batch is the same for every world
// size, and each rank takes its slice, so runs at W = 1, 2, 4 see the same data.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace zeroshard::data {

struct SamplerOptions {
  int64_t seq_len = 128;
  int64_t micro_batch_size = 4;
  int64_t grad_accum = 1;
  uint64_t seed = 1234;
};

class DistributedWindowSampler {
 public:
  DistributedWindowSampler(std::vector<uint8_t> corpus, SamplerOptions options, int rank, int world_size);

  // Tokens [micro_batch_size, seq_len + 1] (int64) for optimizer step `step` (0-based),
  // micro-batch `micro` of this rank. Inputs are [:, :-1], targets [:, 1:].
  at::Tensor batch(int64_t step, int64_t micro) const;
  int64_t global_batch_size() const;
  int64_t num_windows() const { return num_windows_; }

 private:
  std::vector<uint8_t> corpus_;
  SamplerOptions options_;
  int rank_, world_;
  int64_t num_windows_;
};

}  // namespace zeroshard::data
