// The shared rotary embedding and attention (src/nn/rope.h, src/nn/attention.h) against their
// definitions written out by hand.
#include "nn/attention.h"
#include "nn/rope.h"
#include "nn/timestep.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

using namespace zeroshard;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST(Rope, InterleavedRotatesAdjacentPairsByPositionTimesFrequency) {
  const int64_t D = 12;  // axes of 4 and 8 features: 2 + 4 pairs
  const std::vector<int64_t> axes = {4, 8};
  at::Tensor pos = at::tensor({3.0, -2.0, 0.5, 7.0}, at::kDouble).view({2, 2});  // 2 tokens x 2 axes
  const auto angles = nn::rope_angles(pos, axes, 100.0, at::kDouble);
  ASSERT_EQ(angles.cos.sizes(), at::IntArrayRef({2, D / 2}));
  at::Tensor x = at::randn({1, 1, 2, D}, at::kDouble);
  const at::Tensor y = nn::apply_rope(x, angles, nn::RopePairing::Interleaved);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t j = 0; j < D / 2; ++j) {
      // pair j belongs to axis 0 (j < 2) or axis 1; its frequency index inside the axis is i.
      const int64_t axis = j < 2 ? 0 : 1, i = j < 2 ? j : j - 2, d = axes[static_cast<size_t>(axis)];
      const double angle = pos[n][axis].item<double>() * std::pow(100.0, -2.0 * static_cast<double>(i) / d);
      const double a = x[0][0][n][2 * j].item<double>(), b = x[0][0][n][2 * j + 1].item<double>();
      EXPECT_NEAR(y[0][0][n][2 * j].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-12);
      EXPECT_NEAR(y[0][0][n][2 * j + 1].item<double>(), a * std::sin(angle) + b * std::cos(angle), 1e-12);
    }
  }
}

TEST(Rope, RotateHalfIsInterleavedOnPermutedFeatures) {
  const int64_t D = 16;
  at::Tensor pos = at::arange(5, at::kDouble).view({5, 1});
  const auto angles = nn::rope_angles(pos, {D}, 10000.0, at::kDouble);
  at::Tensor x = at::randn({2, 3, 5, D}, at::kDouble);
  // Feature j of the first half pairs with j + D/2 in rotate-half; interleave them.
  const at::Tensor inter = at::stack({x.narrow(-1, 0, D / 2), x.narrow(-1, D / 2, D / 2)}, -1).flatten(-2);
  const at::Tensor a = nn::apply_rope(x, angles, nn::RopePairing::RotateHalf);
  const at::Tensor b = nn::apply_rope(inter, angles, nn::RopePairing::Interleaved);
  const at::Tensor b_back = at::cat({b.unflatten(-1, {D / 2, 2}).select(-1, 0), b.unflatten(-1, {D / 2, 2}).select(-1, 1)}, -1);
  EXPECT_LT(max_diff(a, b_back), 1e-12);
  // Relative positions: <rope(q, m), rope(k, n)> depends on m - n only.
  at::Tensor q = at::randn({D}, at::kDouble), k = at::randn({D}, at::kDouble);
  auto rot = [&](const at::Tensor& v, double p) {
    return nn::apply_rope(v.view({1, 1, 1, D}), nn::rope_angles(at::full({1, 1}, p, at::kDouble), {D}, 10000.0, at::kDouble),
                          nn::RopePairing::RotateHalf)
        .view({D});
  };
  EXPECT_NEAR(rot(q, 7).dot(rot(k, 3)).item<double>(), rot(q, 4).dot(rot(k, 0)).item<double>(), 1e-10);
}

TEST(Rope, GridPositionsAreFrameRowColumnWithOrigin) {
  const at::Tensor g = nn::grid_positions(2, 2, 3, {0, -1, -1.5});
  ASSERT_EQ(g.sizes(), at::IntArrayRef({12, 3}));
  EXPECT_EQ(g[0][0].item<double>(), 0);
  EXPECT_EQ(g[0][1].item<double>(), -1);
  EXPECT_EQ(g[0][2].item<double>(), -1.5);
  EXPECT_EQ(g[5][1].item<double>(), 0);    // frame 0, row 1, col 2
  EXPECT_EQ(g[5][2].item<double>(), 0.5);
  EXPECT_EQ(g[6][0].item<double>(), 1);    // frame 1 starts at token 6
}

