// The vae series: the chunked model against an independent PyTorch implementation of the whole
// clip, chunked == whole clip in-process and under every strategy at W = 2, the four strategies
// bitwise equal, and the series' config checks.
#include "data/shapes.h"
#include "io/safetensors.h"
#include "models/vae/series.h"
#include "models/vae/vae.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kReference = std::string("/usr/bin/python3 ") + ZS_SOURCE_DIR + "/tests/models/vae/reference_vae.py";

models::VaeConfig small_vae() {
  models::VaeConfig c;
  c.base_channels = 8;
  c.channel_mult = {1, 2, 2};
  c.temporal_down = {false, true};
  c.z_channels = 4;
  c.num_res_blocks = 1;
  c.kl_weight = 0.1;  // large, so a wrong KL gradient would show
  return c;
}

struct Pass {
  models::VaeOutput out;
  std::vector<std::pair<std::string, at::Tensor>> grads;
};

Pass run_pass(models::VideoVae& model, const at::Tensor& clip, const at::Tensor& noise, int64_t chunk) {
  model->zero_grad();
  Pass p;
  p.out = model->forward(clip, noise, chunk);
  p.out.loss.backward();
  for (const auto& item : model->named_parameters()) p.grads.emplace_back(item.key(), item.value().grad().clone());
  return p;
}

double max_rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-12, b.abs().max().item<double>());
}

// The small model trained by the multi-rank tests: 8/16/16 channels on 8 x 16 x 16 clips.
const std::string kSmallVae =
    "--config " + std::string(ZS_SOURCE_DIR) +
    "/configs/vae/base.yaml --set vae.base_channels=8 --set data.image_size=16 --set train.micro_batch_size=2"
    " --set train.grad_accum=2 --set run.progress=false --set parallel.comm_timeout_s=60";

}  // namespace

TEST(VaeReference, ChunkedForwardAndBackwardMatchAnIndependentPyTorchImplementation) {
  const models::VaeConfig c = small_vae();
  models::VideoVae model(c);
  model->reset_parameters(5);
  const at::Tensor clip = data::shape_clips(11, 0, 2, 8, 16);
  auto gen = nn::generator_for(3, "noise");
  const at::Tensor noise = at::randn({2, c.z_channels, 4, 4, 4}, gen, at::kFloat);

  // In-process first: every chunk size gives the whole clip's outputs and gradients.
  const Pass whole = run_pass(model, clip, noise, 0);
  for (int64_t chunk : {2, 4, 6}) {
    const Pass p = run_pass(model, clip, noise, chunk);
    EXPECT_LT(max_rel(p.out.recon, whole.out.recon), 1e-5) << "chunk " << chunk;
    EXPECT_LT(max_rel(p.out.mean, whole.out.mean), 1e-5) << "chunk " << chunk;
    EXPECT_LT(max_rel(p.out.logvar, whole.out.logvar), 1e-5) << "chunk " << chunk;
    for (size_t i = 0; i < p.grads.size(); ++i) {
      EXPECT_LT(max_rel(p.grads[i].second, whole.grads[i].second), 1e-4) << p.grads[i].first << " chunk " << chunk;
    }
  }

  // Then against PyTorch, which computes the whole clip without any cache.
  const Pass p = run_pass(model, clip, noise, 2);
  std::vector<io::TensorEntry> entries;
  std::vector<at::Tensor> values;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    entries.push_back({name, at::kFloat, t.sizes().vec()});
    values.push_back(t.detach().contiguous());
  };
  for (const auto& item : model->named_parameters()) add("param." + item.key(), item.value());
  for (const auto& [name, g] : p.grads) add("grad." + name, g);
  add("clip", clip);
  add("noise", noise);
  add("recon", p.out.recon);
  add("mean", p.out.mean);
  add("logvar", p.out.logvar);
  add("loss", p.out.loss);
  add("recon_loss", p.out.recon_loss);
  add("kl", p.out.kl);
  const nlohmann::json cfg = {{"base_channels", c.base_channels}, {"channel_mult", c.channel_mult},
                              {"temporal_down", c.temporal_down},   {"z_channels", c.z_channels},
                              {"num_res_blocks", c.num_res_blocks}, {"norm_eps", c.norm_eps},
                              {"kl_weight", c.kl_weight},           {"chunk_frames", 2}};
  const std::string path = make_temp_dir("vae_ref") + "/case.safetensors";
  io::SafetensorsWriter writer(path, entries, {{"config", cfg.dump()}});
  for (size_t i = 0; i < entries.size(); ++i) writer.write(entries[i].name, values[i]);
  writer.finish();
  std::string out;
  const int rc = run_command(kReference + " " + path, &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("vae reference:"), std::string::npos) << out;
  std::printf("%s", out.c_str());
}

