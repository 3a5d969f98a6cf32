// nn::swiglu and nn::gelu_tanh (src/nn/activations.h) against the libtorch compositions they
// replace in fp64 (to rounding) and against the fp64 truth in fp32 and bf16; bf16's forward
// against the composition's bits; halves of one projection read in place; extreme values; the
// same bits under 1 and 2 intra-op threads and wherever an element falls in the vector loop; what
// forward keeps (counted at the allocator); vec::exp within 1 ulp.
#include "nn/activations.h"
#include "nn/vec_math.h"
#include "support/tensor_compare.h"
#include "util/tensor_memory.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

using namespace zeroshard;
using zeroshard::testing::rel_diff;

namespace {

struct Result {
  torch::Tensor y, da, db;  // db: up's gradient (SwiGLU only)
};

// Which activation: SwiGLU takes (gate, up), GELU takes x = a only.
enum class Act { kSwiglu, kGelu };

Result run(Act act, bool fused, const torch::Tensor& a0, const torch::Tensor& b0, const torch::Tensor& dy) {
  auto a = a0.detach().clone().requires_grad_(true);
  auto b = b0.detach().clone().requires_grad_(true);
  torch::Tensor y;
  if (act == Act::kSwiglu) {
    y = fused ? nn::swiglu(a, b) : nn::swiglu_composed(a, b);
  } else {
    y = fused ? nn::gelu_tanh(a) : nn::gelu_tanh_composed(a);
  }
  y.backward(dy);
  return {y.detach(), a.grad(), act == Act::kSwiglu ? b.grad() : torch::Tensor()};
}

// Shapes: widths below, at and above 16 (AVX-512's fp32 lanes) and not multiples of them, 3-d
// and 4-d inputs, Qwen3-0.6B's intermediate width.
const std::vector<std::vector<int64_t>> kShapes = {{3, 5}, {7, 16}, {33, 37}, {2, 3, 5, 64}, {1, 40, 3072}};

struct Case {
  torch::Tensor a, b, dy;
};

Case make_case(const std::vector<int64_t>& shape, uint64_t seed) {
  torch::manual_seed(seed);
  Case c;
  c.a = torch::randn(shape, torch::kDouble) * 3.0 - 0.2;  // reaches both tails of silu and GELU
  c.b = torch::randn(shape, torch::kDouble);
  c.dy = torch::randn(shape, torch::kDouble);
  return c;
}

const char* name(Act act) { return act == Act::kSwiglu ? "swiglu" : "gelu_tanh"; }

}  // namespace

TEST(Activations, EqualTheCompositionsInFp64) {
  for (const Act act : {Act::kSwiglu, Act::kGelu}) {
    for (const auto& shape : kShapes) {
      const Case c = make_case(shape, 3);
      const Result ours = run(act, true, c.a, c.b, c.dy), ref = run(act, false, c.a, c.b, c.dy);
      EXPECT_EQ(ours.y.sizes(), ref.y.sizes());
      EXPECT_LT(rel_diff(ours.y, ref.y), 1e-14) << name(act) << " " << c10::str(shape);
      EXPECT_LT(rel_diff(ours.da, ref.da), 1e-14) << name(act) << " " << c10::str(shape);
      if (act == Act::kSwiglu) {
        EXPECT_LT(rel_diff(ours.db, ref.db), 1e-14) << c10::str(shape);
      }
    }
  }
}

