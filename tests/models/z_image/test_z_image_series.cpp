// What the z_image series (Z-Image as released) alone is checked for, with the tiny Qwen3 tokenizer
// of the qwen3 tests: the prompt as ZImagePipeline renders it, aspect-ratio buckets (one per step
// whatever W; prepared buckets train as the towers in the loop, also into a bf16 DiT; skip mode
// with the towers in the loop) and the DiT from a released-layout file. The checks every image
// series shares (strategy parity, resume, prepare + sampling, falling loss, published sizes) are
// its row in tests/models/diffusion/test_image_series.cpp.
#include "models/diffusion/image_series.h"
#include "models/z_image/prompt.h"
#include "models/z_image/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/z_image/";
const std::string kTokenizer = std::string(ZS_SOURCE_DIR) + "/tests/models/qwen3/data/tiny_tokenizer/tokenizer.json";

// Four images (three png, one jpg; 40x36 to 64x48) and their metadata.csv.
const std::string& folder() {
  static const std::string dir = make_captioned_images("z_image_series");
  return dir;
}

std::string towers_args() {
  return "--config " + kConfigs + "base.yaml --set z_image.dataset=" + folder() + " --set z_image.tokenizer=" +
         kTokenizer + " --set run.progress=false --set parallel.comm_timeout_s=120";
}

}  // namespace

TEST(ZImageSeries, ThePromptIsQwen3sChatTemplateAsZImagePipelineRendersIt) {
  // apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
  // enable_thinking=True): no <think> block; the ids are those of the whole rendered text.
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(kTokenizer);
  const at::Tensor ids = models::z_image::prompt_ids(tok, "a red cat", 512);
  const std::vector<int32_t> expect = tok.encode("<|im_start|>user\na red cat<|im_end|>\n<|im_start|>assistant\n");
  ASSERT_EQ(ids.size(1), static_cast<int64_t>(expect.size()));
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(ids[0][static_cast<int64_t>(i)].item<int64_t>(), expect[i]) << i;
  EXPECT_EQ(ids[0][0].item<int64_t>(), 557);  // <|im_start|> of the tiny tokenizer
  // truncation=True at max_sequence_length.
  EXPECT_EQ(models::z_image::prompt_ids(tok, "a red cat", 5).size(1), 5);
}

