#include "util/sum_squares.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>

using namespace zeroshard;

// The engine's kernels run on the intra-op pool: at::parallel_for is a header template that runs
// the whole range on the calling thread in a file built without OpenMP (until 2026-12-07 every
// one of them did, and the 2-thread bits below compared one thread with itself).
TEST(SumOfSquares, TheKernelsRunOnEveryIntraOpThread) {
  const int threads = torch::get_num_threads();
  torch::set_num_threads(2);
  EXPECT_EQ(util::kernel_threads_reached(), 2);
  torch::set_num_threads(3);
  EXPECT_EQ(util::kernel_threads_reached(), 3);
  torch::set_num_threads(threads);
}

// The norm's sum of squares: the same bits with 1 or 2 threads, close to a plain double sum.
TEST(SumOfSquares, ThreadCountDoesNotChangeBits) {
  torch::manual_seed(11);
  const int64_t n = 100003;  // several blocks and a ragged tail
  auto x = torch::randn({n});
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  const double one = util::sum_of_squares(x.data_ptr<float>(), n);
  torch::set_num_threads(2);
  const double two = util::sum_of_squares(x.data_ptr<float>(), n);
  torch::set_num_threads(threads);
  EXPECT_EQ(std::memcmp(&one, &two, sizeof(double)), 0);
  const double ref = x.to(torch::kDouble).pow(2).sum().item<double>();
  EXPECT_NEAR(one, ref, 1e-12 * ref);
}