TEST(Activations, Fp32AndBf16StayWithinTheirFloorsOfTheFp64Truth) {
  // fp32: a few units of 2^-24 (the exp is within 1 ulp); bf16: one rounding to bf16 (2^-9
  // relative) of an fp32 result, two for the forward (silu(gate) is rounded before the product).
  for (const Act act : {Act::kSwiglu, Act::kGelu}) {
    for (const auto& shape : kShapes) {
      const Case c = make_case(shape, 5);
      for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
        const double tol = dtype == torch::kFloat ? 1e-6 : 2.0 * std::ldexp(1.0, -8);
        const auto a = c.a.to(dtype), b = c.b.to(dtype), dy = c.dy.to(dtype);
        const Result truth = run(act, false, a.to(torch::kDouble), b.to(torch::kDouble), dy.to(torch::kDouble));
        const Result ours = run(act, true, a, b, dy);
        EXPECT_EQ(ours.y.scalar_type(), dtype);
        EXPECT_EQ(ours.da.scalar_type(), dtype);
        EXPECT_LT(rel_diff(ours.y, truth.y), tol) << name(act) << " " << c10::str(shape) << " " << dtype;
        EXPECT_LT(rel_diff(ours.da, truth.da), tol) << name(act) << " " << c10::str(shape) << " " << dtype;
        if (act == Act::kSwiglu) {
          EXPECT_LT(rel_diff(ours.db, truth.db), tol) << c10::str(shape) << " " << dtype;
        }
      }
    }
  }
}

TEST(Activations, Bf16RoundsOnceWhereLibtorchRoundsEveryStepAndIsCloserToTheTruth) {
  // libtorch 1.13's bf16 silu and GELU round each intermediate (exp, sum, quotient) to bf16; ours
  // compute in fp32 and round once. So ours is the exact value rounded to bf16 (for SwiGLU with
  // silu(gate) rounded before the product, transformers' order) but where the fp32 arithmetic
  // lands on the other side of a rounding boundary.
  for (const Act act : {Act::kSwiglu, Act::kGelu}) {
    const Case c = make_case({256, 96}, 9);
    const auto a = c.a.to(torch::kBFloat16), b = c.b.to(torch::kBFloat16), dy = c.dy.to(torch::kBFloat16);
    const auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
    const auto rounded_exact =
        act == Act::kSwiglu
            ? (torch::silu(ad).to(torch::kBFloat16).to(torch::kDouble) * bd).to(torch::kBFloat16)
            // GELU as x sigma(2z): the same function, but fp64's 1 + tanh(z) cancels for x below
            // about -6 (it is 0 from x = -7.4 on, where the value is -1.4e-17 and bf16 holds it).
            : (ad * torch::sigmoid(2 * 0.7978845608028654 * (ad + 0.044715 * ad * ad * ad))).to(torch::kBFloat16);
    const Result ours = run(act, true, a, b, dy), ref = run(act, false, a, b, dy);
    const Result truth = run(act, false, a.to(torch::kDouble), b.to(torch::kDouble), dy.to(torch::kDouble));
    // The same bf16 value for almost every element, at most one bf16 unit apart for the rest.
    const auto yo = ours.y.to(torch::kFloat), yc = rounded_exact.to(torch::kFloat);
    const auto diff = (yo - yc).abs();
    EXPECT_TRUE((diff <= yc.abs() * std::ldexp(1.0, -7) + 1e-30).all().item<bool>()) << name(act);
    EXPECT_GT((diff == 0).to(torch::kFloat).mean().item<double>(), 0.99) << name(act);
    // Against the fp64 truth, on average no farther than libtorch's bf16 composition, forward and
    // backward (which rounds SwiGLU's dy * up to bf16 before silu's backward as well).
    const auto err = [](const torch::Tensor& x, const torch::Tensor& t) {
      return (x.to(torch::kDouble) - t).abs().mean().item<double>();
    };
    EXPECT_LE(err(ours.y, truth.y), err(ref.y, truth.y)) << name(act);
    EXPECT_LE(err(ours.da, truth.da), err(ref.da, truth.da)) << name(act);
  }
}

