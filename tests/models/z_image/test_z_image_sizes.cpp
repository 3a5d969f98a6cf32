// Z-Image at its released size, built without bytes (nn::DeferredInit), against the published
// parameter count.
#include <gtest/gtest.h>

#include "models/z_image/z_image_dit.h"
#include "zeroshard/nn/deferred.h"

using namespace zeroshard;
using namespace zeroshard::models::z_image;

namespace {

int64_t count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST(ZImageSizes, TurboMatchesThePublishedCount) {
  // Tongyi-MAI/Z-Image-Turbo transformer/diffusion_pytorch_model.safetensors.index.json:
  // metadata.total_size = 12,309,817,472 bytes of bf16 tensors (521 of them) = 6,154,908,736
  // parameters ("6B"; 6.15B), with the released config (dim 3840, 30 layers, 2 refiner layers,
  // 30 heads, cap_feat_dim 2560, patch 2 / frame patch 1, 16 channels).
  const int64_t published = 12309817472LL / 2;
  const ZImageDitConfig c = z_image_turbo_6b();
  nn::DeferredInit deferred;
  ZImageDit model(c);
  EXPECT_EQ(count(*model), published);
  EXPECT_EQ(parameter_count(c), published);
  EXPECT_EQ(model->parameters().size(), 521u);
  for (const auto& p : model->parameters()) ASSERT_TRUE(nn::is_deferred(p));
  const auto params = model->named_parameters();
  for (const char* key : {"all_x_embedder.2-1.weight", "all_final_layer.2-1.adaLN_modulation.1.bias",
                          "noise_refiner.1.adaLN_modulation.0.weight", "context_refiner.1.attention.norm_k.weight",
                          "layers.29.feed_forward.w3.weight", "t_embedder.mlp.2.weight", "cap_embedder.0.weight",
                          "x_pad_token", "cap_pad_token"}) {
    EXPECT_NE(params.find(key), nullptr) << key;
  }
  EXPECT_EQ(params.find("context_refiner.0.adaLN_modulation.0.weight"), nullptr);
}

TEST(ZImageSizes, CountFormulaMatchesABuiltSmallModel) {
  ZImageDitConfig c;
  c.all_patch_size = {2, 4};
  c.all_f_patch_size = {1, 2};
  c.in_channels = 4;
  c.dim = 96;
  c.n_layers = 2;
  c.n_refiner_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.qk_norm = false;
  c.cap_feat_dim = 24;
  c.axes_dims = {8, 8, 8};
  c.adaln_embed_dim = 32;
  c.frequency_embedding_size = 48;
  ZImageDit model(c);
  EXPECT_EQ(count(*model), parameter_count(c));
}

TEST(ZImageConventions, ModelTimeRunsBackwardsAndTheSamplerNegatesTheOutput) {
  const torch::Tensor sigma = torch::tensor({0.0, 0.25, 1.0});
  EXPECT_TRUE(torch::allclose(model_timestep(sigma), torch::tensor({1.0, 0.75, 0.0})));
  EXPECT_TRUE(torch::equal(flow_velocity(sigma), -sigma));
}
