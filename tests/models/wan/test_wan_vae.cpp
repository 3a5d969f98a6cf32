// The Wan VAE: upstream's chunking equals one pass over the whole clip; every residual,
// attention and resample block is a unit called once per chunk with its cache crossing as
// tensors (so checkpointed units recompute exactly); frame counts other than 1 + 4k refused.
#include "io/safetensors.h"
#include "models/wan/vae.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace zeroshard;
using namespace zeroshard::models::wan;

namespace {

struct Loaded {
  WanVae model{nullptr};
  std::map<std::string, at::Tensor> inputs;
};

Loaded load_case(const std::string& name, at::ScalarType dtype) {
  const std::string dir = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/" + name;
  std::ifstream cfg(dir + "/config.json");
  Loaded l;
  l.model = WanVae(WanVaeConfig::from_json(nlohmann::json::parse(cfg), dir));
  const io::SafetensorsFile weights(dir + "/model.safetensors");
  torch::NoGradGuard no_grad;
  for (auto& p : l.model->named_parameters()) p.value().copy_(weights.read(p.key()));
  l.model->to(dtype);
  const io::SafetensorsFile inputs(dir + "/inputs.safetensors");
  for (const auto& e : inputs.entries()) l.inputs[e.name] = inputs.read(e.name).to(dtype);
  return l;
}

double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

}  // namespace

TEST(WanVae, ChunkedEqualsWholeClip) {
  for (const auto dtype : {at::kDouble, at::kFloat}) {
    const double tol = dtype == at::kDouble ? 1e-12 : 1e-5;
    auto enc = load_case("wan21_vae_encode", dtype);
    torch::NoGradGuard no_grad;
    const at::Tensor& mean = enc.inputs.at("scale_mean");
    const at::Tensor& inv = enc.inputs.at("scale_inv_std");
    const at::Tensor chunked = enc.model->encode(enc.inputs.at("x"), mean, inv);
    const at::Tensor whole = enc.model->encode(enc.inputs.at("x"), mean, inv, WanVaeImpl::ChunkMode::Whole);
    EXPECT_LT(rel(chunked, whole), tol) << c10::toString(dtype);
    auto dec = load_case("wan21_vae_decode", dtype);
    const at::Tensor d1 = dec.model->decode(dec.inputs.at("z"), mean, inv);
    const at::Tensor d2 = dec.model->decode(dec.inputs.at("z"), mean, inv, WanVaeImpl::ChunkMode::Whole);
    EXPECT_EQ(d1.sizes(), d2.sizes());
    EXPECT_LT(rel(d1, d2), tol) << c10::toString(dtype);
  }
}

TEST(WanVae, UnitsRunOncePerChunkAndCheckpointExactly) {
  // Bitwise recompute of every unit (the check throws otherwise); the gradients agree to
  // rounding: a unit's input gradient sums its output's and its cache frames' contributions,
  // grouped differently when the unit is recomputed (float64, so the bound is tight).
  auto enc = load_case("wan21_vae_encode", at::kDouble);
  std::vector<VaeUnit*> units;
  for (const auto& m : enc.model->modules(/*include_self=*/false)) {
    if (auto* u = dynamic_cast<VaeUnit*>(m.get())) units.push_back(u);
  }
  // Encoder: 3 levels x 2 residual blocks + 3 resamples + 4th level's 2 blocks + 3 middle = 14;
  // decoder: 4 levels x 3 blocks + 3 resamples + 3 middle = 18.
  ASSERT_EQ(units.size(), 32u);
  const at::Tensor x = enc.inputs.at("x").requires_grad_(true);
  const at::Tensor& mean = enc.inputs.at("scale_mean");
  const at::Tensor& inv = enc.inputs.at("scale_inv_std");
  const at::Tensor probe = enc.inputs.at("probe");
  auto grads = [&]() {
    enc.model->zero_grad();
    x.mutable_grad() = at::Tensor();
    (enc.model->encode(x, mean, inv) * probe).sum().backward();
    std::vector<at::Tensor> g = {x.grad().clone()};
    for (const auto& p : enc.model->named_parameters()) {
      if (p.value().grad().defined()) g.push_back(p.value().grad().clone());
    }
    return g;
  };
  const auto plain = grads();
  std::vector<int> calls(units.size(), 0);
  for (size_t i = 0; i < units.size(); ++i) {
    auto hooks = std::make_shared<nn::ForwardHooks>();
    hooks->pre = [&calls, i](std::vector<at::Tensor>&) { ++calls[i]; };
    hooks->checkpoint = true;
    hooks->recompute_check = nn::RecomputeCheck::Bitwise;
    hooks->name = "unit " + std::to_string(i);
    units[i]->set_forward_hooks(hooks);
  }
  const auto ckpt = grads();
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_LT((plain[i] - ckpt[i]).abs().max().item<double>() / plain[i].abs().max().item<double>(), 1e-12) << i;
  }
  // 5 frames = 2 chunks: each encoder unit ran twice in forward and twice more recomputing.
  int encoder_units = 0;
  for (size_t i = 0; i < units.size(); ++i) {
    if (calls[i] == 0) continue;  // decoder units: not used by encode
    ++encoder_units;
    EXPECT_EQ(calls[i], 2) << "unit " << i;  // pre-hooks run in forward only
  }
  EXPECT_EQ(encoder_units, 14);
}

TEST(WanVae, RefusesFrameCountsOtherThanOnePlusFourK) {
  WanVaeConfig c;
  c.dim = 4;
  c.dim_mult = {1, 2};
  c.num_res_blocks = 1;
  c.temperal_downsample = {true};
  c.latent_mean.clear();
  c.latent_std.clear();
  c.z_dim = 2;
  WanVae m(c);
  const at::Tensor mean = at::zeros({2}), inv = at::ones({2});
  EXPECT_THROW(m->encode(at::zeros({1, 3, 4, 8, 8}), mean, inv), std::invalid_argument);
  EXPECT_THROW(m->encode(at::zeros({1, 3, 5, 7, 8}), mean, inv), std::invalid_argument);
  EXPECT_THROW(m->encode(at::zeros({1, 3, 5, 8, 8})), std::invalid_argument);  // no latent statistics for z_dim 2
  EXPECT_EQ(m->encode(at::zeros({1, 3, 9, 8, 8}), mean, inv).sizes(), at::IntArrayRef({1, 2, 5, 4, 4}));
}

TEST(WanVae, RunsWithBf16Parameters) {
  auto enc = load_case("wan21_vae_encode", at::kFloat);
  torch::NoGradGuard no_grad;
  const at::Tensor& mean = enc.inputs.at("scale_mean");
  const at::Tensor& inv = enc.inputs.at("scale_inv_std");
  const at::Tensor ref = enc.model->encode(enc.inputs.at("x"), mean, inv);
  enc.model->to(at::kBFloat16);
  const at::Tensor got = enc.model->encode(enc.inputs.at("x"), mean, inv);
  EXPECT_LT(rel(got.to(at::kFloat), ref), 0.05);
}