namespace {

// softmax(q k^T * scale + mask) v per (batch, head), written out.
at::Tensor attention_by_hand(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& keep,
                             double scale) {
  const int64_t H = q.size(1), Hkv = k.size(1);
  at::Tensor kk = k.repeat_interleave(H / Hkv, 1), vv = v.repeat_interleave(H / Hkv, 1);
  at::Tensor s = at::matmul(q, kk.transpose(-2, -1)) * scale;
  s = s.masked_fill(keep.logical_not(), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(s, -1), vv);
}

}  // namespace

TEST(Attention, CausalGqaKeyPaddingAndSegmentsMatchTheDefinition) {
  const int64_t B = 2, H = 4, Hkv = 2, T = 6, D = 8;
  at::Tensor q = at::randn({B, H, T, D}, at::kDouble), k = at::randn({B, Hkv, T, D}, at::kDouble),
             v = at::randn({B, Hkv, T, D}, at::kDouble);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Causal.
  nn::AttentionOptions o;
  o.causal = true;
  at::Tensor keep = at::ones({T, T}, at::kBool).tril().view({1, 1, T, T}).expand({B, H, T, T});
  EXPECT_LT(max_diff(nn::attention(q, k, v, o), attention_by_hand(q, k, v, keep, scale)), 1e-12);
  // Causal + key padding (row 1 has 4 real tokens) + an explicit scale.
  o.key_padding = at::tensor({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, at::kLong).to(at::kBool).view({B, T});
  o.scale = 0.3;
  keep = keep.logical_and(o.key_padding.view({B, 1, 1, T}));
  const at::Tensor got = nn::attention(q, k, v, o), want = attention_by_hand(q, k, v, keep, 0.3);
  EXPECT_LT(max_diff(got, want), 1e-12);
  // Packed segments: [0 0 0 1 1 1] attend within their segment only.
  nn::AttentionOptions p;
  p.causal = true;
  p.query_segments = p.key_segments = at::tensor({0, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1}, at::kLong).view({B, T});
  at::Tensor seg_keep = at::ones({T, T}, at::kBool).tril().view({1, 1, T, T}).logical_and(
      p.query_segments.view({B, 1, T, 1}).eq(p.key_segments.view({B, 1, 1, T})));
  EXPECT_LT(max_diff(nn::attention(q, k, v, p), attention_by_hand(q, k, v, seg_keep.expand({B, H, T, T}), scale)), 1e-12);
  // Cross-attention (Tq != Tk), no mask: every key seen.
  at::Tensor kc = at::randn({B, Hkv, 3, D}, at::kDouble), vc = at::randn({B, Hkv, 3, D}, at::kDouble);
  EXPECT_LT(max_diff(nn::attention(q, kc, vc), attention_by_hand(q, kc, vc, at::ones({B, H, T, 3}, at::kBool), scale)),
            1e-12);
}

TEST(Attention, AQueryWithEveryKeyMaskedAveragesInsteadOfNaN) {
  at::Tensor q = at::randn({1, 1, 2, 4}), k = at::randn({1, 1, 2, 4}), v = at::randn({1, 1, 2, 4});
  nn::AttentionOptions o;
  o.key_padding = at::zeros({1, 2}, at::kBool);
  const at::Tensor y = nn::attention(q, k, v, o);
  EXPECT_TRUE(y.isfinite().all().item<bool>());
  EXPECT_LT(max_diff(y[0][0][0], v[0][0].mean(0)), 1e-6);
}

TEST(Timestep, SinusoidVariants) {
  const at::Tensor t = at::tensor({0.0, 500.0}, at::kDouble);
  // Cos first, shift 0 (Wan, FLUX): element i is cos(t * 10000^(-i/half)).
  const at::Tensor a = nn::timestep_sinusoid(t, 8, {}, at::kDouble);
  EXPECT_NEAR(a[1][1].item<double>(), std::cos(500.0 * std::pow(10000.0, -1.0 / 4)), 1e-12);
  EXPECT_NEAR(a[1][5].item<double>(), std::sin(500.0 * std::pow(10000.0, -1.0 / 4)), 1e-12);
  // diffusers, downscale_freq_shift 1, sin first: exponent / (half - 1).
  nn::SinusoidOptions o;
  o.cos_first = false;
  o.freq_shift = 1;
  const at::Tensor b = nn::timestep_sinusoid(t, 8, o, at::kDouble);
  EXPECT_NEAR(b[1][1].item<double>(), std::sin(500.0 * std::pow(10000.0, -1.0 / 3)), 1e-12);
  // Gradients reach t.
  at::Tensor tt = at::tensor({0.3}, at::kDouble).requires_grad_(true);
  nn::timestep_sinusoid(tt, 16, {}, at::kDouble).sum().backward();
  EXPECT_TRUE(tt.grad().defined());
}
