// Gradient buckets: which units' gradients share one reduce-scatter, and how they are laid out
// in it. Pure logic (no communicator), unit-tested in-process.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace zeroshard::shard {

// Decides, as units finish their backward one after another, where bucket boundaries fall.
// A gradient of at least bucket_bytes is reduced alone: the open bucket is issued before it
// (so collectives go out in the order units finished), and it right after. Smaller ones join
// the open bucket, which is issued once it holds bucket_bytes or more. bucket_bytes = 0:
// every gradient alone.
class BucketPlanner {
 public:
  explicit BucketPlanner(int64_t bucket_bytes) : bucket_bytes_(bucket_bytes) {}

  struct Decision {
    bool issue_before = false;  // issue the open bucket (if any) before adding this gradient
    bool issue_after = false;   // issue the bucket holding it right after adding it
  };
  // A gradient of `bytes` (unreduced, in the reduce dtype) is ready.
  Decision add(int64_t bytes);
  // The open bucket was issued for another reason (the end of a micro-batch).
  void close() { open_bytes_ = 0; }
  int64_t open_bytes() const { return open_bytes_; }

 private:
  int64_t bucket_bytes_;
  int64_t open_bytes_ = 0;
};

// One reduce-scatter's layout over W ranks. Each part (a unit's padded gradient of
// W * size elements, rank r's shard being chunk r) gets `offset` within every rank's region
// of shard_elems elements: region r holds chunk r of every part, in order. The
// reduce-scatter then hands each rank its shard of each part at reduced[offset, offset + size),
// and every element is summed around the ring exactly as in its part's own collective —
// bucketed and unbucketed reductions give the same bits.
struct BucketLayout {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;  // each part's shard size
  int64_t shard_elems = 0;     // S: the parts' shard sizes summed

  // Appends a part with this shard size; returns its offset.
  int64_t add(int64_t shard_size);
  size_t num_parts() const { return sizes.size(); }
};

// Lays the parts out rank by rank into one [world * layout.shard_elems] tensor of `dtype`.
// parts[k] is contiguous with world * layout.sizes[k] elements; each is reset (its memory
// released) as soon as it is copied.
at::Tensor pack_rank_by_rank(const BucketLayout& layout, std::vector<at::Tensor>& parts, int world,
                             at::ScalarType dtype);

}  // namespace zeroshard::shard
