// The sum of squares behind global-norm clipping, multithreaded and deterministic: the
// elements are cut into fixed blocks (by position, not by thread), each block summed in
// double in a fixed order, the blocks in order. The result depends only on the values and
// where the array starts — not on the number of threads — so every strategy, which sums the
// same shards, gets the same bits.
#pragma once

#include <cstdint>

namespace zeroshard::util {

double sum_of_squares(const float* x, int64_t n);

// How many intra-op threads one at::parallel_for in this file runs on: at::get_num_threads() when
// it is compiled with OpenMP, 1 when a build left that out and the loop runs on the calling
// thread. The engine's other kernels (AdamW, RMSNorm, the fused activations) get the same flag
// beside it in CMakeLists.txt.
int kernel_threads_reached();

}  // namespace zeroshard::util
