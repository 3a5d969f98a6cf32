// What the flux2 series (FLUX.2 as released) alone is checked for, with the tiny Qwen3 tokenizer of
// the qwen3 tests: the prompt as Flux2KleinPipeline encodes it, DiffSynth's training and BFL's
// sampling schedules, dev.yaml's Mistral Small 3.1 tower at its published size, a toy FLUX.2 [dev]
// with that tower (its prompt template; prepare -> train -> sample, towers in the loop and from the
// cache) and the DiT from a released-layout file. The checks every image series shares (strategy parity,
// resume, prepare + sampling, falling loss, the published sizes of klein_4b.yaml, klein_9b.yaml
// and dev.yaml) are its row in tests/models/diffusion/test_image_series.cpp.
#include "models/flux2/mistral_text.h"
#include "models/flux2/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/flux2/";
const std::string kTokenizer = std::string(ZS_SOURCE_DIR) + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

// Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv.
const std::string& folder() {
  static const std::string dir = make_captioned_images("flux2_series");
  return dir;
}

std::string towers_args() {
  return "--config " + kConfigs + "base.yaml --set flux2.dataset=" + folder() + " --set flux2.tokenizer=" + kTokenizer +
         " --set run.progress=false --set parallel.comm_timeout_s=120";
}

// A byte-level tokenizer.json with Mistral's control tokens, for a FLUX.2 [dev] at toy size: the
// tiny Qwen3 tokenizer's BPE plus <unk>, <s>, </s>, [INST], [/INST], [SYSTEM_PROMPT],
// [/SYSTEM_PROMPT] and <pad> as added tokens 559-566 (the template's tokens; the released file's
// ranks are checked by tests/text/mistral_parity.mjs). Returns its path (567 ids).
const std::string& tiny_mistral_tokenizer() {
  static const std::string path = [] {
    nlohmann::json t = nlohmann::json::parse(read_text(kTokenizer));
    int32_t id = 559;
    for (const char* name : {"<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "<pad>"}) {
      t["added_tokens"].push_back({{"id", id++}, {"content", name}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    const std::string file = make_temp_dir("flux2_mistral_tok") + "/tokenizer.json";
    std::ofstream(file) << t.dump();
    return file;
  }();
  return path;
}

// The toy FLUX.2 [dev]: base.yaml's sizes with the Mistral tower, the guidance embedding and
// 512 prompt slots (FLUX.2's system message alone takes most of them here).
std::string dev_args() {
  return "--config " + kConfigs + "base.yaml --set flux2.dataset=" + folder() + " --set flux2.tokenizer=" +
         tiny_mistral_tokenizer() + " --set flux2.text_tower=mistral --set flux2.text_vocab=567" +
         " --set flux2.text_len=512 --set flux2.guidance_embeds=true --set run.progress=false" +
         " --set parallel.comm_timeout_s=120";
}

}  // namespace

TEST(Flux2Series, DevsPromptIsMistralsTemplateWithFlux2sSystemMessageLeftPadded) {
  // Flux2Pipeline (dev): apply_chat_template([system, user]) -> "<s>[SYSTEM_PROMPT]...[/INST]",
  // padding="max_length" on the left, truncation=True (the first text_len tokens kept).
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(tiny_mistral_tokenizer());
  const std::vector<int32_t> expect = tok.encode(models::flux2::mistral_chat_text("a red cat"));
  ASSERT_EQ(expect.front(), *tok.token_to_id("<s>"));
  EXPECT_EQ(std::count(expect.begin(), expect.end(), *tok.token_to_id("[INST]")), 1);
  EXPECT_EQ(expect.back(), *tok.token_to_id("[/INST]"));
  const int64_t n = static_cast<int64_t>(expect.size()), len = n + 7;
  const auto [ids, mask] = models::flux2::mistral_prompt_ids(tok, "a red cat", len);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{1, len}));
  const int64_t pad = *tok.token_to_id("<pad>");
  for (int64_t i = 0; i < len; ++i) {
    const bool real = i >= 7;
    EXPECT_EQ(ids[0][i].item<int64_t>(), real ? expect[static_cast<size_t>(i - 7)] : pad) << i;
    EXPECT_EQ(mask[0][i].item<int64_t>(), real ? 1 : 0) << i;
  }
  const auto [cut, cut_mask] = models::flux2::mistral_prompt_ids(tok, "a red cat", 5);
  EXPECT_EQ(cut_mask.sum().item<int64_t>(), 5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(cut[0][i].item<int64_t>(), expect[static_cast<size_t>(i)]) << i;
}

TEST(Flux2Series, DevWithItsMistralTowerPreparesTrainsAsFromItsCacheAndSamples) {
  // prepare (the Mistral tower and the VAE sharded over 2 ranks) -> train with the towers in the
  // loop and from the cache: the same losses, bitwise -> sample the cache-trained run.
  const std::string cache = make_temp_dir("flux2_dev_cache") + "/cache";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " prepare --nproc 2 " + dev_args() + " --set flux2.cache=" + cache, &out),
            0)
      << out;
  EXPECT_NE(out.find("cached 4 of 4 records"), std::string::npos) << out;
  const std::string steps = " --set train.steps=3 --set train.grad_accum=2";
  TrainRun towers = train_series(dev_args() + steps, 2, "flux2_dev_towers");
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  TrainRun cached = train_series(dev_args() + steps + " --set flux2.cache=" + cache, 2, "flux2_dev_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(loss_texts(towers), loss_texts(cached));
  const std::string png = cached.dir + "/dev.png";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + cached.dir + " --nproc 2 --clips 2 --steps 3 --out " + png,
                        &out),
            0)
      << out;
  EXPECT_TRUE(std::filesystem::exists(png)) << out;
}