TEST(ZImageSeries, BucketedBatchesComeFromOneBucketPerStepWhateverTheWorldSize) {
  // Six images of three aspect ratios; buckets square, wide (32 x 64) and tall (64 x 32).
  const std::string d = make_temp_dir("z_image_buckets") + "/images";
  fs::create_directories(d);
  const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ", q = " > /dev/null 2>&1";
  const std::pair<const char*, const char*> files[] = {{"a.png", "80x40"},  {"b.png", "40x80"}, {"c.jpg", "48x48"},
                                                       {"d.png", "100x48"}, {"e.png", "40x90"}, {"f.png", "36x40"}};
  std::string csv = "image,prompt\n";
  for (const auto& [name, size] : files) {
    run_ok(ff + "testsrc=size=" + std::string(size) + " -frames:v 1 " + d + "/" + name + q);
    csv += std::string(name) + ",a test card " + size + "\n";
  }
  std::ofstream(d + "/metadata.csv") << csv;
  const std::string buckets = "32x32,32x64,64x32";
  const train::TrainConfig cfg =
      train::load_config(kConfigs + "base.yaml", {"z_image.dataset=" + d, "z_image.buckets=" + buckets});
  const models::diffusion::ImageData data(cfg.series_config<models::z_image::ZImageSeriesConfig>().io, "z_image",
                                         "zeroshard z_image cache 1", {}, 7);
  const int64_t expect_bucket[] = {1, 2, 0, 1, 2, 0};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(data.bucket_of(i), expect_bucket[i]) << files[i].first;
  EXPECT_EQ(data.size_of(0), std::make_pair(int64_t{32}, int64_t{64}));

  // 8 samples per step: micro-batch 2 at W = 1, 2, 4 with accumulation 4, 2, 1. Rank r's sample
  // numbers are GeneratedSampleTask::first_index's: (step * accum + micro) * mb * W + r * mb + i.
  const int64_t mb = 2, G = 8, steps = 24;
  std::vector<std::vector<int64_t>> reference;
  std::set<int64_t> seen_buckets;
  for (const int W : {1, 2, 4}) {
    const int64_t accum = G / (mb * W);
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<int64_t> items;
      for (int r = 0; r < W; ++r) {
        for (int64_t m = 0; m < accum; ++m) {
          for (int64_t i = 0; i < mb; ++i) items.push_back(data.item_of((s * accum + m) * mb * W + r * mb + i, G));
        }
      }
      for (int64_t it : items) EXPECT_EQ(data.bucket_of(it), data.bucket_of(items[0])) << "W " << W << " step " << s;
      seen_buckets.insert(data.bucket_of(items[0]));
      std::sort(items.begin(), items.end());
      if (W == 1) {
        reference.push_back(items);
      } else {
        EXPECT_EQ(items, reference[static_cast<size_t>(s)]) << "W " << W << " step " << s;
      }
    }
  }
  EXPECT_EQ(seen_buckets.size(), 3u);  // every bucket drawn in 24 steps

  // Training on the buckets (towers in the loop; latents 4x8, 8x4, 4x4 by step) at W = 2.
  TrainRun r = train_series("--config " + kConfigs + "base.yaml --set z_image.dataset=" + d + " --set z_image.tokenizer=" +
                                kTokenizer + " --set z_image.buckets=" + buckets +
                                " --set train.steps=4 --set run.progress=false",
                            2, "z_image_buckets");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.metrics.size(), 4u);
}

TEST(ZImageSeries, PreparedBucketsTrainAsTheTowersInTheLoop) {
  // The bucket test's kind of folder (three aspect ratios): prepare on 2 ranks, then training from
  // the cache and with the towers in the loop give the same bits; a run whose buckets differ from
  // the cache's is refused naming index.json.
  const std::string d = make_temp_dir("z_image_prep_buckets") + "/images";
  fs::create_directories(d);
  const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ", q = " > /dev/null 2>&1";
  std::string csv = "image,prompt\n";
  for (const auto& [name, size] : std::vector<std::pair<std::string, std::string>>{
           {"a.png", "80x40"}, {"b.png", "40x80"}, {"c.jpg", "48x48"}, {"d.png", "100x48"}, {"e.png", "40x90"}}) {
    run_ok(ff + "testsrc=size=" + size + " -frames:v 1 " + d + "/" + name + q);
    csv += name + ",a test card " + size + "\n";
  }
  std::ofstream(d + "/metadata.csv") << csv;
  const std::string cache = make_temp_dir("z_image_prep_buckets_cache") + "/cache";
  const std::string args = "--config " + kConfigs + "base.yaml --set z_image.dataset=" + d + " --set z_image.tokenizer=" +
                           kTokenizer + " --set z_image.buckets=32x32,32x64,64x32 --set run.progress=false";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " prepare --nproc 2 " + args + " --set z_image.cache=" + cache, &out), 0)
      << out;
  EXPECT_NE(out.find("cached 5 of 5 records"), std::string::npos) << out;
  const std::string steps = " --set train.steps=4 --set train.micro_batch_size=2";
  TrainRun towers = train_series(args + steps, 2, "z_image_prep_buckets_towers");
  ASSERT_EQ(towers.exit_code, 0) << towers.output;
  TrainRun cached = train_series(args + steps + " --set z_image.cache=" + cache, 2, "z_image_prep_buckets_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(loss_texts(towers), loss_texts(cached));
  // The cache's float32 latents and states into a bf16 DiT (frozen base in bf16, LoRA adapters).
  TrainRun bf16 = train_series(args + steps + " --set z_image.cache=" + cache +
                                   " --set mixed_precision.param_dtype=bf16 --set lora.rank=4 --set lora.alpha=4"
                                   " --set lora.targets=to_q,to_k,to_v,w1,w2,w3",
                               2, "z_image_prep_buckets_bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  ASSERT_EQ(bf16.metrics.size(), 4u);
  for (const auto& m : bf16.metrics) EXPECT_TRUE(std::isfinite(m.at("loss").get<double>())) << m.dump();
  TrainRun other = train_series(args + steps + " --set z_image.cache=" + cache + " --set z_image.buckets=32x32,64x32", 2,
                                "z_image_prep_buckets_other");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("index.json: the cache has buckets '32x32,32x64,64x32'"), std::string::npos)
      << other.output;
}

