#include "data/sampler.h"

#include "util/hash.h"

#include <stdexcept>
#include <string>

namespace zeroshard::data {

using util::splitmix64;

DistributedWindowSampler::DistributedWindowSampler(std::vector<uint8_t> corpus, SamplerOptions options, int rank,
                                                   int world_size)
    : corpus_(std::move(corpus)), options_(options), rank_(rank), world_(world_size) {
  num_windows_ = static_cast<int64_t>(corpus_.size()) - (options_.seq_len + 1) + 1;
  if (num_windows_ < 1) {
    throw std::runtime_error("the corpus has " + std::to_string(corpus_.size()) +
                             " tokens, fewer than one window of train.seq_len + 1 = " +
                             std::to_string(options_.seq_len + 1));
  }
}

int64_t DistributedWindowSampler::global_batch_size() const {
  return options_.micro_batch_size * options_.grad_accum * world_;
}

at::Tensor DistributedWindowSampler::batch(int64_t step, int64_t micro) const {
  const int64_t B = options_.micro_batch_size, L = options_.seq_len + 1;
  at::Tensor out = at::empty({B, L}, at::kLong);
  int64_t* o = out.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    // Global sample index within the step: micro-batches outermost, then ranks, then rows.
    const int64_t j = (micro * world_ + rank_) * B + b;
    const uint64_t key = splitmix64(options_.seed ^ splitmix64(static_cast<uint64_t>(step) * 1000003ULL + j));
    const int64_t start = static_cast<int64_t>(key % static_cast<uint64_t>(num_windows_));
    for (int64_t t = 0; t < L; ++t) o[b * L + t] = corpus_[start + t];
  }
  return out;
}

}  // namespace zeroshard::data
