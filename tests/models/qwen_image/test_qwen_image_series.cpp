// The qwen_image series (Qwen-Image as released) through the real binary on a DiffSynth image
// folder the test makes (Debian's ffmpeg: png and jpg images of different sizes, resized and
// centre-cropped to 32 x 32) with the tiny Qwen tokenizer of the qwen3 tests: the prompt template
// and its dropped head, the flow-matching schedule against DiffSynth's formula run by torch, the
// four strategies bitwise identical at W = 3 with accumulation (full and LoRA training, towers in
// the loop), exact resume, `zeroshard prepare` + training from the cache equal to the towers-in-
// the-loop run, true-CFG sampling to PNG, falling loss on the images, and the published size of
// 20b.yaml.
#include "io/image_codec.h"
#include "models/qwen_image/schedule.h"
#include "models/qwen_image/series.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
using namespace zeroshard::models::qwen_image;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/qwen_image/";
const std::string kTokenizer = std::string(ZS_SOURCE_DIR) + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

// Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv.
const std::string& folder() {
  static const std::string dir = make_captioned_images("qwen_image_series");
  return dir;
}

std::string towers_args(const std::string& config = "base.yaml") {
  return "--config " + kConfigs + config + " --set qwen_image.dataset=" + folder() + " --set qwen_image.tokenizer=" +
         kTokenizer + " --set run.progress=false --set parallel.comm_timeout_s=120";
}

std::vector<int64_t> values(const at::Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.size(1); ++i) v.push_back(t[0][i].item<int64_t>());
  return v;
}

}  // namespace

TEST(QwenImageSeries, ThePromptIsQwenImagesTemplateWithItsHeadDropped) {
  const train::TrainConfig cfg =
      train::load_config(kConfigs + "base.yaml", {"qwen_image.cache=unused", "qwen_image.tokenizer=" + kTokenizer});
  const auto& c = cfg.series_config<QwenImageSeriesConfig>();
  QwenImagePipeline p(c, /*with_dit=*/false, /*with_towers=*/true);
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(kTokenizer);
  const std::string head =
      "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
      "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n";
  // base.yaml's drop_idx is the head's length with this tokenizer: what is kept is the prompt and
  // the template's tail, as the released tokenizer's 34 keeps them.
  ASSERT_EQ(static_cast<int64_t>(tok.encode(head).size()), c.drop_idx);
  const std::string tail = "a red cat<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int64_t> ids = values(p->prompt_ids("a red cat"));
  std::vector<int64_t> expect;
  for (int32_t id : tok.encode(head + tail)) expect.push_back(id);
  EXPECT_EQ(ids, expect);
  std::vector<int64_t> kept(ids.begin() + c.drop_idx, ids.end()), expect_kept;
  for (int32_t id : tok.encode(tail)) expect_kept.push_back(id);
  EXPECT_EQ(kept, expect_kept);
  // max_sequence_length: at most text_len rows after the drop.
  const train::TrainConfig short_cfg = train::load_config(
      kConfigs + "base.yaml", {"qwen_image.cache=unused", "qwen_image.tokenizer=" + kTokenizer, "qwen_image.text_len=3"});
  QwenImagePipeline q(short_cfg.series_config<QwenImageSeriesConfig>(), false, true);
  EXPECT_EQ(q->prompt_ids("a red cat").size(1), c.drop_idx + 3);
  // A drop that leaves nothing is refused by name.
  const train::TrainConfig bad = train::load_config(
      kConfigs + "base.yaml", {"qwen_image.cache=unused", "qwen_image.tokenizer=" + kTokenizer, "qwen_image.drop_idx=500"});
  QwenImagePipeline r(bad.series_config<QwenImageSeriesConfig>(), false, true);
  try {
    r->prompt_ids("a red cat");
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("qwen_image.drop_idx"), std::string::npos) << e.what();
  }
  // Batches pad the kept rows with zeros and a 0 mask (_get_qwen_prompt_embeds).
  const auto [states, mask] = pad_states({at::ones({2, 4}), at::full({3, 4}, 2.0)});
  EXPECT_EQ(states.sizes(), at::IntArrayRef({2, 3, 4}));
  EXPECT_TRUE(at::equal(mask, at::tensor({1, 1, 0, 1, 1, 1}, at::kLong).view({2, 3})));
  EXPECT_EQ(states[0][2].abs().sum().item<float>(), 0.0f);
}

TEST(QwenImageSeries, TheScheduleIsDiffSynthsQwenImageTemplateBitForBit) {
  // DiffSynth's set_timesteps_qwen_image and set_training_weight, run by torch (python3-torch) in
  // float32: training (1000 steps, mu 0.8) and sampling (4 steps, mu of a 32x48 latent's 384 tokens).
  const std::string dir = make_temp_dir("qwen_image_schedule");
  const std::string script = dir + "/schedule.py";
  std::ofstream(script) << R"(import math, sys, torch
def qwen_image(n, mu):
    sigmas = torch.linspace(1.0, 0.0, n + 1)[:-1]
    sigmas = math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1))
    one_minus_z = 1 - sigmas
    scale_factor = one_minus_z[-1] / (1 - 0.02)
    sigmas = 1 - (one_minus_z / scale_factor)
    return sigmas, sigmas * 1000
