#include "util/sum_squares.h"
#include "zeroshard/optim.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

using namespace zeroshard;

// Our fused loop against libtorch's own AdamW, over 20 steps with weight decay.
TEST(AdamW, MatchesTorchOptimAdamW) {
  torch::manual_seed(3);
  const int64_t n = 1237;
  auto p_ref = torch::randn({n}).requires_grad_(true);
  auto p = p_ref.detach().clone();
  const auto p_ref_start = p.clone();
  auto m = torch::zeros({n}), v = torch::zeros({n});
  AdamWOptions o;
  o.lr = 3e-3;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  torch::optim::AdamW ref({p_ref}, torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(o.weight_decay));
  for (int t = 1; t <= 20; ++t) {
    auto g = torch::randn({n}) * (1.0 / t);
    p_ref.mutable_grad() = g.clone();
    ref.step();
    adamw_update(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n,
                 AdamWStep::make(o, o.lr, t));
  }
  const double max_diff = (p - p_ref.detach()).abs().max().item<double>();
  EXPECT_LT(max_diff, 2e-6) << "max |ours - torch::optim::AdamW| after 20 steps";
  EXPECT_GT((p_ref.detach() - p_ref_start).abs().max().item<double>(), 1e-3) << "the reference must move";
}

// The result of each element must not depend on where a shard boundary falls.
TEST(AdamW, ShardBoundariesDoNotChangeBits) {
  torch::manual_seed(5);
  const int64_t n = 1001;
  auto p0 = torch::randn({n}), m0 = torch::randn({n}).abs() * 0.1, v0 = torch::randn({n}).abs() * 0.01;
  auto whole_p = p0.clone(), whole_m = m0.clone(), whole_v = v0.clone();
  auto cut_p = p0.clone(), cut_m = m0.clone(), cut_v = v0.clone();
  const int64_t cuts[] = {0, 3, 17, 250, 251, 640, n};  // odd offsets break vector alignment
  AdamWOptions o;
  for (int t = 1; t <= 5; ++t) {
    auto g = torch::randn({n});
    const auto s = AdamWStep::make(o, 1e-3, t);
    adamw_update(whole_p.data_ptr<float>(), g.data_ptr<float>(), whole_m.data_ptr<float>(), whole_v.data_ptr<float>(), n, s);
    for (size_t k = 0; k + 1 < sizeof(cuts) / sizeof(cuts[0]); ++k) {
      const int64_t b = cuts[k], e = cuts[k + 1];
      adamw_update(cut_p.data_ptr<float>() + b, g.data_ptr<float>() + b, cut_m.data_ptr<float>() + b,
                   cut_v.data_ptr<float>() + b, e - b, s);
    }
    ASSERT_EQ(std::memcmp(cut_p.data_ptr<float>(), whole_p.data_ptr<float>(), n * sizeof(float)), 0) << "step " << t;
    ASSERT_EQ(std::memcmp(cut_m.data_ptr<float>(), whole_m.data_ptr<float>(), n * sizeof(float)), 0) << "step " << t;
    ASSERT_EQ(std::memcmp(cut_v.data_ptr<float>(), whole_v.data_ptr<float>(), n * sizeof(float)), 0) << "step " << t;
  }
  EXPECT_FALSE(torch::equal(whole_p, p0)) << "the update must move the parameters";
}

// The mean gradient and the clipping factor reach the update as grad_scale: the same as
// updating with the gradient scaled beforehand (one rounding either way), and it must act.
TEST(AdamW, GradScaleEqualsAPreScaledGradient) {
  torch::manual_seed(9);
  const int64_t n = 777;
  const float scale = 0.3f;
  auto g = torch::randn({n});
  auto g_scaled = g * scale;
  auto p1 = torch::randn({n}), m1 = torch::zeros({n}), v1 = torch::zeros({n});
  auto p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
  AdamWStep s = AdamWStep::make(AdamWOptions{}, 1e-3, 1);
  adamw_update(p1.data_ptr<float>(), g_scaled.data_ptr<float>(), m1.data_ptr<float>(), v1.data_ptr<float>(), n, s);
  s.grad_scale = scale;
  adamw_update(p2.data_ptr<float>(), g.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), n, s);
  EXPECT_TRUE(torch::equal(p1, p2));
  EXPECT_TRUE(torch::equal(m1, m2));
  EXPECT_TRUE(torch::equal(v1, v2));
  EXPECT_FALSE(torch::equal(m1, g * 0.1f)) << "the scale must reach the moments";
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(1), 0.1);
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);   // half-way through the cosine
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);   // ends at min_lr
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);   // and stays there
  for (int t = 11; t < 110; ++t) EXPECT_LE(s.at(t + 1), s.at(t));
}
