// nn::rms_norm (src/nn/rms_norm.h) against the libtorch composition it replaces — transformers'
// formula — in fp64 (to rounding) and against the fp64 truth in fp32 and bf16; rows that are not
// a multiple of the lane or block counts; non-contiguous inputs; frozen weights and inputs; the
// same bits under 1 and 2 intra-op threads; what forward keeps (counted at the allocator).
#include "nn/rms_norm.h"
#include "support/tensor_compare.h"
#include "util/tensor_memory.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <string>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

namespace {

struct Result {
  torch::Tensor y, dx, dw;
};

template <typename F>
Result run(const F& norm, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& dy) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(true);
  auto y = norm(x, w);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

// Shapes: D below, at and above the 16 lanes (not a multiple of them), rows across several
// 64-row blocks of the weight's gradient, 4-d heads as the QK norms see them.
const std::vector<std::vector<int64_t>> kShapes = {{3, 5}, {7, 16}, {130, 37}, {2, 7, 3, 64}, {1, 200, 128}};

struct Case {
  torch::Tensor x, w, dy;
};

Case make_case(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t D = shape.back();
  Case c;
  c.x = torch::randn(shape, torch::kDouble) * 2.0 + 0.3;
  c.w = torch::randn({D}, torch::kDouble) * 0.5 + 1.0;
  c.dy = torch::randn(shape, torch::kDouble);
  return c;
}

}  // namespace

TEST(RmsNorm, EqualsTheCompositionInFp64) {
  for (const auto& shape : kShapes) {
    const Case c = make_case(shape, 3);
    const double eps = 1e-6;
    const Result ours = run([&](auto& x, auto& w) { return nn::rms_norm(x, w, eps); }, c.x, c.w, c.dy);
    const Result ref = run([&](auto& x, auto& w) { return nn::rms_norm_composed(x, w, eps); }, c.x, c.w, c.dy);
    EXPECT_EQ(ours.y.sizes(), ref.y.sizes());
    EXPECT_LT(rel_diff(ours.y, ref.y), 1e-14) << c10::str(shape);
    EXPECT_LT(rel_diff(ours.dx, ref.dx), 1e-13) << c10::str(shape);
    EXPECT_LT(rel_diff(ours.dw, ref.dw), 1e-13) << c10::str(shape);
  }
}

TEST(RmsNorm, Fp32AndBf16StayWithinTheirFloorsOfTheFp64Truth) {
  // Tolerances: fp32, a few units of its 2^-24 rounding; bf16, the output and dx are rounded
  // once to bf16 (2^-9 relative) after fp32 arithmetic, so 2 bf16 units of the largest value.
  for (const auto& shape : kShapes) {
    const Case c = make_case(shape, 5);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const double tol = dtype == torch::kFloat ? 1e-6 : 2.0 * std::ldexp(1.0, -8);
      // The truth: the fp64 formula on the same (rounded) inputs.
      const auto x = c.x.to(dtype), w = c.w.to(dtype), dy = c.dy.to(dtype);
      const Result truth = run([&](auto& a, auto& b) { return nn::rms_norm_composed(a, b, 1e-5); },
                               x.to(torch::kDouble), w.to(torch::kDouble), dy.to(torch::kDouble));
      const Result ours = run([&](auto& a, auto& b) { return nn::rms_norm(a, b, 1e-5); }, x, w, dy);
      EXPECT_EQ(ours.y.scalar_type(), dtype);
      EXPECT_EQ(ours.dx.scalar_type(), dtype);
      EXPECT_EQ(ours.dw.scalar_type(), dtype);
      EXPECT_LT(rel_diff(ours.y, truth.y), tol) << c10::str(shape) << " " << dtype;
      EXPECT_LT(rel_diff(ours.dx, truth.dx), tol) << c10::str(shape) << " " << dtype;
      EXPECT_LT(rel_diff(ours.dw, truth.dw), tol) << c10::str(shape) << " " << dtype;
    }
  }
}

TEST(RmsNorm, Bf16ForwardRoundsTheNormalizedValueBeforeTheWeightAsTransformersDoes) {
  // With the rounding of x * rsqrt(...) to bf16 before the product (transformers' order), the
  // forward equals the composition's bits: both are the same fp32 values rounded twice.
  const Case c = make_case({64, 96}, 9);
  const auto x = c.x.to(torch::kBFloat16), w = c.w.to(torch::kBFloat16);
  const auto ours = nn::rms_norm(x, w, 1e-6);
  const auto ref = nn::rms_norm_composed(x, w, 1e-6);
  // The sums of squares differ in order only, so a rare value lands on the other side of a bf16
  // rounding boundary: then the two roundings move it by one or two units in the last place; for
  // almost every element, by none.
  const auto diff = (ours.to(torch::kFloat) - ref.to(torch::kFloat)).abs();
  const auto ulp = ref.to(torch::kFloat).abs() * std::ldexp(1.0, -6) + 1e-30;
  EXPECT_TRUE((diff <= ulp).all().item<bool>());
  EXPECT_GT((diff == 0).to(torch::kFloat).mean().item<double>(), 0.99);
}

