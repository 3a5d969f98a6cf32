// The wan series: the DiT against an independent PyTorch implementation, and the pipeline
// (frozen text encoder + frozen causal video VAE from a file + DiT) bitwise equal under the
// four strategies for full and LoRA training, with the towers unchanged.
#include "io/safetensors.h"
#include "models/wan/wan.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kReference = std::string("/usr/bin/python3 ") + ZS_SOURCE_DIR + "/tests/models/wan/reference_wan.py";

// 8 x 16 x 16 clips -> 4 x 4 x 4 x 4 latents (chunks of 4 frames) -> 16 video tokens.
const std::string kSmallWan = "--config " + std::string(ZS_SOURCE_DIR) +
                              "/configs/wan/base.yaml --set data.image_size=16 --set vae.base_channels=8"
                              " --set wan.dim=48 --set wan.n_heads=2 --set wan.ffn_hidden=64 --set wan.text_dim=32"
                              " --set wan.text_ffn_hidden=64 --set train.micro_batch_size=2 --set train.grad_accum=2"
                              " --set train.steps=12 --set run.progress=false --set parallel.comm_timeout_s=60";

}  // namespace

TEST(WanReference, DiTForwardAndBackwardMatchAnIndependentPyTorchImplementation) {
  models::WanConfig c;
  c.dim = 48;
  c.n_heads = 2;
  c.layers = 2;
  c.ffn_hidden = 96;
  c.patch_size = 2;
  c.text.dim = 24;
  const int64_t C = 4;
  models::WanDiT dit(c, C);
  for (auto& item : dit->named_parameters()) nn::init_normal(item.value(), 5, item.key(), 0.1);
  auto gen = nn::generator_for(6, "inputs");
  const at::Tensor x0 = at::randn({2, C, 2, 4, 4}, gen, at::kFloat), noise = at::randn({2, C, 2, 4, 4}, gen, at::kFloat);
  const at::Tensor sigma = at::tensor({0.2f, 0.7f});
  const at::Tensor txt = at::randn({2, 5, c.text.dim}, gen, at::kFloat).requires_grad_(true);
  const at::Tensor s = sigma.view({-1, 1, 1, 1, 1});
  const at::Tensor pred = dit((1 - s) * x0 + s * noise, sigma, txt);
  const at::Tensor loss = (pred - (noise - x0)).pow(2).mean();
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
  add("pred", pred);
  add("loss", loss);
  add("grad_input.txt", txt.grad());
  const nlohmann::json cfg = {{"dim", c.dim},       {"n_heads", c.n_heads},     {"layers", c.layers},
                              {"ffn_hidden", c.ffn_hidden}, {"patch_size", c.patch_size}, {"latent_channels", C},
                              {"text_dim", c.text.dim},     {"rope_theta", c.rope_theta}};
  const std::string path = make_temp_dir("wan_ref") + "/case.safetensors";
  io::SafetensorsWriter writer(path, entries, {{"config", cfg.dump()}});
  for (size_t i = 0; i < entries.size(); ++i) writer.write(entries[i].name, values[i]);
  writer.finish();
  std::string out;
  EXPECT_EQ(run_command(kReference + " " + path, &out), 0) << out;
  EXPECT_NE(out.find("wan reference:"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(Wan, FourStrategiesAgreeBitwiseForFullAndLoraTrainingAndTheTowersStayFrozen) {
  const TrainRun vae = train_series("--config " + std::string(ZS_SOURCE_DIR) +
                                        "/configs/vae/base.yaml --set data.image_size=16 --set vae.base_channels=8"
                                        " --set train.steps=3 --set run.progress=false",
                                    2, "wan_vae_tower");
  ASSERT_EQ(vae.exit_code, 0) << vae.output;
  const std::string vae_file = vae.dir + "/vae.safetensors";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + vae.dir + " " + vae_file, &out), 0) << out;

  // Full training with the VAE from its file; then LoRA on the DiT so trained (the whole
  // pipeline from its export: its zero-initialized output projection has moved).
  std::string full_export;
  for (const std::string lora : {"", " --set lora.rank=4 --set lora.alpha=8 --set lora.targets=q,v"}) {
    const std::string source = lora.empty() ? " --set wan.vae_from=" + vae_file : " --set model.init_from=" + full_export;
    ParityOptions o;
    o.small_model = false;
    const auto runs = expect_identical_strategies(kSmallWan + source + lora, 2, 12, "wan", o);
    ASSERT_FALSE(HasFailure()) << lora;
    // Gradients and AdamW state only for the trainable part: far below the parameter bytes.
    const auto& m = runs[3].metrics.back();
    EXPECT_LT(m["mem_grads_bytes"].get<int64_t>(), m["mem_params_bytes"].get<int64_t>()) << m.dump();

    const std::string tuned = runs[3].dir + "/pipeline.safetensors";
    ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + runs[3].dir + " " + tuned, &out), 0) << out;
    io::SafetensorsFile before(vae_file), after(tuned);
    for (const auto& e : before.entries()) {
      EXPECT_TRUE(at::equal(after.read("vae." + e.name), before.read(e.name))) << e.name << " (frozen) changed";
    }
    if (lora.empty()) {
      // A clip from the held-out caption (3 Euler steps, chunked VAE decoding): the same frames
      // at W = 2 under ZeRO-3 as at W = 1 without sharding, up to a rounding step per pixel.
      std::string png[2];
      const char* how[2] = {"--nproc 2 --strategy optim_grads_params", "--strategy no_shard"};
      for (int k = 0; k < 2; ++k) {
        png[k] = runs[3].dir + "/clip" + std::to_string(k) + ".png";
        ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + runs[3].dir + " --clips 1 --steps 3 --out " +
                                  png[k] + " " + how[k], &out),
                  0)
            << out;
      }
      const PngDiff d = compare_pngs(png[0], png[1]);
      EXPECT_EQ(d.far, 0);
    } else {
      int adapters_b = 0;
      for (const auto& e : after.entries()) {
        if (e.name.find("lora_b") == std::string::npos) continue;
        ++adapters_b;
        EXPECT_GT(after.read(e.name).abs().max().item<float>(), 0.0f) << e.name << " did not train";
      }
      EXPECT_EQ(adapters_b, 2 * 2 * 2);  // q and v of self- and cross-attention in 2 blocks
    }
    full_export = tuned;
  }
}

TEST(Wan, ConfigErrorsNameTheKey) {
  auto expect_error = [](const std::vector<std::string>& overrides, const std::string& needle) {
    try {
      train::load_config(std::string(ZS_SOURCE_DIR) + "/configs/wan/base.yaml", overrides);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"wan.n_heads=3"}, "must give a head size that is a multiple of 6");
  expect_error({"wan.patch_size=3"}, "wan.patch_size (3) must divide the latent size 8");
  expect_error({"wan.vae_from=/nonexistent.safetensors"}, "wan.vae_from: file '/nonexistent.safetensors' does not exist");
  expect_error({"flux.dim=64"}, "flux.dim=64 applies to model.series: flux, not wan");
}