s, t = qwen_image(1000, 0.8)
y = torch.exp(-2 * ((t - 1000 / 2) / 1000) ** 2)
y = y - y.min()
w = y * (1000 / y.sum())
m = 384 * ((0.9 - 0.5) / (8192 - 256)) + (0.5 - (0.9 - 0.5) / (8192 - 256) * 256)
s4, t4 = qwen_image(4, m)
torch.cat([s, t, w, s4, t4]).numpy().tofile(sys.argv[1])
)";
  const std::string out = dir + "/ref.f32";
  run_ok("/usr/bin/python3 " + script + " " + out);
  std::ifstream in(out, std::ios::binary);
  std::vector<float> ref(3 * 1000 + 2 * 4);
  in.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * sizeof(float)));
  ASSERT_TRUE(in) << out;
  const at::Tensor expect = at::from_blob(ref.data(), {static_cast<int64_t>(ref.size())}, at::kFloat).clone();

  const auto train = qwen_image_schedule(1000, std::exp(kTrainingMu), 0.02, true);
  const auto sample = qwen_image_schedule(4, std::exp(dynamic_shift_mu(16 * 24)), 0.02, false);
  const at::Tensor got = at::cat({train.sigmas, train.timesteps, train.weights, sample.sigmas, sample.timesteps});
  ASSERT_EQ(got.sizes(), expect.sizes());
  EXPECT_TRUE(at::equal(got, expect)) << "max |diff| " << (got - expect).abs().max().item<float>();
  EXPECT_EQ(train.sigmas[0].item<float>(), 1.0f);
  EXPECT_NEAR(train.sigmas[999].item<float>(), 0.02f, 1e-6);
  // The config's training shift is exp(0.8), DiffSynth's mu.
  const train::TrainConfig cfg = train::load_config(kConfigs + "base.yaml", {"qwen_image.cache=unused"});
  EXPECT_EQ(cfg.series_config<QwenImageSeriesConfig>().io.shift, std::exp(0.8));
}

TEST(QwenImageSeries, TrueCfgRescalesEachTokenToTheConditionalNorm) {
  // QwenImagePipeline: comb = uncond + g (cond - uncond), then comb * |cond| / |comb| with the
  // norms over the packed features of each token: every token keeps comb's direction and takes
  // cond's length.
  at::Generator g = nn::generator_for(7, "true_cfg");
  const at::Tensor cond = at::randn({2, 6, 64}, g, at::kDouble), uncond = at::randn({2, 6, 64}, g, at::kDouble);
  const at::Tensor out = true_cfg(cond, uncond, 4.0);
  const at::Tensor comb = uncond + 4.0 * (cond - uncond);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 6; ++t) {
      EXPECT_NEAR(out[b][t].norm().item<double>(), cond[b][t].norm().item<double>(), 1e-12);
      const double cosine = (out[b][t] * comb[b][t]).sum().item<double>() /
                            (out[b][t].norm().item<double>() * comb[b][t].norm().item<double>());
      EXPECT_NEAR(cosine, 1.0, 1e-12);
    }
  }
}

TEST(QwenImageSeries, FourStrategiesAgreeBitwiseForFullAndLoraTrainingAtThreeRanks) {
  ParityOptions o;
  o.small_model = false;
  o.final_shards = true;
  const std::string common = towers_args() +
                             " --set train.steps=3 --set train.micro_batch_size=1 --set train.grad_accum=2"
                             " --set train.warmup_steps=1";
  expect_identical_strategies(common, 3, 3, "qwen_image_full", o);
  const std::string lora_common = towers_args("lora.yaml") +
                                  " --set train.steps=3 --set train.micro_batch_size=1 --set train.grad_accum=2"
                                  " --set train.warmup_steps=1";
  const auto lora = expect_identical_strategies(lora_common, 3, 3, "qwen_image_lora", o);
  ASSERT_FALSE(lora.empty());
  // DiffSynth's 12 targets in each of the 2 blocks.
  const std::string log = read_text(lora[0].dir + "/rank0.log");
  EXPECT_NE(log.find("LoRA: rank 4 adapters on 24 Linear layers"), std::string::npos) << log;
}

TEST(QwenImageSeries, ResumeFromAMidRunCheckpointIsExact) {
  expect_exact_resume(towers_args(), "qwen_image_resume");
}