TEST(RmsNorm, NonContiguousInputFrozenWeightAndInputWithoutGradient) {
  const Case c = make_case({6, 5, 40}, 13);
  const auto xt = c.x.transpose(0, 1);  // [5, 6, 40], not contiguous
  const auto dy = c.dy.transpose(0, 1);
  const Result a = run([](auto& x, auto& w) { return nn::rms_norm(x, w, 1e-6); }, xt, c.w, dy);
  const Result b = run([](auto& x, auto& w) { return nn::rms_norm(x, w, 1e-6); }, xt.contiguous(), c.w, dy.contiguous());
  EXPECT_TRUE(torch::equal(a.y, b.y));
  EXPECT_TRUE(torch::equal(a.dx, b.dx));
  EXPECT_TRUE(torch::equal(a.dw, b.dw));

  const Result full = run([](auto& x, auto& w) { return nn::rms_norm(x, w, 1e-6); }, c.x, c.w, c.dy);
  auto x = c.x.clone().requires_grad_(true);
  nn::rms_norm(x, c.w, 1e-6).backward(c.dy);  // frozen weight (a LoRA base norm)
  EXPECT_TRUE(torch::equal(x.grad(), full.dx));
  auto w = c.w.clone().requires_grad_(true);
  nn::rms_norm(c.x, w, 1e-6).backward(c.dy);  // input without gradient (a frozen embedding's output)
  EXPECT_TRUE(torch::equal(w.grad(), full.dw));
}

TEST(RmsNorm, SameBitsUnderOneAndTwoIntraOpThreads) {
  const int threads_before = at::get_num_threads();
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const Case c = make_case({300, 128}, 17);  // five blocks of the weight's gradient
    const auto x = c.x.to(dtype), w = c.w.to(dtype), dy = c.dy.to(dtype);
    at::set_num_threads(1);
    const Result one = run([](auto& a, auto& b) { return nn::rms_norm(a, b, 1e-6); }, x, w, dy);
    at::set_num_threads(2);
    const Result two = run([](auto& a, auto& b) { return nn::rms_norm(a, b, 1e-6); }, x, w, dy);
    EXPECT_TRUE(torch::equal(one.y, two.y)) << dtype;
    EXPECT_TRUE(torch::equal(one.dx, two.dx)) << dtype;
    EXPECT_TRUE(torch::equal(one.dw, two.dw)) << dtype;
  }
  at::set_num_threads(threads_before);
}

TEST(RmsNorm, ForwardKeepsTheInputAndOneFloatPerRow) {
  util::track_tensor_memory();
  const int64_t rows = 512, D = 1024;  // bf16 input 1 MiB; the composition keeps an fp32 copy (2 MiB) and more
  auto x = torch::randn({rows, D}).to(torch::kBFloat16).requires_grad_(true);
  auto w = torch::ones({D}, torch::kBFloat16).requires_grad_(true);
  const int64_t before = util::live_tensor_bytes();
  auto y = nn::rms_norm(x, w, 1e-6);
  const int64_t kept = util::live_tensor_bytes() - before - static_cast<int64_t>(y.nbytes());
  EXPECT_EQ(kept, rows * static_cast<int64_t>(sizeof(float))) << kept;  // x is the caller's; rsqrt per row
  y.sum().backward();

  // The composition, measured the same way, keeps at least the fp32 copy (the measure can fail).
  const int64_t before_c = util::live_tensor_bytes();
  auto yc = nn::rms_norm_composed(x, w, 1e-6);
  const int64_t kept_c = util::live_tensor_bytes() - before_c - static_cast<int64_t>(yc.nbytes());
  EXPECT_GE(kept_c, rows * D * static_cast<int64_t>(sizeof(float))) << kept_c;
}

TEST(RmsNorm, WrongWeightShapeNamesBothShapes) {
  try {
    nn::rms_norm(torch::randn({4, 8}), torch::randn({6}), 1e-6);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[6]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 8]"), std::string::npos) << msg;
  }
}
