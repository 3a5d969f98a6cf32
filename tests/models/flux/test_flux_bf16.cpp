// The FLUX.1 models in bf16 (how they train): weights and activations in bf16 run forward and
// backward, and agree with the fp32 run of the same weights to bf16 accuracy.
#include "io/safetensors.h"
#include "models/flux/flux1_dit.h"
#include "models/flux/flux1_vae.h"
#include "support/tensor_compare.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace zeroshard;
using namespace zeroshard::models::flux;
using zeroshard::testing::rel_diff;

namespace {

std::string case_dir(const std::string& name) { return std::string(ZS_SOURCE_DIR) + "/tests/fixtures/" + name; }

nlohmann::json config_of(const std::string& name) {
  std::ifstream in(case_dir(name) + "/config.json");
  return nlohmann::json::parse(in);
}

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile file(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : file.entries()) out[e.name] = file.read(e.name);
  return out;
}

void load(torch::nn::Module& m, const std::string& name) {
  const auto w = read_all(case_dir(name) + "/model.safetensors");
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) p.value().copy_(w.at(p.key()));
}

}  // namespace

TEST(FluxBf16, DiTRunsInBf16) {
  const auto c = Flux1Config::from_json(config_of("flux1_dit"), "flux1_dit");
  const auto in = read_all(case_dir("flux1_dit") + "/inputs.safetensors");
  torch::Tensor out[2], grad[2];
  for (int i = 0; i < 2; ++i) {
    const auto dt = i == 0 ? torch::kFloat : torch::kBFloat16;
    Flux1DiT m(c);
    load(*m, "flux1_dit");
    m->to(dt);
    const auto img = in.at("img").detach().to(dt).clone().requires_grad_(true);
    out[i] = m->forward(img, in.at("img_ids"), in.at("txt").to(dt), in.at("txt_ids"), in.at("timesteps"),
                        in.at("y").to(dt), in.at("guidance"));
    ASSERT_EQ(out[i].scalar_type(), dt);
    (out[i].to(torch::kFloat) * in.at("probe")).sum().backward();
    grad[i] = img.grad();
    ASSERT_TRUE(grad[i].defined());
  }
  EXPECT_LT(rel_diff(out[1], out[0]), 5e-2);
  EXPECT_LT(rel_diff(grad[1], grad[0]), 1e-1);
}

TEST(FluxBf16, VaeRunsInBf16) {
  const auto c = Flux1VaeConfig::from_json(config_of("flux1_vae_decode"), "flux1_vae_decode");
  const auto in = read_all(case_dir("flux1_vae_decode") + "/inputs.safetensors");
  torch::Tensor out[2];
  for (int i = 0; i < 2; ++i) {
    const auto dt = i == 0 ? torch::kFloat : torch::kBFloat16;
    Flux1AutoEncoder m(c, false, true);
    load(*m, "flux1_vae_decode");
    m->to(dt);
    const auto z = in.at("z").detach().to(dt).clone().requires_grad_(true);
    out[i] = m->decode(z);
    ASSERT_EQ(out[i].scalar_type(), dt);
    out[i].to(torch::kFloat).sum().backward();
    ASSERT_TRUE(z.grad().defined());
  }
  EXPECT_LT(rel_diff(out[1], out[0]), 5e-2);
}
