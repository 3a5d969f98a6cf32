// nn::conv2d (added for the image VAEs): fp32 and float64 go straight to libtorch; bf16 via_fp32
// is the fp32 convolution of the bf16 operands rounded once, with gradients matching fp32 autograd.
#include "nn/matmul.h"
#include "support/tensor_compare.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

namespace {

struct KernelScope {
  explicit KernelScope(nn::Bf16Matmul mode) { nn::set_bf16_matmul(mode); }
  ~KernelScope() { nn::set_bf16_matmul(nn::Bf16Matmul::Auto); }
};

// libtorch's conv2d (the int-list overload; a braced list is ambiguous with the padding-string one).
torch::Tensor ref_conv(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, int64_t s, int64_t p) {
  const std::vector<int64_t> stride = {s, s}, padding = {p, p};
  return torch::conv2d(x, w, b, stride, padding);
}

}  // namespace

TEST(Conv2d, Fp32AndFp64AreLibtorchs) {
  torch::manual_seed(1);
  for (auto dt : {torch::kFloat, torch::kDouble}) {
    const auto x = torch::randn({2, 4, 9, 7}, dt), w = torch::randn({6, 4, 3, 3}, dt), b = torch::randn({6}, dt);
    EXPECT_TRUE(torch::equal(nn::conv2d(x, w, b, {2, 2}, {0, 0}), ref_conv(x, w, b, 2, 0)));
    EXPECT_TRUE(torch::equal(nn::conv2d(x, w, {}, {1, 1}, {1, 1}), ref_conv(x, w, {}, 1, 1)));
  }
}

TEST(Conv2d, Bf16ViaFp32ForwardAndGradients) {
  KernelScope scope(nn::Bf16Matmul::ViaFp32);
  torch::manual_seed(2);
  const auto x = torch::randn({2, 4, 9, 8}).to(torch::kBFloat16), w = torch::randn({6, 4, 3, 3}).to(torch::kBFloat16);
  const auto b = torch::randn({6}).to(torch::kBFloat16);
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(nn::conv2d(x, w, b, {2, 2}, {1, 1}),
                             ref_conv(x.to(torch::kFloat), w.to(torch::kFloat), b.to(torch::kFloat), 2, 1)
                                 .to(torch::kBFloat16)));
  }
  std::vector<torch::Tensor> ours = {x.clone().requires_grad_(true), w.clone().requires_grad_(true),
                                     b.clone().requires_grad_(true)};
  std::vector<torch::Tensor> ref = {x.to(torch::kFloat).requires_grad_(true), w.to(torch::kFloat).requires_grad_(true),
                                    b.to(torch::kFloat).requires_grad_(true)};
  const auto y = nn::conv2d(ours[0], ours[1], ours[2], {2, 2}, {1, 1});
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  const auto upstream = torch::randn(y.sizes());
  (y.to(torch::kFloat) * upstream).sum().backward();
  (ref_conv(ref[0], ref[1], ref[2], 2, 1) * upstream).sum().backward();
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(ours[i].grad().defined()) << i;
    EXPECT_EQ(ours[i].grad().scalar_type(), torch::kBFloat16) << i;
    EXPECT_LT(rel_diff(ours[i].grad(), ref[i].grad()), 2e-2) << i;
  }
}
