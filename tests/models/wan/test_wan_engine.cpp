// The released-layout Wan models under the sharding engine, in one process (W = 1): the DiT
// built without bytes (DeferredInit) and materialized by ZeRO-3 from a diffusers-named file
// through the name map computes what the directly loaded model computes; the frozen VAE, its
// blocks ZeRO-3 units gathered once per chunk (and recomputed under activation checkpointing),
// encodes as the unsharded one.
#include "io/safetensors.h"
#include "models/wan/dit.h"
#include "models/wan/vae.h"
#include "nn/name_map.h"
#include "zeroshard/comm.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::models::wan;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/";

nlohmann::json config_of(const std::string& c) {
  std::ifstream in(kFixtures + c + "/config.json");
  return nlohmann::json::parse(in);
}

std::map<std::string, at::Tensor> read_all(const std::string& path) {
  const io::SafetensorsFile f(path);
  std::map<std::string, at::Tensor> out;
  for (const auto& e : f.entries()) out[e.name] = f.read(e.name);
  return out;
}

template <class M>
void load_into(M& model, const std::map<std::string, at::Tensor>& weights) {
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) p.value().copy_(weights.at(p.key()));
}

}  // namespace

TEST(WanEngine, DeferredDiTMaterializesFromADiffusersFileUnderZero3) {
  const auto cfg = WanDiTConfig::from_json(config_of("wan21_dit_t2v"), "wan21_dit_t2v");
  const auto original = read_all(kFixtures + "wan21_dit_t2v/model.safetensors");
  const auto inputs = read_all(kFixtures + "wan21_dit_t2v/inputs.safetensors");
  const nn::NameMap map = dit_diffusers_name_map();
  const fs::path dir = fs::temp_directory_path() / ("zs_wan_engine_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "diffusion_pytorch_model.safetensors").string();
  {
    const auto theirs = map.to_theirs(original);
    std::vector<io::TensorEntry> entries;
    for (const auto& [k, v] : theirs) entries.push_back({k, at::kBFloat16, v.sizes().vec()});  // as released: bf16
    io::SafetensorsWriter w(file, entries);
    for (const auto& [k, v] : theirs) w.write(k, v);
    w.finish();
  }
  // The direct model holds the same bf16-rounded values.
  WanModel direct(cfg);
  std::map<std::string, at::Tensor> rounded;
  for (const auto& [k, v] : original) rounded[k] = v.to(at::kBFloat16).to(at::kFloat);
  load_into(direct, rounded);

  WanModel deferred{nullptr};
  {
    nn::DeferredInit scope;
    deferred = WanModel(cfg);
  }
  ShardOptions o(Strategy::OptimGradsParams);
  o.param_source = nn::name_mapped_param_source(file, map);
  auto sharded = fully_shard(deferred.ptr(), make_local_communicator(), o);
  sharded->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) {
    EXPECT_TRUE(t.equal(rounded.at(name))) << name;
  });

  const at::Tensor t = inputs.at("t").clone().requires_grad_(true);
  const at::Tensor a = direct->forward({inputs.at("x")}, t, {inputs.at("context")}, 72)[0];
  const at::Tensor b = deferred->forward({inputs.at("x")}, t, {inputs.at("context")}, 72)[0];
  EXPECT_TRUE(a.equal(b));
  const at::Tensor probe = inputs.at("probe");
  (a * probe).sum().backward();
  double direct_sq = 0;
  for (const auto& p : direct->parameters()) direct_sq += p.grad().pow(2).sum().item<double>();
  sharded->backward((b * probe).sum());
  const double norm = sharded->finish_gradients(0.0);
  EXPECT_NEAR(norm, std::sqrt(direct_sq), 1e-6 * std::sqrt(direct_sq));
  fs::remove_all(dir);
}

TEST(WanEngine, FrozenVaeBlocksAreUnitsGatheredPerChunk) {
  const auto cfg = WanVaeConfig::from_json(config_of("wan21_vae_encode"), "wan21_vae_encode");
  const auto weights = read_all(kFixtures + "wan21_vae_encode/model.safetensors");
  const auto inputs = read_all(kFixtures + "wan21_vae_encode/inputs.safetensors");
  const at::Tensor& mean = inputs.at("scale_mean");
  const at::Tensor& inv = inputs.at("scale_inv_std");
  const at::Tensor& probe = inputs.at("probe");
  WanVae direct(cfg);
  load_into(direct, weights);
  for (auto& p : direct->parameters()) p.set_requires_grad(false);
  const at::Tensor x0 = inputs.at("x").clone().requires_grad_(true);
  const at::Tensor expect = direct->encode(x0, mean, inv);
  (expect * probe).sum().backward();
  for (bool checkpoint : {false, true}) {
    WanVae model(cfg);
    load_into(model, weights);
    for (auto& p : model->parameters()) p.set_requires_grad(false);  // a frozen tower
    ShardOptions o(Strategy::OptimGradsParams);
    o.activation_checkpointing = checkpoint;
    o.recompute_check = nn::RecomputeCheck::Bitwise;
    auto sharded = fully_shard(model.ptr(), make_local_communicator(), o);
    size_t units = 0;
    for (const auto& b : sharded->flat_buffers()) units += b.unit != "<root>" ? 1 : 0;
    EXPECT_EQ(units, 32u);  // every residual, attention and resample block of encoder and decoder
    const at::Tensor x = inputs.at("x").clone().requires_grad_(true);
    const at::Tensor got = model->encode(x, mean, inv);  // 2 chunks: each unit gathered twice
    EXPECT_TRUE(got.equal(expect.detach())) << "checkpointing " << checkpoint;
    sharded->backward((got * probe).sum());  // recomputes the units when checkpointing
    const double rel = (x.grad() - x0.grad()).abs().max().item<double>() / x0.grad().abs().max().item<double>();
    EXPECT_LT(rel, 1e-5) << "checkpointing " << checkpoint;  // sums regrouped: rounding only
  }
}