// z_image.on_bad_file=skip with the towers in the loop, on images of three aspect ratios in
// buckets: before the first step the ranks read the images, each its share, and agree that a
// missing file, a text file named .png and a truncated jpg do not read; they train on the other
// five, each in its bucket, as on a folder of only those: the four strategies agree bitwise at
// W = 3 and give the clean folder's losses, as does a cache prepared in skip mode. The log lists
// each image left out by file:line; `train --dry-run` in skip mode reports the same and succeeds.
TEST(ZImageSeries, SkipModeTrainsWithTheTowersInTheLoopOnTheImagesThatRead) {
  const std::string root = make_temp_dir("z_image_skip");
  const std::string clean = root + "/clean", faults = root + "/faults";
  fs::create_directories(clean);
  fs::create_directories(faults);
  const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ", q = " > /dev/null 2>&1";
  std::string clean_csv = "image,prompt\n", faults_csv = "image,prompt\n";
  for (const auto& [name, size] : std::vector<std::pair<std::string, std::string>>{
           {"a.png", "80x40"}, {"b.png", "40x80"}, {"c.jpg", "48x48"}, {"d.png", "100x48"}, {"e.png", "40x90"}}) {
    run_ok(ff + "testsrc=size=" + size + " -frames:v 1 " + clean + "/" + name + q);
    fs::copy_file(clean + "/" + name, faults + "/" + name);
    clean_csv += name + ",a test card " + size + "\n";
    faults_csv += name + ",a test card " + size + "\n";
    if (name == "a.png") faults_csv += "gone.png,a missing card\n";  // line 3
    if (name == "b.png") faults_csv += "notes.png,a text file\n";    // line 5
    if (name == "d.png") faults_csv += "cut.jpg,half a card\n";      // line 8
  }
  std::ofstream(clean + "/metadata.csv") << clean_csv;
  std::ofstream(faults + "/metadata.csv") << faults_csv;
  std::ofstream(faults + "/notes.png") << "this is not an image\n";
  fs::copy_file(clean + "/c.jpg", faults + "/cut.jpg");
  fs::resize_file(faults + "/cut.jpg", fs::file_size(clean + "/c.jpg") / 2);

  const std::string args = "--config " + kConfigs + "base.yaml --set z_image.tokenizer=" + kTokenizer +
                           " --set z_image.buckets=32x32,32x64,64x32 --set run.progress=false"
                           " --set parallel.comm_timeout_s=120 --set parallel.threads=1";
  const std::string steps = " --set train.steps=3 --set train.micro_batch_size=1 --set train.grad_accum=2"
                            " --set train.warmup_steps=1";
  const std::string skip = args + " --set z_image.dataset=" + faults + " --set z_image.on_bad_file=skip";
  ParityOptions o;
  o.small_model = false;
  const auto w3 = expect_identical_strategies(skip + steps, 3, 3, "z_image_skip", o);
  ASSERT_FALSE(w3.empty());
  const std::string text = read_text(w3[0].dir + "/rank0.log");
  EXPECT_NE(text.find("training reads 5 of 8 records (z_image.on_bad_file=skip left out 3)"), std::string::npos) << text;
  for (const char* line : {"left out: metadata.csv:3", "left out: metadata.csv:5", "left out: metadata.csv:8"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  const TrainRun want = train_series(args + " --set z_image.dataset=" + clean + steps +
                                         " --set parallel.strategy=optim_grads_params",
                                     3, "z_image_skip_clean");
  ASSERT_EQ(want.exit_code, 0) << want.output;
  EXPECT_EQ(loss_texts(w3[0]), loss_texts(want));

  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " train --dry-run --nproc 3 " + skip, &out), 0) << out;
  EXPECT_NE(out.find("training reads 5 of 8 records from " + faults + " (towers in the loop)"), std::string::npos) << out;
  EXPECT_NE(out.find("left out: metadata.csv:5"), std::string::npos) << out;
  const std::string cache = root + "/cache";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " prepare --nproc 2 " + skip + " --set z_image.cache=" + cache, &out), 0)
      << out;
  EXPECT_NE(out.find("cached 5 of 8 records"), std::string::npos) << out;
  const TrainRun cached = train_series(args + " --set z_image.dataset=" + faults + " --set z_image.cache=" + cache + steps +
                                           " --set parallel.strategy=optim_grads_params",
                                       3, "z_image_skip_cached");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(loss_texts(cached), loss_texts(want));
}

