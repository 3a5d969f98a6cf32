// The flux series: the DiT against an independent PyTorch implementation, the pipeline (frozen
// text encoder + frozen VAE + DiT) bitwise equal under the four strategies for full and LoRA
// training, the towers unchanged and costing only their parameter shard, and its config checks.
#include "io/safetensors.h"
#include "models/flux/flux.h"
#include "models/flux/series.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kReference = std::string("/usr/bin/python3 ") + ZS_SOURCE_DIR + "/tests/models/flux/reference_flux.py";

// 16x16 images -> 4x4x4 latents -> 4 patches; 48 caption tokens; 8/16/16-channel VAE tower.
const std::string kSmallFlux = "--config " + std::string(ZS_SOURCE_DIR) +
                               "/configs/flux/base.yaml --set data.image_size=16 --set vae.base_channels=8"
                               " --set flux.dim=32 --set flux.text_dim=32 --set flux.text_ffn_hidden=64"
                               " --set train.micro_batch_size=2 --set train.grad_accum=2 --set train.steps=20"
                               " --set run.progress=false --set parallel.comm_timeout_s=60";


}  // namespace

TEST(FluxReference, DiTForwardAndBackwardMatchAnIndependentPyTorchImplementation) {
  models::FluxConfig c;
  c.dim = 32;
  c.n_heads = 4;
  c.double_blocks = 2;
  c.single_blocks = 1;
  c.mlp_ratio = 2;
  c.patch_size = 2;
  c.text.dim = 24;
  const int64_t C = 4;
  models::FluxDiT dit(c, C);
  // Every weight random (flux_init zeroes the modulations, which would hide them).
  for (auto& item : dit->named_parameters()) nn::init_normal(item.value(), 9, item.key(), 0.1);
  auto gen = nn::generator_for(4, "inputs");
  const at::Tensor x0 = at::randn({2, C, 8, 8}, gen, at::kFloat), noise = at::randn({2, C, 8, 8}, gen, at::kFloat);
  const at::Tensor sigma = at::tensor({0.3f, 0.85f});
  const at::Tensor txt = at::randn({2, 6, c.text.dim}, gen, at::kFloat).requires_grad_(true);
  const at::Tensor pooled = at::randn({2, c.text.dim}, gen, at::kFloat).requires_grad_(true);
  const at::Tensor s = sigma.view({-1, 1, 1, 1});
  const at::Tensor pred = dit((1 - s) * x0 + s * noise, sigma, txt, pooled);
  const at::Tensor loss = models::flow_matching_loss(dit, x0, noise, sigma, txt, pooled);
  EXPECT_TRUE(at::equal(loss, (pred - (noise - x0)).pow(2).mean()));
  loss.backward();

  std::vector<io::TensorEntry> entries;
  std::vector<at::Tensor> values;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    entries.push_back({name, at::kFloat, t.sizes().vec()});
    values.push_back(t.detach().contiguous());
  };
  for (const auto& item : dit->named_parameters()) {
    add("param." + item.key(), item.value());
    add("grad." + item.key(), item.value().grad());
  }
  add("x0", x0);
  add("noise", noise);
  add("sigma", sigma);
  add("txt", txt);
  add("pooled", pooled);
  add("pred", pred);
  add("loss", loss);
  add("grad_input.txt", txt.grad());
  add("grad_input.pooled", pooled.grad());
  const nlohmann::json cfg = {{"dim", c.dim},           {"n_heads", c.n_heads},       {"double_blocks", c.double_blocks},
                              {"single_blocks", c.single_blocks}, {"mlp_ratio", c.mlp_ratio}, {"patch_size", c.patch_size},
                              {"latent_channels", C},   {"text_dim", c.text.dim},     {"rope_theta", c.rope_theta}};
  const std::string path = make_temp_dir("flux_ref") + "/case.safetensors";
  io::SafetensorsWriter writer(path, entries, {{"config", cfg.dump()}});
  for (size_t i = 0; i < entries.size(); ++i) writer.write(entries[i].name, values[i]);
  writer.finish();
  std::string out;
  EXPECT_EQ(run_command(kReference + " " + path, &out), 0) << out;
  EXPECT_NE(out.find("flux reference:"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(Flux, FourStrategiesAgreeBitwiseForFullAndLoraTrainingAndTheTowersStayFrozen) {
  // The VAE tower from a file (a short image-VAE run's export), the text tower seeded.
  const TrainRun vae = train_series("--config " + std::string(ZS_SOURCE_DIR) +
                                        "/configs/vae/image.yaml --set data.image_size=16 --set vae.base_channels=8"
                                        " --set train.steps=3 --set run.progress=false",
                                    2, "flux_vae_tower");
  ASSERT_EQ(vae.exit_code, 0) << vae.output;
  const std::string vae_file = vae.dir + "/vae.safetensors";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + vae.dir + " " + vae_file, &out), 0) << out;

  // Full training of the DiT with the VAE from its file; then LoRA on the DiT so trained (the
  // whole pipeline from its export: model.init_from), its base frozen as well.
  std::string full_export;
  for (const std::string lora : {"", " --set lora.rank=4 --set lora.alpha=8 --set lora.targets=qkv,linear1"}) {
    const std::string source = lora.empty() ? " --set flux.vae_from=" + vae_file : " --set model.init_from=" + full_export;
    ParityOptions o;
    o.small_model = false;
    const auto runs = expect_identical_strategies(kSmallFlux + source + lora, 2, 20, "flux", o);
    ASSERT_FALSE(HasFailure()) << lora;
    // Sampling (Euler steps + the VAE decoder) gives the same picture at W = 2 under ZeRO-3 as
    // at W = 1 without sharding, up to a rounding step of a few pixels (1 vs 2 intra-op threads).
    std::string png[2];
    const char* how[2] = {"--nproc 2 --strategy optim_grads_params", "--strategy no_shard"};
    for (int k = 0; k < 2; ++k) {
      png[k] = runs[3].dir + "/samples" + std::to_string(k) + ".png";
      ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + runs[3].dir + " --clips 2 --steps 4 --out " + png[k] +
                                " " + how[k], &out),
                0)
          << out;
    }
    const PngDiff d = compare_pngs(png[0], png[1]);
    EXPECT_EQ(d.far, 0) << lora;
    EXPECT_GE(d.differ, 0) << "sizes differ" << lora;
    EXPECT_LT(d.differ, 200) << lora;
    if (lora.empty()) {
      // Flow-matching losses are noisy (a random sigma per image): compare the ends' means.
      auto mean_loss = [&](size_t from) {
        double sum = 0;
        for (size_t k = from; k < from + 5; ++k) sum += runs[0].metrics[k]["loss"].get<double>();
        return sum / 5;
      };
      EXPECT_LT(mean_loss(15), mean_loss(0));
    }

    // Per rank under optim_grads_params: every parameter's shard (towers included), but
    // gradients and AdamW moments of the trainable ones only.
    train::TrainConfig cfg = train::load_config(
        std::string(ZS_SOURCE_DIR) + "/configs/flux/base.yaml",
        {"data.image_size=16", "vae.base_channels=8", "flux.dim=32", "flux.text_dim=32", "flux.text_ffn_hidden=64"});
    int64_t total = 0, trainable = 0;
    {
      nn::DeferredInit deferred;
      const auto& fc = cfg.series_config<models::FluxSeriesConfig>();
      models::FluxPipeline p(fc.flux, fc.vae);
      if (!lora.empty()) nn::apply_lora(*p->dit, {4, 8.0, {"qkv", "linear1"}});
      for (const auto& item : p->named_parameters()) {
        total += item.value().numel();
        const bool learns = lora.empty() ? item.key().rfind("dit.", 0) == 0 : nn::is_lora_parameter(item.key());
        trainable += learns ? item.value().numel() : 0;
      }
    }
    const auto& m = runs[3].metrics.back();
    const double params = static_cast<double>(m["mem_params_bytes"].get<int64_t>());
    const double grads = static_cast<double>(m["mem_grads_bytes"].get<int64_t>());
    const double optim = static_cast<double>(m["mem_optim_bytes"].get<int64_t>());
    EXPECT_NEAR(params, 4.0 * total / 2, 0.01 * 4.0 * total / 2) << m.dump();
    EXPECT_NEAR(grads, 4.0 * trainable / 2, 0.02 * 4.0 * trainable / 2 + 256) << m.dump();
    EXPECT_NEAR(optim, 8.0 * trainable / 2, 0.02 * 8.0 * trainable / 2 + 512) << m.dump();

    // The VAE tower is bitwise the file after 20 steps (and, under LoRA, so is the base DiT).
    const std::string tuned = runs[3].dir + "/pipeline.safetensors";
    ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + runs[3].dir + " " + tuned, &out), 0) << out;
    io::SafetensorsFile before(vae_file), after(tuned);
    int vae_tensors = 0;
    for (const auto& e : before.entries()) {
      EXPECT_TRUE(at::equal(after.read("vae." + e.name), before.read(e.name))) << e.name << " (frozen) changed";
      ++vae_tensors;
    }
    EXPECT_GT(vae_tensors, 20);
    if (!lora.empty()) {
      io::SafetensorsFile base(full_export);
      for (const auto& e : base.entries()) {
        EXPECT_TRUE(at::equal(after.read(e.name), base.read(e.name))) << e.name << " (frozen base) changed";
      }
      int adapters_b = 0;  // B starts at zero: it moved if the adapters trained
      for (const auto& e : after.entries()) {
        if (e.name.find("lora_b") == std::string::npos) continue;
        ++adapters_b;
        EXPECT_GT(after.read(e.name).abs().max().item<float>(), 0.0f) << e.name << " did not train";
      }
      EXPECT_EQ(adapters_b, 2 * 2 + 2);  // qkv of both streams in 2 double blocks + linear1 of 2 single blocks
    }
    full_export = tuned;
  }
}

TEST(Flux, ConfigErrorsNameTheKey) {
  auto expect_error = [](const std::vector<std::string>& overrides, const std::string& needle) {
    try {
      train::load_config(std::string(ZS_SOURCE_DIR) + "/configs/flux/base.yaml", overrides);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"vae.temporal_down=false,true"}, "the flux pipeline's VAE codes single images");
  expect_error({"flux.n_heads=3"}, "must give a head size that is a multiple of 4");
  expect_error({"flux.patch_size=3"}, "flux.patch_size (3) must divide the latent size 8");
  expect_error({"flux.vae_from=/nonexistent.safetensors"}, "flux.vae_from: file '/nonexistent.safetensors' does not exist");
  expect_error({"data.frames=4"}, "data.frames=4 applies to model.series: vae, not flux");
  try {
    train::load_config("", {"flux.dim=64"});
    ADD_FAILURE() << "flux keys under llama must be rejected";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("flux.dim=64 applies to model.series: flux, not llama"), std::string::npos)
        << e.what();
  }
}
