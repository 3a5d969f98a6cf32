#include "shard/layout.h"

#include <algorithm>
#include <stdexcept>

namespace zeroshard::shard {

ShardLayout::ShardLayout(int64_t numel_, int world_size_) : numel(numel_), world_size(world_size_) {
  if (numel_ < 0) throw std::invalid_argument("ShardLayout: negative numel " + std::to_string(numel_));
  if (world_size_ < 1) throw std::invalid_argument("ShardLayout: world size must be >= 1, got " + std::to_string(world_size_));
  shard_size = (numel + world_size - 1) / world_size;
  padded = shard_size * world_size;
}

int64_t ShardLayout::valid_in_shard(int rank) const {
  return std::max<int64_t>(0, std::min(shard_end(rank), numel) - shard_begin(rank));
}

void ShardLayout::intersect(int rank, int64_t begin, int64_t end, int64_t* lo, int64_t* hi) const {
  *lo = std::max(begin, shard_begin(rank));
  *hi = std::min(end, shard_end(rank));
}

std::string ShardLayout::describe() const {
  return "numel=" + std::to_string(numel) + " padded=" + std::to_string(padded) + " shard=" +
         std::to_string(shard_size) + " x " + std::to_string(world_size);
}

}  // namespace zeroshard::shard
