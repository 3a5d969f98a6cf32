#include "shard/bucket.h"

#include <stdexcept>
#include <string>

namespace zeroshard::shard {

BucketPlanner::Decision BucketPlanner::add(int64_t bytes) {
  Decision d;
  const bool small = bucket_bytes_ > 0 && bytes < bucket_bytes_;
  if (!small) {
    d.issue_before = true;
    open_bytes_ = 0;
  }
  open_bytes_ += bytes;
  if (!small || open_bytes_ >= bucket_bytes_) {
    d.issue_after = true;
    open_bytes_ = 0;
  }
  return d;
}

int64_t BucketLayout::add(int64_t shard_size) {
  const int64_t offset = shard_elems;
  offsets.push_back(offset);
  sizes.push_back(shard_size);
  shard_elems += shard_size;
  return offset;
}

at::Tensor pack_rank_by_rank(const BucketLayout& layout, std::vector<at::Tensor>& parts, int world,
                             at::ScalarType dtype) {
  if (parts.size() != layout.num_parts()) {
    throw std::invalid_argument("pack_rank_by_rank: " + std::to_string(parts.size()) + " gradients for a layout of " +
                                std::to_string(layout.num_parts()) + " parts");
  }
  at::Tensor input = at::empty({world * layout.shard_elems}, dtype);
  const at::Tensor grid = input.view({world, layout.shard_elems});
  for (size_t k = 0; k < parts.size(); ++k) {
    grid.narrow(1, layout.offsets[k], layout.sizes[k]).copy_(parts[k].view({world, layout.sizes[k]}));
    parts[k].reset();
  }
  return input;
}

}  // namespace zeroshard::shard
