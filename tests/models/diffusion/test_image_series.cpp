// The image series (z_image, flux1, flux2, qwen_image: the released models, at a reduced size)
// through the real binary, as one table: a row per series, and one parameterized test per check
// that every series passes alike (ggml's test-backend-ops style), so adding a series is adding a
// row. The checks:
//  - the four strategies bitwise identical at W = 3 with accumulation (full training, and LoRA
//    with the number of Linear layers the adapters go on), towers in the loop;
//  - exact resume from a mid-run checkpoint;
//  - `zeroshard prepare` + training from the cache bitwise equal to the towers-in-the-loop run,
//    and sampling the cache-trained run to a PNG with the series' guidance;
//  - a folder of images trains with falling loss;
//  - the published sizes' DiT parameter counts on the pipeline built without bytes.
// The data: a DiffSynth folder the test makes (make_captioned_images: png and jpg images of
// different sizes and aspect ratios, resized and centre-cropped to 32 x 32) and the row's text
// inputs (the tiny Qwen3 tokenizer of the qwen3 tests; flux1: a tiny SentencePiece model and a
// pooled-vector file). What one series alone has (its prompt template, schedules, released-file
// layouts, refusals, buckets, towers' sizes) is in that series' own test file.
//
// Test names: Shared/ImageSeries.<check>/<the series' own test suite>, e.g.
// Shared/ImageSeries.ResumeFromAMidRunCheckpointIsExact/Flux2Series, so that `ctest -R Flux2Series`
// (README, docs/benchmarks.md) runs the series' own checks and its row's alike.
#include "io/image_codec.h"
#include "models/diffusion/cond_cache.h"
#include "models/flux/flux1_series.h"
#include "models/flux/flux1_test_data.h"
#include "models/flux2/series.h"
#include "models/qwen_image/series.h"
#include "models/z_image/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <ostream>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kQwen3Tokenizer =
    std::string(ZS_SOURCE_DIR) + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

std::string config_path(const std::string& series, const std::string& config) {
  return std::string(ZS_SOURCE_DIR) + "/configs/" + series + "/" + config;
}

// The DiT parameters of the series' pipeline built from configs/<series>/<config> without bytes.
template <class Pipeline, class SeriesConfig>
int64_t dit_params(const std::string& series, const std::string& config) {
  const train::TrainConfig cfg = train::load_config(config_path(series, config), {series + ".cache=unused"});
  nn::DeferredInit deferred;
  Pipeline p(cfg.series_config<SeriesConfig>(), /*with_dit=*/true, /*with_towers=*/false);
  int64_t n = 0;
  for (const auto& t : p->parameters()) n += t.numel();
  return n;
}

struct PublishedSize {
  std::string config;
  int64_t dit_params;
};

struct ImageSeriesRow {
  std::string name;            // model.series: the keys' prefix, the configs' folder
  std::string suite;           // the series' own test suite (e.g. Flux2Series): the test names' suffix
  std::string (*text_args)();  // --set arguments naming the row's text inputs (tokenizer, ...)
  // LoRA parity: the config and the --set arguments of the LoRA runs, and the number of Linear
  // layers of base.yaml's DiT the adapters go on (rank0.log's report).
  std::string lora_config, lora_sets;
  int lora_layers;
  std::string cached_sets;  // more --set arguments for the cache-trained run (keys only sampling reads)
  std::string guidance;     // `sample`'s report of base.yaml's guidance_scale
  int64_t (*dit_params)(const std::string& series, const std::string& config);
  std::vector<PublishedSize> sizes;
};

void PrintTo(const ImageSeriesRow& row, std::ostream* os) { *os << row.name; }

