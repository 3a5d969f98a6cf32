// The allocator hook behind the per-step activation and peak figures.
#include "util/tensor_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace zeroshard;

TEST(TensorMemory, CountsLiveBytesAndThePeak) {
  util::track_tensor_memory();
  ASSERT_TRUE(util::tensor_memory_tracked());
  util::reset_peak_tensor_bytes();
  const int64_t base = util::live_tensor_bytes();
  {
    auto a = torch::empty({1000}, torch::kFloat);
    EXPECT_EQ(util::live_tensor_bytes() - base, 4000);
    { auto b = torch::empty({500}, torch::kDouble); }
    EXPECT_EQ(util::live_tensor_bytes() - base, 4000);
    EXPECT_EQ(util::peak_tensor_bytes() - base, 8000);
  }
  EXPECT_EQ(util::live_tensor_bytes(), base);
}