TEST(Vae, FourStrategiesAgreeBitwiseAndChunkedEqualsWholeClipUnderEach) {
  // Chunks of 2 frames: every stage (a unit) runs 4 times per forward in the encoder, so its
  // gradient is complete only after 4 backward calls — under every strategy.
  const std::vector<std::string> strategies = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
  std::vector<TrainRun> runs;
  for (const std::string& s : strategies) {
    runs.push_back(train_series(kSmallVae + " --set train.steps=20 --set vae.chunk_frames=2 --set parallel.strategy=" + s,
                                2, "vae_" + s));
    ASSERT_EQ(runs.back().exit_code, 0) << s << "\n" << runs.back().output;
    ASSERT_EQ(runs.back().metrics.size(), 20u) << s;
    ASSERT_TRUE(runs.back().metrics[0].contains("recon_loss") && runs.back().metrics[0].contains("kl"));
  }
  for (size_t i = 1; i < runs.size(); ++i) EXPECT_EQ(loss_texts(runs[i]), loss_texts(runs[0])) << i;
  // Recomputing each stage in backward (the cache slots are the unit's inputs) changes no bit.
  const TrainRun ckpt = train_series(kSmallVae +
                                         " --set train.steps=20 --set vae.chunk_frames=2 --set train.activation_checkpointing=true"
                                         " --set debug.check_recompute=bitwise --set parallel.strategy=optim_grads_params",
                                     2, "vae_ckpt");
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.output;
  EXPECT_EQ(loss_texts(ckpt), loss_texts(runs[0]));
  EXPECT_LT(runs[0].metrics.back()["loss"].get<double>(), 0.5 * runs[0].metrics.front()["loss"].get<double>());

  // Reconstructions of held-out clips from the ZeRO-3 run's checkpoint: chunked over 2 ranks
  // under ZeRO-3 and whole on 1 rank without sharding give the same error; a PNG comes out.
  auto sample_mse = [&](const std::string& args, const std::string& png) {
    std::string out;
    const int rc = run_command(std::string(ZS_BINARY) + " sample " + runs[3].dir + " --out " + png + " " + args, &out);
    EXPECT_EQ(rc, 0) << out;
    const auto at = out.find("MSE ");
    EXPECT_NE(at, std::string::npos) << out;
    return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 4));
  };
  const double mse_chunked =
      sample_mse("--nproc 2 --strategy optim_grads_params --chunk-frames 2", runs[3].dir + "/chunked.png");
  const double mse_whole = sample_mse("--strategy no_shard --chunk-frames 0", runs[3].dir + "/whole.png");
  EXPECT_GT(mse_whole, 0.0);
  EXPECT_NEAR(mse_chunked, mse_whole, 1e-4 * mse_whole);
  std::ifstream png(runs[3].dir + "/chunked.png", std::ios::binary);
  char signature[8] = {};
  png.read(signature, 8);
  EXPECT_EQ(std::string(signature, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  // The whole clip at once: the same losses and gradient norms up to float rounding.
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string& s = strategies[i];
    const TrainRun whole =
        train_series(kSmallVae + " --set train.steps=3 --set vae.chunk_frames=0 --set parallel.strategy=" + s, 2,
                     "vae_whole_" + s);
    ASSERT_EQ(whole.exit_code, 0) << s << "\n" << whole.output;
    EXPECT_LT(max_rel_loss_diff(runs[i], whole), 1e-5) << s;
    for (size_t k = 0; k < 3; ++k) {
      const double a = runs[i].metrics[k]["grad_norm"].get<double>(), b = whole.metrics[k]["grad_norm"].get<double>();
      EXPECT_NEAR(a, b, 1e-4 * b) << s << " step " << k + 1;
    }
  }
}

TEST(Vae, KeysOfAnotherSeriesAndBadShapesAreRejected) {
  auto expect_error = [](const std::vector<std::string>& overrides, const std::string& needle) {
    try {
      train::load_config("", overrides);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"vae.z_channels=8"}, "vae.z_channels=8 applies to model.series: vae, flux, not llama");
  expect_error({"model.series=vae", "model.dim=64"}, "model.dim=64 applies to model.series: llama, moe, not vae");
  expect_error({"model.series=vae", "data.source=system_text"}, "data.source: 'system_text' is not allowed");
  expect_error({"model.series=vae", "data.source=shapes", "vae.temporal_down=true"},
               "vae.temporal_down has 1 entries (true); it needs one per downsampling, levels - 1 = 2");
  expect_error({"model.series=vae", "data.source=shapes", "vae.chunk_frames=3"}, "vae.chunk_frames (3) must be a multiple");
  expect_error({"model.series=vae", "data.source=shapes", "data.image_size=30"}, "data.image_size (30) must be a multiple");
  expect_error({"model.series=vae", "data.source=shapes", "vae.channel_mult=1,x"}, "not a comma-separated list of integers");
  // A YAML list reaches the key as its comma-joined text.
  const train::TrainConfig c = train::load_config(std::string(ZS_SOURCE_DIR) + "/configs/vae/medium.yaml", {});
  const auto& vae = c.series_config<models::VaeSeriesConfig>().vae;
  EXPECT_EQ(vae.channel_mult, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(vae.temporal_down, (std::vector<bool>{true, true}));
}