const std::vector<ImageSeriesRow>& rows() {
  static const std::vector<ImageSeriesRow> table = {
      // Z-Image: LoRA on the 7 Linear layers of each of 4 blocks (1 noise refiner, 1 context
      // refiner, 2 main). Falling loss seen here: ~1.26 over the first 10 steps, ~0.87 over the
      // last 10 (and ~0.81 after 150). Size: Tongyi-MAI/Z-Image-Turbo, 6,154,908,736 DiT
      // parameters (test_z_image_sizes.cpp).
      {"z_image", "ZImageSeries", [] { return " --set z_image.tokenizer=" + kQwen3Tokenizer; },
       "base.yaml", " --set lora.rank=4 --set lora.alpha=4 --set lora.targets=to_q,to_k,to_v,to_out.0,w1,w2,w3", 28,
       "", "guidance 5",
       &dit_params<models::z_image::ZImagePipeline, models::z_image::ZImageSeriesConfig>,
       {{"6b.yaml", 12309817472LL / 2}}},
      // FLUX.1: LoRA on 10 Linear layers in the double block (qkv, proj, 2 MLP, mod of each
      // stream), 3 in each of the 2 single blocks (linear1, linear2, modulation.lin). The cached
      // run sets true_cfg_scale (the negative prompt "" is in the pooled file), which only the
      // sampler reads. Falling loss seen here: ~1.27 over the first 10 steps, ~0.96 over steps
      // 46-55, ~0.92 over the last 10 (small.yaml, 200 steps: ~1.10 over the first 20, ~0.08 over
      // the last 20). Sizes: black-forest-labs FLUX.1-dev / FLUX.1-schnell flux1-*.safetensors
      // (test_flux_sizes.cpp).
      {"flux1", "Flux1Series", &flux1_text_args,
       "base.yaml",
       " --set lora.rank=4 --set lora.alpha=4 --set lora.targets="
       "qkv,proj,img_mlp.0,img_mlp.2,txt_mlp.0,txt_mlp.2,lin,linear1,linear2",
       16, " --set flux1.true_cfg_scale=2", "guidance 3.5",
       &dit_params<models::flux::Flux1Pipeline, models::flux::Flux1SeriesConfig>,
       {{"dev.yaml", 11901408320LL}, {"schnell.yaml", 11891178560LL}}},
      // FLUX.2 klein: lora.yaml's targets, 12 Linear layers in each of 2 double blocks (to_q/k/v,
      // to_out.0, add_q/k/v_proj, to_add_out, ff and ff_context linear_in / linear_out) and 2 in
      // each of 2 single blocks. Falling loss seen here: 1.32 over the first 10 steps, 0.79 over
      // steps 46-55, 0.68 over the last 10. Sizes: the released transformer files' element counts
      // (test_flux2_sizes.cpp).
      {"flux2", "Flux2Series", [] { return " --set flux2.tokenizer=" + kQwen3Tokenizer; },
       "lora.yaml", "", 28,
       "", "guidance 4",
       &dit_params<models::flux2::Flux2Pipeline, models::flux2::Flux2SeriesConfig>,
       {{"klein_4b.yaml", 3875544576LL}, {"klein_9b.yaml", 9078581248LL}, {"dev.yaml", 32223281152LL}}},
      // Qwen-Image: lora.yaml's targets, DiffSynth's 12 in each of the 2 blocks. Falling loss seen
      // here: 1.47 over the first 10 steps, 0.94 over steps 46-55, 0.87 over the last 10. Size:
      // Qwen/Qwen-Image, 20,430,401,088 DiT parameters (test_qwen_image_sizes.cpp: the bf16 byte
      // count of the released transformer / 2).
      {"qwen_image", "QwenImageSeries", [] { return " --set qwen_image.tokenizer=" + kQwen3Tokenizer; },
       "lora.yaml", "", 24,
       "", "guidance 4",
       &dit_params<models::qwen_image::QwenImagePipeline, models::qwen_image::QwenImageSeriesConfig>,
       {{"20b.yaml", 40860802176LL / 2}}},
  };
  return table;
}

class ImageSeries : public ::testing::TestWithParam<ImageSeriesRow> {
 protected:
  const std::string& series() const { return GetParam().name; }

  // Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv, made once per process.
  const std::string& folder() const {
    static std::map<std::string, std::string> made;
    auto it = made.find(series());
    if (it == made.end()) it = made.emplace(series(), make_captioned_images(series() + "_series")).first;
    return it->second;
  }

  // Training with the towers in the loop on the folder.
  std::string towers_args(const std::string& config = "base.yaml") const {
    return "--config " + config_path(series(), config) + " --set " + series() + ".dataset=" + folder() +
           GetParam().text_args() + " --set run.progress=false --set parallel.comm_timeout_s=120";
  }

  // The parity runs: 3 steps of micro-batch 1 with accumulation 2 at W = 3.
  static constexpr const char* kParitySteps =
      " --set train.steps=3 --set train.micro_batch_size=1 --set train.grad_accum=2 --set train.warmup_steps=1";
  static ParityOptions parity_options() {
    ParityOptions o;
    o.small_model = false;
    o.final_shards = true;
    return o;
  }
};

TEST_P(ImageSeries, FourStrategiesAgreeBitwiseForFullTrainingAtThreeRanks) {
  expect_identical_strategies(towers_args() + kParitySteps, 3, 3, series() + "_full", parity_options());
}

TEST_P(ImageSeries, FourStrategiesAgreeBitwiseForLoraTrainingAtThreeRanks) {
  const ImageSeriesRow& row = GetParam();
  const auto lora = expect_identical_strategies(towers_args(row.lora_config) + kParitySteps + row.lora_sets, 3, 3,
                                                series() + "_lora", parity_options());
  ASSERT_FALSE(lora.empty());
  const std::string log = read_text(lora[0].dir + "/rank0.log");
  EXPECT_NE(log.find("LoRA: rank 4 adapters on " + std::to_string(row.lora_layers) + " Linear layers"),
            std::string::npos)
      << log;
}

TEST_P(ImageSeries, ResumeFromAMidRunCheckpointIsExact) {
  expect_exact_resume(towers_args(), series() + "_resume");
}