TEST(Flux2Series, ThePromptIsQwen3sChatTemplateWithoutThinkingPaddedToTextLen) {
  // apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
  // enable_thinking=False): the empty think block; then padding="max_length", truncation=True.
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(kTokenizer);
  const auto [ids, mask] = models::flux2::prompt_ids(tok, "a red cat", 64);
  const std::vector<int32_t> expect =
      tok.encode("<|im_start|>user\na red cat<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  ASSERT_LT(expect.size(), 64u);
  ASSERT_EQ(ids.sizes(), (std::vector<int64_t>{1, 64}));
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{1, 64}));
  const int64_t pad = *tok.pad_id();
  EXPECT_EQ(pad, *tok.token_to_id("<|endoftext|>"));  // tokenizer_config's pad_token
  for (int64_t i = 0; i < 64; ++i) {
    const bool real = i < static_cast<int64_t>(expect.size());
    EXPECT_EQ(ids[0][i].item<int64_t>(), real ? expect[static_cast<size_t>(i)] : pad) << i;
    EXPECT_EQ(mask[0][i].item<int64_t>(), real ? 1 : 0) << i;
  }
  const auto [cut, cut_mask] = models::flux2::prompt_ids(tok, "a red cat", 5);
  EXPECT_EQ(cut.size(1), 5);
  EXPECT_EQ(cut_mask.sum().item<int64_t>(), 5);
}