TEST(QwenImageSeries, APreparedCacheTrainsAsTheTowersInTheLoopAndSamplingWritesAPng) {
  const std::string cache = make_temp_dir("qwen_image_cache") + "/cache";
  std::string out;
  const std::string prepare =
      std::string(ZS_BINARY) + " prepare --nproc 2 " + towers_args() + " --set qwen_image.cache=" + cache;
  ASSERT_EQ(run_command(prepare, &out), 0) << out;
  EXPECT_NE(out.find("cached 4 of 4 items"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(cache + "/index.json"));

  // Micro-batches of 2: prompts of different lengths padded with their mask both ways.
  const std::string steps = " --set train.steps=3 --set train.grad_accum=2";
  TrainRun towers = train_series(towers_args() + steps, 2, "qwen_image_towers");
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  TrainRun cached = train_series(towers_args() + steps + " --set qwen_image.cache=" + cache, 2, "qwen_image_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  // The same tensors reach the DiT (the towers ran one sample at a time both ways): bitwise.
  EXPECT_EQ(loss_texts(towers), loss_texts(cached));
  EXPECT_EQ(towers.metrics.back().count("towers_s"), 1u);
  EXPECT_EQ(cached.metrics.back().count("towers_s"), 0u);

  // Sampling the cache-trained run (towers seeded as prepare seeded them): 3 Euler steps with true
  // CFG 4, two 32x32 images side by side with a 2-pixel gap.
  const std::string png = cached.dir + "/two.png";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + cached.dir + " --nproc 2 --clips 2 --steps 3 --out " + png,
                        &out),
            0)
      << out;
  ASSERT_TRUE(fs::exists(png)) << out;
  EXPECT_NE(out.find("guidance 4"), std::string::npos) << out;
  const io::RgbImage img = io::decode_image_file(png).image;
  EXPECT_EQ(img.width, 66);
  EXPECT_EQ(img.height, 32);
}

TEST(QwenImageSeries, AFolderOfImagesTrainsWithFallingLoss) {
  // Plain MSE (no timestep weights) so that losses compare across steps; 100 steps over the 4
  // images, towers in the loop. Seen here (base.yaml): 1.47 over the first 10 steps, 0.94 over
  // steps 46-55, 0.87 over the last 10.
  TrainRun r = train_series(towers_args() + " --set train.steps=100 --set qwen_image.timestep_weighting=false"
                                            " --set train.log_every=100",
                            2, "qwen_image_falling");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.metrics.size(), 100u);
  const double first = mean_loss(r, 0, 10), middle = mean_loss(r, 45, 10), last = mean_loss(r, 90, 10);
  EXPECT_LT(middle, first) << "steps 1-10 " << first << ", 46-55 " << middle;
  EXPECT_LT(last, 0.8 * first) << "steps 1-10 " << first << ", 91-100 " << last;
}

TEST(QwenImageSeries, TrainsOnAspectRatioBucketsAtThreeRanks) {
  // Wide and tall buckets (latents 4x8 and 8x4: non-square patch grids, centred RoPE rows and
  // columns of different extents); one bucket per step, no_shard and optim_grads_params bitwise.
  ParityOptions o;
  o.small_model = false;
  o.strategies = {"no_shard", "optim_grads_params"};
  const auto runs = expect_identical_strategies(
      towers_args() + " --set qwen_image.buckets=32x64,64x32 --set train.steps=3 --set train.micro_batch_size=1", 3, 3,
      "qwen_image_buckets", o);
  ASSERT_EQ(runs.size(), 2u);
}

TEST(QwenImageSeries, TrainsInBf16MixedPrecisionCloseToFloat32) {
  // 20b.yaml's mixed_precision.param_dtype: bf16 (the DiT runs on bf16 inputs, the loss in
  // float32): three steps, the losses within 1% of the float32 run's.
  const std::string common = towers_args() + " --set train.steps=3";
  TrainRun fp32 = train_series(common, 2, "qwen_image_fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  TrainRun bf16 = train_series(common + " --set mixed_precision.param_dtype=bf16", 2, "qwen_image_bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  EXPECT_LT(max_rel_loss_diff(fp32, bf16), 1e-2);
  EXPECT_NE(loss_texts(fp32), loss_texts(bf16));  // bf16 did run in bf16
}

TEST(QwenImageSeries, TheSizeConfigHoldsThePublishedParameterCount) {
  // Qwen/Qwen-Image: 20,430,401,088 DiT parameters (test_qwen_image_sizes.cpp: the bf16 byte count
  // of the released transformer / 2), counted on the series' pipeline built from
  // configs/qwen_image/20b.yaml without bytes; with the towers, Qwen2.5-VL-7B's language model
  // without lm_head (qwen3's published sizes) and the Wan 2.1 VAE (126,892,531).
  const train::TrainConfig cfg = train::load_config(kConfigs + "20b.yaml", {"qwen_image.cache=unused"});
  const auto& c = cfg.series_config<QwenImageSeriesConfig>();
  nn::DeferredInit deferred;
  QwenImagePipeline p(c, /*with_dit=*/true, /*with_towers=*/false);
  int64_t n = 0;
  for (const auto& t : p->parameters()) n += t.numel();
  EXPECT_EQ(n, 40860802176LL / 2);
  QwenImagePipeline towers(c, /*with_dit=*/false, /*with_towers=*/true);
  EXPECT_EQ(towers->text_encoder->num_params(), 7070619136LL);  // qwen3::published_sizes()' text tower
  EXPECT_EQ(towers->vae->config().num_params(), 126892531);
}
