// Every libtorch internal the engine relies on, behind one header. docs/porting.md lists each
// with the test that pins the behaviour we rely on (tests/shard/test_torch_internals.cpp): a
// libtorch upgrade that changes one fails there first, and the port touches this header and
// torch_internals.cpp only. Nothing else under src/shard includes c10 internals or builds
// autograd nodes.
#pragma once

#include "util/torch_version.h"

#include <ATen/ATen.h>

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

namespace zeroshard::shard {

// --- Storage bytes (FSDP's "resize the storage to 0 and back") -----------------------------
// A freed flat buffer keeps its StorageImpl: every tensor viewing it (module parameters made
// views by set_data, the views autograd saved for backward) stays valid and sees the new bytes
// once they are allocated again — without a version-counter bump, so autograd's saved-variable
// check does not fire when a gather refills them.

// Drops the bytes of t's storage (nbytes becomes 0, the data pointer null).
void release_storage_bytes(const at::Tensor& t);
// Gives t's storage nbytes fresh bytes from the current CPU allocator (so the allocator-level
// memory counters see them); contents undefined.
void allocate_storage_bytes(const at::Tensor& t, size_t nbytes);

// The bytes release_storage_bytes would drop, kept by size for the next allocation of the same
// size (what FSDP's and CUDA's caching allocators do for gathered parameters). Why: the process
// takes every block from a glibc heap that is never trimmed (src/cli/main.cpp), and a unit's
// freed buffer (hundreds of MB at real size) is a hole the step's small tensors move into, so the
// next unit's buffer no longer fits there and the heap grows: a Qwen3-4B LoRA under ZeRO-3 at
// W = 2 grew by ~5 GB per rank within its second step and was killed at 24 GiB. Pooled, a size
// holds at most as many blocks as were ever live at once (the engine never pools the bytes it
// allocates only to lay out a buffer's views: FlatParam::drop_layout_bytes). The last block
// freed of a size is the next one handed out, so the pages in use stay the ones already
// resident. Blocks under min_bytes go back to malloc, whose bins serve them well. Thread-safe.
class StorageBytesPool {
 public:
  explicit StorageBytesPool(size_t min_bytes) : min_bytes_(min_bytes) {}
  StorageBytesPool(const StorageBytesPool&) = delete;
  StorageBytesPool& operator=(const StorageBytesPool&) = delete;
  // As allocate_storage_bytes / release_storage_bytes, through the pool.
  void allocate(const at::Tensor& t, size_t nbytes);
  void release(const at::Tensor& t);
  size_t pooled_bytes() const;  // bytes held for reuse now

 private:
  size_t min_bytes_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<c10::DataPtr>> free_;  // by size, the last freed at the back
  size_t pooled_bytes_ = 0;
};

// --- Autograd glue --------------------------------------------------------------------------

// Routes the inputs that require grad through an identity node whose backward calls
// *callback once the unit's parameter gradients are accumulated (post-backward). The
// callback must outlive the autograd graph. Returns false when no input requires grad.
// Relies on the CPU engine running a node's ready AccumulateGrad nodes (and the nodes created
// after this one) before it.
bool attach_post_backward(std::vector<at::Tensor>& inputs, std::function<void()>* callback);

// Registers callback on every output that requires grad: it runs when that output's
// gradient is ready, before the unit's backward (pre-backward) — also when that gradient
// never arrives (an output that did not reach the loss, while a sibling output did).
// Returns false if no output requires grad.
bool attach_pre_backward(const std::vector<at::Tensor>& outputs, const std::function<void()>& callback);

}  // namespace zeroshard::shard