TEST(Flux2Series, TheSchedulesAreDiffSynthsFlux2Ones) {
  // Training: linspace(1, 1/1000, 1000), sigma' = e^0.8 / (e^0.8 + 1/sigma - 1) (flux2.shift =
  // e^0.8 in the configs); the weights sum to 1000. Sampling at 1024x1024 (4096 tokens), 50 steps:
  // compute_empirical_mu, and the schedule's first sigma is 1, its last above 0.
  const train::TrainConfig cfg = train::load_config(kConfigs + "klein_4b.yaml", {"flux2.cache=unused"});
  const double shift = cfg.series_config<models::flux2::Flux2SeriesConfig>().io.shift;
  EXPECT_EQ(shift, std::exp(0.8));
  const auto s = models::flux2::flux2_training_schedule(shift);
  ASSERT_EQ(s.sigmas.size(0), 1000);
  const at::Tensor base = at::linspace(1.0, 0.001, 1000, at::kFloat);
  EXPECT_TRUE(at::equal(s.sigmas, std::exp(0.8) / (std::exp(0.8) + (1 / base - 1))));
  EXPECT_TRUE(at::equal(s.timesteps, s.sigmas * 1000));
  EXPECT_NEAR(s.weights.sum().item<double>(), 1000.0, 1e-2);
  // BFL's empirical mu: the two linear fits in the sequence length, interpolated in the steps.
  const double m200 = 0.00016927 * 4096 + 0.45666666, m10 = 8.73809524e-05 * 4096 + 1.89833333;
  EXPECT_DOUBLE_EQ(models::flux2::compute_empirical_mu(4096, 50), (m200 - m10) / 190.0 * 50 + m200 - 200.0 * (m200 - m10) / 190.0);
  EXPECT_DOUBLE_EQ(models::flux2::compute_empirical_mu(5000, 4), 0.00016927 * 5000 + 0.45666666);
  const auto q = models::flux2::flux2_sampling_schedule(4, 0.8);
  EXPECT_EQ(q.sigmas[0].item<float>(), 1.0f);
  EXPECT_GT(q.sigmas[3].item<float>(), 0.0f);
}

TEST(Flux2Series, DevRunsMistralSmall31AsItsTextTowerAtItsPublishedSize) {
  // dev.yaml: Mistral Small 3.1's language model (no q/k norm, no biases, RoPE theta 1e9),
  // hidden_states 10/20/30 -> the DiT's 15360-wide context; the pipeline with its towers builds
  // it with exactly the published parameter count (lm_head not built: the pipeline reads states).
  const train::TrainConfig cfg = train::load_config(kConfigs + "dev.yaml", {"flux2.cache=unused"});
  const auto& c = cfg.series_config<models::flux2::Flux2SeriesConfig>();
  EXPECT_EQ(c.dit_config().joint_attention_dim, 15360);
  const models::qwen3::QwenConfig text = c.text_config();
  const models::qwen3::QwenConfig release = models::flux2::mistral_small_3_1();
  EXPECT_EQ(text.model_type, "mistral");
  EXPECT_FALSE(text.qk_norm);
  EXPECT_FALSE(text.qkv_bias || text.o_bias);
  EXPECT_EQ(text.rope_theta, 1e9);
  EXPECT_EQ(text.rms_norm_eps, 1e-5);
  EXPECT_EQ(text.num_params(/*lm_head=*/false), 22901314560LL);
  EXPECT_EQ(release.num_params(/*lm_head=*/false), 22901314560LL);
  EXPECT_EQ(release.num_params(/*lm_head=*/true), 23572403200LL);
  nn::DeferredInit deferred;
  models::flux2::Flux2Pipeline p(c, false, true);
  int64_t n = 0;
  for (const auto& t : p->text_encoder->parameters()) n += t.numel();
  EXPECT_EQ(n, 22901314560LL);
}

TEST(Flux2Series, TheDiTLoadsAReleasedLayoutFileByItsOwnNames) {
  // flux2.dit_from: the flux2_dit reference case's weights (DiffSynth Flux2DiT = the released
  // diffusers names) train as they are on a config of the case's shapes; a config of other
  // shapes is refused naming the tensor.
  const std::string file = std::string(ZS_SOURCE_DIR) + "/tests/fixtures/flux2_dit/model.safetensors";
  const std::string args = towers_args() + " --set train.steps=1 --set flux2.dit_from=" + file +
                           " --set flux2.vae_latent_channels=32";  // 128 DiT channels after the patchify
  TrainRun ok = train_series(args + " --set flux2.head_dim=32 --set flux2.rope_axes=8,8,8,8", 1, "flux2_dit_from");
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  TrainRun bad = train_series(args, 1, "flux2_dit_from_bad");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("time_guidance_embed.timestep_embedder.linear_1.weight"), std::string::npos) << bad.output;
}
