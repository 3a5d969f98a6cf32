// All shard arithmetic lives here: padding, per-rank ranges, intersections.
// A flat buffer of `numel` elements is padded to `padded = ceil(numel / W) * W`; rank r owns
// the contiguous range [r * shard_size, (r + 1) * shard_size).
#pragma once

#include <cstdint>
#include <string>

namespace zeroshard::shard {

struct ShardLayout {
  int64_t numel = 0;
  int world_size = 1;
  int64_t shard_size = 0;
  int64_t padded = 0;

  ShardLayout() = default;
  ShardLayout(int64_t numel, int world_size);

  int64_t shard_begin(int rank) const { return rank * shard_size; }
  int64_t shard_end(int rank) const { return (rank + 1) * shard_size; }
  // Elements of [shard_begin, shard_end) that hold real data (not padding).
  int64_t valid_in_shard(int rank) const;
  // Intersection of [begin, end) with rank's shard, in global coordinates; empty -> lo >= hi.
  void intersect(int rank, int64_t begin, int64_t end, int64_t* lo, int64_t* hi) const;
  std::string describe() const;
};

}  // namespace zeroshard::shard
