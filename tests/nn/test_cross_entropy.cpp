// nn::cross_entropy_sum / _mean (src/nn/cross_entropy.h) against torch's cross_entropy on the
// upcast logits: losses and gradients in fp64 (to rounding), fp32 and bf16 (the fp32 floor, one
// bf16 rounding of the gradient), ignored rows, several chunks of rows, and what forward keeps
// for backward (counted at the allocator: no fp32 copy of the logits).
#include "nn/cross_entropy.h"
#include "support/tensor_compare.h"
#include "util/tensor_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

namespace {

struct Result {
  torch::Tensor loss, grad;
};

// torch's formulation: cross_entropy(logits.to(acc), targets, ignore_index=-100), sum or mean.
Result torch_reference(const torch::Tensor& logits, const torch::Tensor& targets, bool mean) {
  auto x = logits.detach().clone().requires_grad_(true);
  const auto acc = logits.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  auto loss = at::cross_entropy_loss(x.to(acc), targets, {}, mean ? at::Reduction::Mean : at::Reduction::Sum, -100,
                                     0.0);
  (loss * 0.75).backward();
  return {loss.detach(), x.grad()};
}

Result ours(const torch::Tensor& logits, const torch::Tensor& targets, bool mean) {
  auto x = logits.detach().clone().requires_grad_(true);
  auto loss = mean ? nn::cross_entropy_mean(x, targets) : nn::cross_entropy_sum(x, targets);
  (loss * 0.75).backward();
  return {loss.detach(), x.grad()};
}

torch::Tensor targets_with_ignored(int64_t n, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  auto t = torch::randint(vocab, {n}, torch::kLong);
  t[1] = -100;
  t[n - 1] = -100;
  t[n / 2] = vocab - 1;
  t[0] = 0;
  return t;
}

}  // namespace

TEST(CrossEntropy, EqualsTorchInEveryDtypeWithIgnoredRowsAndSeveralChunks) {
  // V = 2^19: chunks of 2 rows, so 7 rows take four chunks; V = 37: one chunk.
  for (const int64_t V : {int64_t{37}, int64_t{1} << 19}) {
    const int64_t N = 7;
    torch::manual_seed(V);
    const auto base = torch::randn({N, V}, torch::kDouble) * 4.0;
    const auto t = targets_with_ignored(N, V, 11);
    for (const bool mean : {false, true}) {
      SCOPED_TRACE("V=" + std::to_string(V) + (mean ? " mean" : " sum"));
      {  // fp64: the same arithmetic up to the order of the sums
        const Result a = ours(base, t, mean), b = torch_reference(base, t, mean);
        EXPECT_EQ(a.loss.scalar_type(), torch::kDouble);
        EXPECT_NEAR(a.loss.item<double>(), b.loss.item<double>(), 1e-12 * std::abs(b.loss.item<double>()));
        EXPECT_LT(rel_diff(a.grad, b.grad), 1e-12);
        EXPECT_EQ(a.grad[1].abs().max().item<double>(), 0.0);  // an ignored row has no gradient
      }
      // fp32: near the exact value (fp64 from the same fp32 inputs). Measured: V = 37 loss 1e-7
      // (torch 2e-8), V = 2^19 loss 1e-8 (torch 4e-6: its serial sum over the row), gradient 5e-7
      // (torch 5e-5).
      {
        const auto x = base.to(torch::kFloat);
        const Result a = ours(x, t, mean), b = torch_reference(x, t, mean);
        const Result exact = torch_reference(x.to(torch::kDouble), t, mean);
        EXPECT_EQ(a.loss.scalar_type(), torch::kFloat);
        EXPECT_LT(rel_diff(a.loss, exact.loss), 1e-6);
        EXPECT_LT(rel_diff(a.grad, exact.grad), 1e-5);
      }
      {  // bf16: loss in fp32 from the bf16 values, the gradient rounded once to bf16
        const auto x = base.to(torch::kBFloat16);
        const Result a = ours(x, t, mean), b = torch_reference(x, t, mean);
        EXPECT_EQ(a.loss.scalar_type(), torch::kFloat);
        EXPECT_EQ(a.grad.scalar_type(), torch::kBFloat16);
        const Result exact = torch_reference(x.to(torch::kDouble), t, mean);  // from the same bf16 values
        EXPECT_LT(rel_diff(a.loss, exact.loss), 1e-6);
        EXPECT_LT(rel_diff(a.grad, exact.grad), 1.0 / 256);  // one bf16 rounding
        EXPECT_LT(rel_diff(b.grad, exact.grad), 1.0 / 256);
      }
    }
  }
}

TEST(CrossEntropy, LeavesTheLogitsAsTheyWere) {
  // The caller's logits (kept by the model's output, compared by reference-check after backward)
  // are unchanged by forward and backward, also when they are already in the accumulation dtype.
  for (const auto dtype : {torch::kDouble, torch::kFloat, torch::kBFloat16}) {
    auto x = (torch::randn({5, 11}) * 3).to(dtype).requires_grad_(true);
    const auto before = x.detach().clone();
    nn::cross_entropy_sum(x, torch::randint(11, {5}, torch::kLong)).backward();
    EXPECT_TRUE(torch::equal(x.detach(), before)) << dtype;
  }
}

TEST(CrossEntropy, EveryRowIgnoredGivesZeroSumAndTorchsNanMean) {
  const auto x = torch::randn({3, 5});
  const auto t = torch::full({3}, -100, torch::kLong);
  EXPECT_EQ(nn::cross_entropy_sum(x, t).item<double>(), 0.0);
  EXPECT_TRUE(std::isnan(nn::cross_entropy_mean(x, t).item<double>()));
}

TEST(CrossEntropy, BadTargetNamesRowAndValue) {
  const auto x = torch::randn({4, 6});
  const auto t = torch::tensor({1, 2, 6, 0}, torch::kLong);
  try {
    nn::cross_entropy_sum(x, t);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("target 6 of row 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[0, 6)"), std::string::npos) << msg;
  }
}

TEST(CrossEntropy, ForwardKeepsNoFp32CopyOfTheLogits) {
  util::track_tensor_memory();
  const int64_t N = 64, V = 32768;  // bf16 logits 4 MiB; torch's fp32 log-probabilities would be 8 MiB
  auto x = torch::randn({N, V}).to(torch::kBFloat16).requires_grad_(true);
  const auto t = torch::randint(V, {N}, torch::kLong);
  const int64_t before = util::live_tensor_bytes();
  auto loss = nn::cross_entropy_sum(x, t);
  const int64_t kept = util::live_tensor_bytes() - before;  // what the graph holds for backward
  EXPECT_LT(kept, 64 * 1024) << kept;  // log-sum-exp per row, targets, mask: well under a row of the table
  loss.backward();
  EXPECT_EQ(x.grad().scalar_type(), torch::kBFloat16);

  // The same measure on torch's formulation keeps its fp32 log-probabilities (the test measures what it claims).
  auto y = x.detach().clone().requires_grad_(true);
  const int64_t before_torch = util::live_tensor_bytes();
  auto torch_loss = at::cross_entropy_loss(y.to(torch::kFloat), t, {}, at::Reduction::Sum, -100, 0.0);
  EXPECT_GE(util::live_tensor_bytes() - before_torch, N * V * 4);
}
