// FLUX.2: published parameter counts on the deferred full-size models, the VAE's buffers, and
// config refusals.
#include "models/flux2/sizes.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace zeroshard;
using namespace zeroshard::models::flux2;

namespace {

int64_t numel(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) {
    EXPECT_TRUE(nn::is_deferred(p));
    n += p.numel();
  }
  return n;
}

}  // namespace

TEST(Flux2Sizes, PublishedCountsOnTheDeferredModels) {
  // Arithmetic from the released configurations (DiffSynth model_configs.py: Flux2DiT defaults =
  // FLUX.2-dev; klein extra_kwargs): dev 32,223,281,152 ("32B"), klein 4B 3,875,544,576,
  // klein 9B 9,078,581,248 -- the same totals as the element counts of the released
  // transformer files.
  EXPECT_EQ(flux2_param_count(flux2_dev()), 32223281152LL);
  EXPECT_EQ(flux2_param_count(flux2_klein_4b()), 3875544576LL);
  EXPECT_EQ(flux2_param_count(flux2_klein_9b()), 9078581248LL);
  // FLUX.2 VAE (AutoencoderKLFlux2 defaults): 84,046,115 parameters + bn running mean/var (2 x 128).
  EXPECT_EQ(flux2_vae_param_count(flux2_vae()), 84046115LL);
  nn::DeferredInit deferred;
  for (const auto& [c, n] : {std::pair{flux2_dev(), 32223281152LL}, std::pair{flux2_klein_4b(), 3875544576LL},
                             std::pair{flux2_klein_9b(), 9078581248LL}}) {
    Flux2DiT m(c);
    EXPECT_EQ(numel(*m), n);
    EXPECT_EQ(m->named_parameters().find("time_guidance_embed.guidance_embedder.linear_1.weight") != nullptr,
              c.guidance_embeds);
  }
  Flux2Vae vae(flux2_vae(), true, true);
  EXPECT_EQ(numel(*vae), 84046115LL);
  int64_t buffers = 0;
  for (const auto& b : vae->named_buffers()) buffers += b.value().numel();
  EXPECT_EQ(buffers, 256);
  Flux2Vae enc(flux2_vae(), true, false);
  EXPECT_EQ(numel(*enc), flux2_vae_param_count(flux2_vae(), true, false));
}

TEST(Flux2Sizes, CountsMatchTheBuiltModelsOnOtherShapes) {
  Flux2Config c = flux2_klein_4b();
  c.num_attention_heads = 3;
  c.attention_head_dim = 16;
  c.axes_dims_rope = {4, 4, 4, 4};
  c.mlp_ratio = 2.5;
  c.guidance_embeds = true;
  c.out_channels = 32;
  nn::DeferredInit deferred;
  Flux2DiT m(c);
  EXPECT_EQ(numel(*m), flux2_param_count(c));
}

TEST(Flux2Sizes, RefusesInconsistentConfigs) {
  Flux2Config c = flux2_klein_4b();
  c.axes_dims_rope = {32, 32, 32, 16};
  EXPECT_THROW(c.validate("config.json"), std::invalid_argument);
  nlohmann::json vae = {{"in_channels", 3}, {"out_channels", 3}, {"block_out_channels", {32, 64}},
                        {"down_block_types", {"DownEncoderBlock2D", "AttnDownEncoderBlock2D"}},
                        {"up_block_types", {"UpDecoderBlock2D", "UpDecoderBlock2D"}}, {"layers_per_block", 1},
                        {"latent_channels", 32}, {"norm_num_groups", 32}, {"batch_norm_eps", 1e-4},
                        {"patch_size", {2, 2}}};
  try {
    Flux2VaeConfig::from_json(vae, "vae/config.json");
    FAIL() << "an attention down block was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("AttnDownEncoderBlock2D"), std::string::npos) << e.what();
  }
}
