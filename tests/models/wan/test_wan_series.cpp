// The wan series (Wan 2.1 as released) through the real binary on a DiffSynth folder the test
// makes (Debian's ffmpeg: small mp4 and png files; spm_train: a tiny SentencePiece model):
// the four strategies bitwise identical at W = 3 with accumulation (full and LoRA training,
// towers in the loop), exact resume, `zeroshard prepare` + training from the cache equal to the
// towers-in-the-loop run, sampling (mp4 + PNG strip), and the published sizes of the configs.
#include "data/image_transforms.h"
#include "models/wan/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/wan/";

// A folder with three mp4 clips (9, 12, 7 frames of different sizes: resized and cropped to
// 32 x 32, 5 frames each), two png images, metadata.csv files for both, and a tokenizer.
struct Folder {
  std::string dir, videos, images, spm;
};

const Folder& folder() {
  static Folder f = [] {
    Folder d;
    d.dir = make_temp_dir("wan_series");
    d.videos = d.dir + "/videos";
    d.images = d.dir + "/images";
    fs::create_directories(d.videos);
    fs::create_directories(d.images);
    const std::string q = " > /dev/null 2>&1";
    d.spm = train_tiny_spm(d.dir, kClipCaptionWords);
    const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ";
    run_ok(ff + "testsrc=size=48x40:rate=8 -frames:v 9 -pix_fmt yuv420p " + d.videos + "/a.mp4" + q);
    run_ok(ff + "mandelbrot=size=40x40:rate=8 -frames:v 12 -pix_fmt yuv420p " + d.videos + "/b.mp4" + q);
    run_ok(ff + "testsrc2=size=64x48:rate=8 -frames:v 7 -pix_fmt yuv420p " + d.videos + "/c.mp4" + q);
    run_ok(ff + "testsrc=size=40x36 -frames:v 1 " + d.images + "/x.png" + q);
    run_ok(ff + "rgbtestsrc=size=36x40 -frames:v 1 " + d.images + "/y.png" + q);
    std::ofstream(d.videos + "/metadata.csv") << "video,prompt\na.mp4,a video of the cat walking\n"
                                                 "b.mp4,red dog running on the beach\n"
                                                 "c.mp4,\"camera slowly pans, a green field\"\n";
    std::ofstream(d.images + "/metadata.csv") << "image,prompt\nx.png,blue sunset\ny.png,the dog on the field\n";
    return d;
  }();
  return f;
}

std::string towers_args(const std::string& config = "base.yaml") {
  return "--config " + kConfigs + config + " --set wan.dataset=" + folder().videos + " --set wan.tokenizer=" +
         folder().spm + " --set run.progress=false --set parallel.comm_timeout_s=120";
}

}  // namespace

TEST(WanSeries, FourStrategiesAgreeBitwiseForFullAndLoraTrainingAtThreeRanks) {
  ParityOptions o;
  o.small_model = false;
  o.final_shards = true;
  const std::string common =
      towers_args() + " --set train.steps=3 --set train.micro_batch_size=1 --set train.grad_accum=2"
                      " --set train.warmup_steps=1";
  expect_identical_strategies(common, 3, 3, "wan_full", o);
  const auto lora = expect_identical_strategies(
      common + " --set lora.rank=4 --set lora.alpha=4 --set lora.targets=q,k,v,o,ffn.0,ffn.2", 3, 3, "wan_lora", o);
  ASSERT_FALSE(lora.empty());
  // q, k, v, o of self- and cross-attention and ffn.0, ffn.2: 10 Linear layers in each of 2 blocks.
  const std::string log = read_text(lora[0].dir + "/rank0.log");
  EXPECT_NE(log.find("LoRA: rank 4 adapters on 20 Linear layers"), std::string::npos) << log;
}

TEST(WanSeries, ResumeFromAMidRunCheckpointIsExact) {
  expect_exact_resume(towers_args(), "wan_resume");
}