TEST(Activations, HalvesOfOneProjectionAreReadInPlace) {
  // FLUX.2's feed-forward: one projection [B, T, 2H] split into gate and up halves (views).
  const Case c = make_case({2, 9, 2 * 40}, 11);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto dy = c.dy.narrow(-1, 0, 40).to(dtype);
    auto p_view = c.a.to(dtype).requires_grad_(true), p_copy = c.a.to(dtype).requires_grad_(true);
    const auto halves = p_view.chunk(2, -1);
    ASSERT_FALSE(halves[0].is_contiguous());
    const auto y_view = nn::swiglu(halves[0], halves[1]);
    y_view.backward(dy);
    const auto copies = p_copy.chunk(2, -1);
    const auto y_copy = nn::swiglu(copies[0].contiguous(), copies[1].contiguous());
    y_copy.backward(dy);
    EXPECT_TRUE(torch::equal(y_view, y_copy)) << dtype;
    EXPECT_TRUE(torch::equal(p_view.grad(), p_copy.grad())) << dtype;
    // A view without unit stride in the last dimension takes the composition: the same values.
    const auto t = c.a.to(dtype).narrow(-1, 0, 40).transpose(1, 2);
    ASSERT_NE(t.stride(-1), 1);
    EXPECT_TRUE(torch::equal(nn::gelu_tanh(t), nn::gelu_tanh_composed(t))) << dtype;
    EXPECT_TRUE(torch::equal(nn::swiglu(t, t), nn::swiglu_composed(t, t))) << dtype;
  }
}

TEST(Activations, SameBitsWhereverAnElementFallsInTheVectorLoop) {
  // The same elements at offsets 0 and 1 of a row (vector body against scalar tail and peel):
  // no FMA contraction, and the same arithmetic in each, so the same bits.
  const Case c = make_case({4, 70}, 13);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto a = c.a.to(dtype), b = c.b.to(dtype);
    const auto shifted_a = torch::cat({torch::zeros({4, 1}, a.options()), a}, 1).narrow(1, 1, 70);
    const auto shifted_b = torch::cat({torch::zeros({4, 1}, b.options()), b}, 1).narrow(1, 1, 70);
    EXPECT_TRUE(torch::equal(nn::swiglu(a, b), nn::swiglu(shifted_a, shifted_b))) << dtype;
    EXPECT_TRUE(torch::equal(nn::gelu_tanh(a), nn::gelu_tanh(shifted_a))) << dtype;
    EXPECT_TRUE(torch::equal(nn::gelu_tanh(a.narrow(1, 0, 33)), nn::gelu_tanh(a).narrow(1, 0, 33))) << dtype;
  }
}

TEST(Activations, SameBitsUnderOneAndTwoIntraOpThreads) {
  const int threads_before = at::get_num_threads();
  for (const Act act : {Act::kSwiglu, Act::kGelu}) {
    const Case c = make_case({300, 256}, 17);  // several parallel tasks of 128 rows
    const auto a = c.a.to(torch::kBFloat16), b = c.b.to(torch::kBFloat16), dy = c.dy.to(torch::kBFloat16);
    at::set_num_threads(1);
    const Result one = run(act, true, a, b, dy);
    at::set_num_threads(2);
    const Result two = run(act, true, a, b, dy);
    EXPECT_TRUE(torch::equal(one.y, two.y)) << name(act);
    EXPECT_TRUE(torch::equal(one.da, two.da)) << name(act);
  }
  at::set_num_threads(threads_before);
}

