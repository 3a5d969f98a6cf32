// What the qwen_image series (Qwen-Image as released) alone is checked for, with the tiny Qwen
// tokenizer of the qwen3 tests: the prompt template and its dropped head, the flow-matching
// schedule against DiffSynth's formula run by torch, true CFG's per-token rescale, wide and tall
// buckets at three ranks, bf16 mixed precision, and the published sizes of 20b.yaml's towers. The
// checks every image series shares (strategy parity, resume, prepare + true-CFG sampling, falling
// loss, the DiT's published size) are its row in tests/models/diffusion/test_image_series.cpp.
#include "models/qwen_image/schedule.h"
#include "models/qwen_image/series.h"
#include "nn/init.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
using namespace zeroshard::models::qwen_image;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/qwen_image/";
const std::string kTokenizer = std::string(ZS_SOURCE_DIR) + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

// Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv.
const std::string& folder() {
  static const std::string dir = make_captioned_images("qwen_image_series");
  return dir;
}

std::string towers_args() {
  return "--config " + kConfigs + "base.yaml --set qwen_image.dataset=" + folder() + " --set qwen_image.tokenizer=" +
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

TEST(QwenImageSeries, TheSizeConfigsTowersHoldThePublishedParameterCounts) {
  // The towers of the series' pipeline built from configs/qwen_image/20b.yaml without bytes:
  // Qwen2.5-VL-7B's language model without lm_head (qwen3's published sizes) and the Wan 2.1 VAE
  // (126,892,531). The DiT's 20,430,401,088: the qwen_image row of test_image_series.cpp.
  const train::TrainConfig cfg = train::load_config(kConfigs + "20b.yaml", {"qwen_image.cache=unused"});
  const auto& c = cfg.series_config<QwenImageSeriesConfig>();
  nn::DeferredInit deferred;
  QwenImagePipeline towers(c, /*with_dit=*/false, /*with_towers=*/true);
  EXPECT_EQ(towers->text_encoder->num_params(), 7070619136LL);  // qwen3::published_sizes()' text tower
  EXPECT_EQ(towers->vae->config().num_params(), 126892531);
}
