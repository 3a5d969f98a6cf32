// The KL VAE's two layouts (models/flux/kl_vae.h, kl_vae_name_map): BFL's names mapped to
// diffusers' must be exactly the names diffusers' AutoencoderKLFlux2 gives (the FLUX.2 reference
// cases ship its real state dict), an encoder under BFL's names loaded from that diffusers file
// computes bitwise what the diffusers-named one does, and both directions round-trip bitwise.
#include "io/safetensors.h"
#include "models/flux/kl_vae.h"
#include "nn/name_map.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace zeroshard;
using namespace zeroshard::models::flux;

namespace {

const std::string kFixtures = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/";

// The FLUX.2 reference cases' reduced VAE (config.json: block_out_channels [32, 64],
// layers_per_block 1, latent_channels 32, 32 groups).
KlVaeConfig flux2_case_config(VaeNaming naming) {
  KlVaeConfig c;
  c.naming = naming;
  c.stem_channels = 32;
  c.block_channels = {32, 64};
  c.layers = 1;
  c.latent_channels = 32;
  c.groups = 32;
  return c;
}

// The VAE's halves as a pipeline holds them: encoder.* and decoder.* at the root.
std::shared_ptr<torch::nn::Module> both_halves(const KlVaeConfig& c) {
  auto root = std::make_shared<torch::nn::Module>();
  root->register_module("encoder", KlEncoder(c));
  root->register_module("decoder", KlDecoder(c));
  return root;
}

std::map<std::string, std::vector<int64_t>> shapes_of(const torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().sizes().vec();
  return out;
}

}  // namespace

TEST(KlVaeNames, BflNamesMapToExactlyTheNamesDiffusersReleases) {
  const KlVaeConfig bfl = flux2_case_config(VaeNaming::Bfl);
  const nn::NameMap map = kl_vae_name_map(bfl);
  std::map<std::string, at::Tensor> ours;
  for (const auto& [name, shape] : shapes_of(*both_halves(bfl))) ours[name] = at::zeros(shape);
  std::map<std::string, std::vector<int64_t>> mapped;
  for (const auto& [name, t] : map.to_theirs(ours)) mapped[name] = t.sizes().vec();

  // The released names: the reference cases' state dicts, less what is FLUX.2's own around the
  // autoencoder (quant convs, the BatchNorm statistics).
  std::map<std::string, std::vector<int64_t>> released;
  for (const char* kase : {"flux2_vae_encode", "flux2_vae_decode"}) {
    const io::SafetensorsFile f(kFixtures + kase + "/model.safetensors");
    for (const auto& e : f.entries()) {
      if (e.name.rfind("encoder.", 0) == 0 || e.name.rfind("decoder.", 0) == 0) released[e.name] = e.shape;
    }
  }
  ASSERT_GT(released.size(), 100u);
  EXPECT_EQ(mapped, released);
  // The decoder's levels reverse: BFL's up.0 (the shallowest, run last) is diffusers' last block.
  EXPECT_EQ(map.their_name("decoder.up.0.block.0.conv1.weight"), "decoder.up_blocks.1.resnets.0.conv1.weight");
  EXPECT_EQ(map.their_name("decoder.up.1.upsample.conv.bias"), "decoder.up_blocks.0.upsamplers.0.conv.bias");
  EXPECT_EQ(map.their_name("encoder.mid.attn_1.proj_out.weight"), "encoder.mid_block.attentions.0.to_out.0.weight");

  // Both directions round-trip bitwise, and the diffusers-named VAE's map is the inverse.
  at::manual_seed(3);
  for (auto& [name, t] : ours) t = at::randn(t.sizes());
  const auto theirs = map.to_theirs(ours);
  const auto back = map.to_ours(theirs);
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [name, t] : ours) EXPECT_TRUE(back.at(name).equal(t)) << name;
  const auto from_diffusers = kl_vae_name_map(flux2_case_config(VaeNaming::Diffusers)).to_theirs(theirs);
  ASSERT_EQ(from_diffusers.size(), ours.size());
  for (const auto& [name, t] : ours) EXPECT_TRUE(from_diffusers.at(name).equal(t)) << name;
}

TEST(KlVaeNames, AnEncoderUnderBflNamesLoadsTheDiffusersFileAndComputesTheSameBits) {
  const std::string file = kFixtures + "flux2_vae_encode/model.safetensors";
  EXPECT_EQ(kl_vae_file_naming(file), VaeNaming::Diffusers);
  EXPECT_EQ(kl_vae_file_naming(kFixtures + "flux1_vae_encode/model.safetensors"), VaeNaming::Bfl);
  EXPECT_THROW(kl_vae_file_naming(kFixtures + "flux2_dit/model.safetensors"), std::invalid_argument);

  // FLUX.2's own tensors beside the autoencoder are not this test's encoder's.
  nn::NameMap extra;
  extra.ignore("quant_conv.**", "FLUX.2's quant conv, outside the autoencoder");
  extra.ignore("bn.**", "FLUX.2's BatchNorm statistics, outside the autoencoder");
  at::Tensor out[2];
  for (VaeNaming naming : {VaeNaming::Bfl, VaeNaming::Diffusers}) {
    auto root = std::make_shared<torch::nn::Module>();
    auto encoder = root->register_module("encoder", KlEncoder(flux2_case_config(naming)));
    auto source = kl_vae_file_source(file, flux2_case_config(naming), extra);
    std::vector<ParamInfo> infos;
    for (const auto& p : root->named_parameters()) infos.push_back({p.key(), p.value().sizes().vec(), 0, p.value().numel()});
    source->check(infos);
    EXPECT_EQ(source->notes().size(), 2u);
    torch::NoGradGuard no_grad;
    for (auto& p : root->named_parameters()) {
      at::Tensor flat = at::empty({p.value().numel()}, at::kFloat);
      source->read({p.key(), p.value().sizes().vec(), 0, p.value().numel()}, 0, p.value().numel(), flat);
      p.value().copy_(flat.view(p.value().sizes()));
    }
    const io::SafetensorsFile inputs(kFixtures + "flux2_vae_encode/inputs.safetensors");
    out[naming == VaeNaming::Bfl ? 0 : 1] = encoder->forward(inputs.read("x").to(at::kFloat));
  }
  EXPECT_TRUE(out[0].equal(out[1]));
}