TEST_P(ImageSeries, APreparedCacheTrainsAsTheTowersInTheLoopAndSamplingWritesAPng) {
  const std::string cache = make_temp_dir(series() + "_cache") + "/cache", cache_key = " --set " + series() + ".cache=";
  std::string out;
  const std::string prepare = std::string(ZS_BINARY) + " prepare --nproc 2 " + towers_args() + cache_key + cache;
  ASSERT_EQ(run_command(prepare, &out), 0) << out;
  EXPECT_NE(out.find("cached 4 of 4 records"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(cache + "/index.json"));
  // The per-item report: each item's source size, the bucket it went to and its prompt's tokens.
  for (const auto& item : models::diffusion::read_json_file(cache + "/index.json").at("items")) {
    EXPECT_GT(item.value("prompt_tokens", int64_t{0}), 0) << item.dump();
    EXPECT_TRUE(item.contains("source") && item.contains("bucket")) << item.dump();
  }
  EXPECT_NE(out.find("row 0 a.png: bucket 0, prompt_tokens "), std::string::npos) << out;
  EXPECT_NE(out.find("source 40x36"), std::string::npos) << out;
  EXPECT_NE(out.find("bucket 0: 4 items"), std::string::npos) << out;
  // train --dry-run reads the same items, with the towers in the loop and from the cache alike,
  // and starts no rank.
  for (const std::string& source : {std::string(), cache_key + cache}) {
    ASSERT_EQ(run_command(std::string(ZS_BINARY) + " train --dry-run --nproc 2 " + towers_args() + source, &out), 0)
        << out;
    EXPECT_NE(out.find("dry run: model.series " + series() + ", 2 ranks"), std::string::npos) << out;
    EXPECT_NE(out.find("training reads 4 of 4 records from " + (source.empty() ? folder() + " (towers in the loop)"
                                                                               : cache + " (a prepared cache)")),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("row 3 d.png: bucket 0, prompt_tokens "), std::string::npos) << out;
    EXPECT_NE(out.find("source 64x48"), std::string::npos) << out;
  }

  // Micro-batches of 2 (prompts of different lengths, padded with their masks where the series
  // has them, both ways). The run's config keeps the text inputs for sampling; the cache-trained
  // run reads none of them (nor builds the towers).
  const std::string steps = " --set train.steps=3 --set train.grad_accum=2";
  TrainRun towers = train_series(towers_args() + steps, 2, series() + "_towers");
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  TrainRun cached =
      train_series(towers_args() + steps + cache_key + cache + GetParam().cached_sets, 2, series() + "_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  // The same tensors reach the DiT (the towers ran one sample at a time both ways): bitwise.
  EXPECT_EQ(loss_texts(towers), loss_texts(cached));
  EXPECT_EQ(towers.metrics.back().count("towers_s"), 1u);
  EXPECT_EQ(cached.metrics.back().count("towers_s"), 0u);
  // The cache's float32 latents and states into a bf16 DiT with LoRA, as the real-size LoRA runs
  // train (docs/benchmarks.md): the series casts them to the DiT's compute dtype.
  TrainRun bf16 = train_series(towers_args(GetParam().lora_config) + steps + cache_key + cache + GetParam().lora_sets +
                                   " --set mixed_precision.param_dtype=bf16",
                               2, series() + "_cached_bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  ASSERT_EQ(bf16.metrics.size(), 3u);
  for (const auto& m : bf16.metrics) EXPECT_TRUE(std::isfinite(m.at("loss").get<double>())) << m.dump();

  // Sampling the cache-trained run (towers seeded as prepare seeded them): 3 Euler steps with the
  // series' guidance (FLUX.1: the embedded guidance and true CFG; the others: true CFG), two 32x32
  // images side by side with a 2-pixel gap.
  const std::string png = cached.dir + "/two.png";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + cached.dir + " --nproc 2 --clips 2 --steps 3 --out " + png,
                        &out),
            0)
      << out;
  ASSERT_TRUE(fs::exists(png)) << out;
  EXPECT_NE(out.find(GetParam().guidance), std::string::npos) << out;
  const io::RgbImage img = io::decode_image_file(png).image;
  EXPECT_EQ(img.width, 66);
  EXPECT_EQ(img.height, 32);
}

TEST_P(ImageSeries, AFolderOfImagesTrainsWithFallingLoss) {
  // Plain MSE (no timestep weights) so that losses compare across steps; 100 steps over the 4
  // images, towers in the loop (what each series' loss was here: the comment on its row).
  TrainRun r = train_series(towers_args() + " --set train.steps=100 --set " + series() +
                                ".timestep_weighting=false --set train.log_every=100",
                            2, series() + "_falling");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(r.metrics.size(), 100u);
  const double first = mean_loss(r, 0, 10), middle = mean_loss(r, 45, 10), last = mean_loss(r, 90, 10);
  EXPECT_LT(middle, first) << "steps 1-10 " << first << ", 46-55 " << middle;
  EXPECT_LT(last, 0.8 * first) << "steps 1-10 " << first << ", 91-100 " << last;
}

TEST_P(ImageSeries, TheSizeConfigsHoldThePublishedParameterCounts) {
  ASSERT_FALSE(GetParam().sizes.empty());
  for (const auto& [config, count] : GetParam().sizes) {
    EXPECT_EQ(GetParam().dit_params(series(), config), count) << config;
  }
}

INSTANTIATE_TEST_SUITE_P(Shared, ImageSeries, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<ImageSeriesRow>& info) { return info.param.suite; });

}  // namespace