TEST(Activations, ExtremeValuesGiveTheLimitsNotNaN) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    const double inf = std::numeric_limits<double>::infinity();
    // exp(-x) overflows for x below about -88.7 in fp32 (-709.8 in fp64): silu and GELU are 0
    // there and their gradients 0, as the composition gives.
    const auto x = torch::tensor({-1e4, -800.0, -100.0, -20.0, 0.0, 20.0, 100.0, 1e4}, torch::kDouble).to(dtype);
    const auto ones = torch::ones_like(x);
    for (const Act act : {Act::kSwiglu, Act::kGelu}) {
      const Result ours = run(act, true, x, ones, ones), ref = run(act, false, x, ones, ones);
      EXPECT_TRUE(torch::isfinite(ours.y).all().item<bool>()) << name(act) << " " << dtype << " " << ours.y;
      EXPECT_TRUE(torch::isfinite(ours.da).all().item<bool>()) << name(act) << " " << dtype << " " << ours.da;
      EXPECT_LT(rel_diff(ours.y, ref.y), 1e-6) << name(act) << " " << dtype;
      EXPECT_LT((ours.da.to(torch::kDouble) - ref.da.to(torch::kDouble)).abs().max().item<double>(), 1e-6)
          << name(act) << " " << dtype << " " << ours.da << ref.da;
    }
    const auto nan = torch::tensor({std::nan(""), inf}, torch::kDouble).to(dtype);
    EXPECT_TRUE(torch::isnan(nn::gelu_tanh(nan)[0]).item<bool>()) << dtype;
    EXPECT_EQ(nn::gelu_tanh(nan)[1].item<double>(), inf) << dtype;
    EXPECT_TRUE(torch::isnan(nn::swiglu(nan, torch::ones_like(nan))[0]).item<bool>()) << dtype;
  }
}

TEST(Activations, SwigluForwardKeepsOnlyItsInputs) {
  util::track_tensor_memory();
  const int64_t rows = 256, D = 1024;
  auto g = torch::randn({rows, D}).to(torch::kBFloat16).requires_grad_(true);
  auto u = torch::randn({rows, D}).to(torch::kBFloat16).requires_grad_(true);
  const auto gate = g * 1, up = u * 1;  // non-leaf inputs, as projections' outputs are
  const int64_t before = util::live_tensor_bytes();
  auto y = nn::swiglu(gate, up);
  const int64_t kept = util::live_tensor_bytes() - before - static_cast<int64_t>(y.nbytes());
  EXPECT_EQ(kept, 0);  // gate and up are the caller's
  y.sum().backward();
  // The composition, measured the same way, keeps silu(gate) as well (the measure can fail).
  const int64_t before_c = util::live_tensor_bytes();
  auto yc = nn::swiglu_composed(gate, up);
  const int64_t kept_c = util::live_tensor_bytes() - before_c - static_cast<int64_t>(yc.nbytes());
  EXPECT_GE(kept_c, rows * D * 2) << kept_c;
}

TEST(Activations, MixedDtypesTakeTheComposition) {
  // (fp16 would too; libtorch 1.13 has no fp16 silu or GELU on the CPU.)
  const Case c = make_case({5, 24}, 19);
  const auto f = c.a.to(torch::kFloat), bb = c.b.to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(nn::swiglu(f, bb), nn::swiglu_composed(f, bb)));
}

TEST(Activations, SwigluOfTwoShapesNamesBoth) {
  try {
    nn::swiglu(torch::randn({4, 8}), torch::randn({4, 6}));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[4, 8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4, 6]"), std::string::npos) << msg;
  }
}

TEST(Activations, VecExpIsWithinOneUlp) {
  // Every 997th float bit pattern in [-87, 88] (about 2.2 million values), against fp64's exp.
  double worst = 0;
  for (float x = -87.0f; x < 88.0f;) {
    const double truth = std::exp(static_cast<double>(x));
    const double ulp = std::ldexp(1.0, std::ilogb(truth) - 23);
    worst = std::max(worst, std::abs(static_cast<double>(nn::vec::exp(x)) - truth) / ulp);
    uint32_t bits = __builtin_bit_cast(uint32_t, x);
    bits = x < 0 ? bits - 997 : bits + 997;
    x = x < 0 && bits < 0x80000000U ? 0.0f : __builtin_bit_cast(float, bits);
  }
  EXPECT_LT(worst, 1.0);
  EXPECT_EQ(nn::vec::exp(-100.0f), 0.0f);
  EXPECT_EQ(nn::vec::exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(nn::vec::exp(std::nanf(""))));
}
