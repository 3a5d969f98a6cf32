// Compiled with -ffp-contract=off -O3 (CMakeLists.txt), as the optimizer: the vector body
// and the scalar tail must round alike.
#include "util/sum_squares.h"

#include <ATen/Parallel.h>

#include <mutex>
#include <set>
#include <vector>

namespace zeroshard::util {

namespace {
constexpr int64_t kBlock = 1 << 14;
constexpr int kLanes = 8;  // independent accumulators: the loop vectorizes without reassociation

double block_sum(const float* x, int64_t n) {
  double acc[kLanes] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const double v = x[i + l];
      acc[l] += v * v;
    }
  }
  for (; i < n; ++i) {
    const double v = x[i];
    acc[0] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
}  // namespace

double sum_of_squares(const float* x, int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t begin = b * kBlock;
      partial[static_cast<size_t>(b)] = block_sum(x + begin, std::min(kBlock, n - begin));
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

int kernel_threads_reached() {
  std::mutex mu;
  std::set<int> seen;
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(at::get_thread_num());
  });
  return static_cast<int>(seen.size());
}

}  // namespace zeroshard::util