TEST(ZImageSeries, TheDitFromAReleasedFileIsTheStartingPoint) {
  // A run's DiT exported and renamed to the released layout (no "dit." prefix, towers dropped) is
  // what z_image.dit_from reads: a run from it with lr 0 ends with exactly those values; a file
  // missing a tensor is refused naming it.
  const std::string dir = make_temp_dir("z_image_dit_from");
  const std::string common = towers_args() + " --set train.save_final=true --set train.warmup_steps=0";
  TrainRun a = train_series(common + " --set train.steps=2", 2, "z_image_dit_from_a");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  std::string out;
  // The released layout: our export's "dit.*" tensors, renamed, in a fresh safetensors file.
  const std::string strip = dir + "/strip.py";
  std::ofstream(strip) << "import json, struct, sys\n"
                          "src, dst, drop = sys.argv[1], sys.argv[2], sys.argv[3:]\n"
                          "b = open(src, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]\n"
                          "h = json.loads(b[8:8 + n]); data = b[8 + n:]; out = {}; blob = b''\n"
                          "for k in sorted(h):\n"
                          "    if not k.startswith('dit.') or k[4:] in drop: continue\n"
                          "    s, e = h[k]['data_offsets']; out[k[4:]] = dict(h[k], data_offsets=[len(blob), len(blob) + e - s])\n"
                          "    blob += data[s:e]\n"
                          "j = json.dumps(out).encode(); j += b' ' * (-len(j) % 8)\n"
                          "open(dst, 'wb').write(struct.pack('<Q', len(j)) + j + blob)\n";
  auto export_dit = [&](const TrainRun& r, const std::string& name, const std::string& drop = "") {
    const std::string raw = dir + "/" + name + ".raw.safetensors", file = dir + "/" + name + ".safetensors";
    run_ok(std::string(ZS_BINARY) + " export " + r.dir + " " + raw + " > /dev/null 2>&1");
    run_ok("python3 " + strip + " " + raw + " " + file + " " + drop);
    return file;
  };
  const std::string released = export_dit(a, "a");
  TrainRun b = train_series(common + " --set train.steps=1 --set train.lr=0 --set train.min_lr=0 --set z_image.dit_from=" +
                                released,
                            2, "z_image_dit_from_b");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(read_text(export_dit(b, "b")) == read_text(released)) << "the DiT after a step at lr 0 differs from the file";
  const std::string partial = export_dit(a, "partial", "x_pad_token");
  TrainRun c = train_series(common + " --set train.steps=1 --set z_image.dit_from=" + partial, 2, "z_image_dit_from_c");
  EXPECT_NE(c.exit_code, 0);
  EXPECT_NE(c.output.find("x_pad_token"), std::string::npos) << c.output;
}