TEST(WanSeries, APreparedCacheTrainsAsTheTowersInTheLoopAndSamplingWritesClips) {
  const std::string cache = make_temp_dir("wan_cache") + "/cache";
  std::string out;
  const std::string prepare = std::string(ZS_BINARY) + " prepare --nproc 2 " + towers_args() +
                              " --set wan.cache=" + cache;
  ASSERT_EQ(run_command(prepare, &out), 0) << out;
  EXPECT_NE(out.find("cached 3 of 3 records"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(cache + "/index.json"));

  const std::string steps = " --set train.steps=3 --set train.grad_accum=2";
  TrainRun towers = train_series(towers_args() + steps, 2, "wan_towers");
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  TrainRun cached = train_series(towers_args() + steps + " --set wan.cache=" + cache, 2, "wan_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  // The same tensors reach the DiT (the towers ran one sample at a time both ways): bitwise.
  EXPECT_EQ(loss_texts(towers), loss_texts(cached));
  EXPECT_EQ(towers.metrics.back().count("towers_s"), 1u);

  // Sampling the cache-trained run: 2 Euler steps with guidance, one mp4 per clip, a PNG strip.
  const std::string png = cached.dir + "/strip.png";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " sample " + cached.dir +
                            " --nproc 2 --clips 2 --steps 2 --out " + png,
                        &out),
            0)
      << out;
  ASSERT_TRUE(fs::exists(png)) << out;
  for (int i = 0; i < 2; ++i) {
    const std::string mp4 = cached.dir + "/strip-" + std::to_string(i) + ".mp4";
    ASSERT_TRUE(fs::exists(mp4)) << out;
    data::FrameSampling s;
    s.num_frames = 81;
    EXPECT_EQ(data::load_clip(mp4, {32, 32}, s).frames.size(), 5u) << mp4;
  }
}

TEST(WanSeries, AFolderOfPngImagesTrainsWithTheTowersInTheLoop) {
  TrainRun r = train_series("--config " + kConfigs + "base.yaml --set wan.dataset=" + folder().images +
                                " --set wan.tokenizer=" + folder().spm + " --set train.steps=2 --set run.progress=false",
                            2, "wan_images");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.metrics.size(), 2u);
}

TEST(WanSeries, TheSizeConfigsHoldThePublishedParameterCounts) {
  // Wan2.1-T2V-1.3B: 1,418,996,800; -14B: 14,288,491,584 (the published counts, also the
  // architecture's arithmetic); counted on the model built without bytes.
  const std::pair<const char*, int64_t> sizes[] = {{"1.3b.yaml", 1418996800LL}, {"14b.yaml", 14288491584LL}};
  for (const auto& [file, count] : sizes) {
    const train::TrainConfig cfg = train::load_config(kConfigs + file, {"wan.cache=unused"});
    const auto& c = cfg.series_config<models::WanSeriesConfig>();
    nn::DeferredInit deferred;
    models::WanPipeline p(c, /*with_dit=*/true, /*with_towers=*/false);
    int64_t n = 0;
    for (const auto& t : p->parameters()) n += t.numel();
    EXPECT_EQ(n, count) << file;
  }
}

// seed-weights' default (--dtype released): Wan's towers as the release ships them, each one
// torch.save file at the folder's top that torch.load reads: the umT5 encoder in bf16, the VAE
// in float32.
TEST(WanSeries, SeedWeightsWritesTheTowersAsTheReleasedTorchSaveFiles) {
  const std::string out_dir = make_temp_dir("wan_released_pth") + "/weights";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " seed-weights --config " + kConfigs + "base.yaml --out " + out_dir +
                            " --only text_encoder --only vae",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("--set wan.text_encoder_from=" + out_dir + "/models_t5_umt5-xxl-enc-bf16.pth"), std::string::npos)
      << out;
  EXPECT_NE(out.find("--set wan.vae_from=" + out_dir + "/Wan2.1_VAE.pth"), std::string::npos) << out;
  ASSERT_EQ(run_command("/usr/bin/python3 -c \"import torch\nfor f in ['models_t5_umt5-xxl-enc-bf16', 'Wan2.1_VAE']:\n"
                        "  sd = torch.load('" + out_dir + "/' + f + '.pth')\n"
                        "  print(f, len(sd), sorted(set(str(v.dtype) for v in sd.values())))\"",
                        &out),
            0)
      << out;
  EXPECT_NE(out.find("models_t5_umt5-xxl-enc-bf16 "), std::string::npos) << out;
  EXPECT_NE(out.find(" ['torch.bfloat16']\nWan2.1_VAE "), std::string::npos) << out;
  EXPECT_NE(out.find(" ['torch.float32']\n"), std::string::npos) << out;
}

TEST(WanSeries, SeedWeightsInTheReleasedLayoutTrainInPlaceBitwiseAsTheSeededModel) {
  const std::string keys = expect_seeded_folders_train_as_seeded(
      towers_args("lora.yaml") + " --set train.micro_batch_size=1 --set train.warmup_steps=1", "wan_seed_weights");
  for (const std::string key : {"wan.dit_from=", "wan.text_encoder_from=", "wan.vae_from="}) {
    EXPECT_NE(keys.find(key), std::string::npos) << keys;
  }
}
