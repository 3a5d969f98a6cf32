// FLUX.1: published parameter counts on the deferred full-size models, and config refusals.
#include "models/flux/sizes.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace zeroshard;
using namespace zeroshard::models::flux;

namespace {

int64_t numel(torch::nn::Module& m, bool all_deferred = true) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) {
    EXPECT_EQ(nn::is_deferred(p), all_deferred);
    n += p.numel();
  }
  return n;
}

}  // namespace

TEST(FluxSizes, PublishedCountsOnTheDeferredModels) {
  // FLUX.1-dev: 11,901,408,320 and FLUX.1-schnell: 11,891,178,560 parameters -- the totals the
  // Hugging Face index of the released flux1-dev / flux1-schnell safetensors reports ("11.9B" on
  // the model cards); schnell lacks guidance_in (256*3072 + 3072 + 3072*3072 + 3072 = 10,229,760).
  EXPECT_EQ(flux1_param_count(flux1_dev()), 11901408320LL);
  EXPECT_EQ(flux1_param_count(flux1_schnell()), 11891178560LL);
  // ae.safetensors (FLUX.1 VAE): 244 tensors, 83,819,683 values.
  EXPECT_EQ(flux1_vae_param_count(flux1_vae()), 83819683LL);
  nn::DeferredInit deferred;
  Flux1DiT dev(flux1_dev());
  EXPECT_EQ(numel(*dev), 11901408320LL);
  EXPECT_EQ(dev->named_parameters().size(), 780u);  // tensors in flux1-dev.safetensors
  Flux1DiT schnell(flux1_schnell());
  EXPECT_EQ(numel(*schnell), 11891178560LL);
  EXPECT_EQ(schnell->named_parameters().find("guidance_in.in_layer.weight"), nullptr);
  Flux1AutoEncoder ae(flux1_vae(), true, true);
  EXPECT_EQ(numel(*ae), 83819683LL);
  EXPECT_EQ(ae->named_parameters().size(), 244u);
  Flux1AutoEncoder enc(flux1_vae(), true, false);
  EXPECT_EQ(numel(*enc), flux1_vae_param_count(flux1_vae(), true, false));
}

TEST(FluxSizes, CountsMatchTheBuiltModelsOnOtherShapes) {
  Flux1Config c = flux1_dev();
  c.hidden_size = 96;
  c.num_heads = 4;
  c.axes_dim = {8, 8, 8};
  c.depth = 2;
  c.depth_single_blocks = 3;
  c.mlp_ratio = 2.5;
  c.qkv_bias = false;
  nn::DeferredInit deferred;
  Flux1DiT m(c);
  EXPECT_EQ(numel(*m), flux1_param_count(c));
  Flux1VaeConfig v = flux1_vae();
  v.ch = 32;
  v.ch_mult = {2, 1, 3};
  v.num_res_blocks = 1;
  Flux1AutoEncoder ae(v, true, true);
  EXPECT_EQ(numel(*ae), flux1_vae_param_count(v));
}

TEST(FluxSizes, RefusesInconsistentConfigs) {
  Flux1Config c = flux1_dev();
  c.axes_dim = {16, 56, 48};
  try {
    c.validate("config.json");
    FAIL() << "axes_dim not summing to the head dim was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("axes_dim"), std::string::npos) << e.what();
  }
  nlohmann::json j = {{"in_channels", 64}};
  try {
    Flux1Config::from_json(j, "case/config.json");
    FAIL() << "a config without out_channels was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("out_channels"), std::string::npos) << e.what();
  }
  Flux1VaeConfig v = flux1_vae();
  v.ch = 48;  // not a multiple of the 32 norm groups
  EXPECT_THROW(v.kl().validate("config.json"), std::invalid_argument);
}
