// Live bytes of CPU tensors, counted at the allocator: every tensor libtorch allocates on the
// CPU (activations autograd keeps for backward, gathered units, gradients, temporaries) goes
// through c10's CPU allocator, which track_tensor_memory() wraps. What RSS cannot tell —
// how many bytes the step really holds at its peak, and what activation checkpointing saves —
// these counters do, independent of glibc keeping freed heap for reuse.
#pragma once

#include <cstdint>

namespace zeroshard::util {

// Installs the counting allocator (idempotent; tensors allocated before are not counted, and
// their frees are not either). Cost: two atomic updates per allocation.
void track_tensor_memory();
bool tensor_memory_tracked();

int64_t live_tensor_bytes();
// The highest live_tensor_bytes() since the last reset.
int64_t peak_tensor_bytes();
void reset_peak_tensor_bytes();

}  // namespace zeroshard::util
