// Qwen-Image at its released size, built without bytes (nn::DeferredInit), against the published
// parameter count; and the latent packing's round trip.
#include <gtest/gtest.h>

#include "models/qwen_image/qwen_image_dit.h"
#include "zeroshard/nn/deferred.h"

using namespace zeroshard;
using namespace zeroshard::models::qwen_image;

namespace {

int64_t count(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST(QwenImageSizes, Released20BMatchesThePublishedCount) {
  // Qwen/Qwen-Image transformer/diffusion_pytorch_model.safetensors.index.json: metadata.total_size
  // = 40,860,802,176 bytes of bf16 tensors = 20,430,401,088 parameters ("20B"/"20.4B" on the model
  // card); the byte count as quoted by exo-explore/exo src/exo/shared/models/model_cards.py.
  const int64_t published = 40860802176LL / 2;
  const QwenImageDitConfig c = qwen_image_20b();
  EXPECT_EQ(c.num_layers, 60);
  nn::DeferredInit deferred;
  QwenImageDit model(c);
  EXPECT_EQ(count(*model), published);
  EXPECT_EQ(parameter_count(c), published);
  // No bytes: every parameter is deferred.
  for (const auto& p : model->parameters()) ASSERT_TRUE(nn::is_deferred(p));
  // The released key layout (a few names of block 59 and the head).
  const auto params = model->named_parameters();
  for (const char* key :
       {"transformer_blocks.59.attn.to_out.0.weight", "transformer_blocks.59.attn.norm_added_k.weight",
        "transformer_blocks.59.txt_mlp.net.2.bias", "transformer_blocks.59.img_mod.1.weight",
        "time_text_embed.timestep_embedder.linear_2.bias", "norm_out.linear.weight", "txt_norm.weight"}) {
    EXPECT_NE(params.find(key), nullptr) << key;
  }
}

TEST(QwenImageSizes, CountFormulaMatchesABuiltSmallModel) {
  QwenImageDitConfig c;
  c.num_layers = 3;
  c.num_attention_heads = 3;
  c.attention_head_dim = 16;
  c.axes_dims_rope = {4, 6, 6};
  c.joint_attention_dim = 40;
  c.out_channels = 8;
  c.in_channels = 32;
  QwenImageDit model(c);
  EXPECT_EQ(count(*model), parameter_count(c));
}

TEST(QwenImageLatents, PackIsPatchMajorChannelFirstAndUnpackInverts) {
  const torch::Tensor latent = torch::arange(2 * 3 * 4 * 6, torch::kFloat).view({2, 3, 4, 6});
  const torch::Tensor tokens = pack_latents(latent);
  ASSERT_EQ(tokens.sizes(), at::IntArrayRef({2, 6, 12}));
  // Token (row 1, col 2) of sample 1, feature (c=2, dy=1, dx=0) = latent[1, 2, 3, 4].
  EXPECT_EQ(tokens[1][1 * 3 + 2][2 * 4 + 1 * 2 + 0].item<float>(), latent[1][2][3][4].item<float>());
  EXPECT_TRUE(torch::equal(unpack_latents(tokens, 4, 6), latent));
}
