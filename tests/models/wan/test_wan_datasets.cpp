// `zeroshard prepare` and `train` (wan) on a DiffSynth folder as users keep them: clips of
// different lengths, sizes and frame rates in one folder, and rows that cannot be read (a missing
// file, a text file named .mp4, a truncated mp4, an empty prompt). Each clip's sharded VAE runs as many chunk passes as the round's
// longest clip, so every world size and strategy writes the same cache, bitwise, as one rank does
// alone (which runs no extra pass; one compute thread per rank in every run); skip mode leaves the bad rows out, lists them by file:line and
// keys the kept ones by their CSV row; stop mode ends every rank with the bad row's message and
// writes nothing; a folder with no readable row is refused naming its metadata file.
#include "io/safetensors.h"
#include "models/diffusion/cond_cache.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kConfigs = std::string(ZS_SOURCE_DIR) + "/configs/wan/";

struct Folder {
  std::string dir, clips, faults, spm;
};

// clips/: 17 frames at 8 fps (48x40), 9 at 24 fps (40x40), 7 at 12 fps (64x48), 2 at 8 fps
// (40x36) -> with num_frames 13: 13, 9, 5 and 1 frames (LoadVideo's longest 1 + 4k).
// faults/: the same clips with a missing file (CSV line 3), a text file named .mp4 (line 5) and
// a truncated mp4 (line 7) between them.
const Folder& folder() {
  static Folder f = [] {
    Folder d;
    d.dir = make_temp_dir("wan_datasets");
    d.clips = d.dir + "/clips";
    d.faults = d.dir + "/faults";
    fs::create_directories(d.clips);
    fs::create_directories(d.faults);
    d.spm = train_tiny_spm(d.dir, kClipCaptionWords);
    const std::string q = " > /dev/null 2>&1";
    const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ";
    run_ok(ff + "testsrc=size=48x40:rate=8 -frames:v 17 -pix_fmt yuv420p " + d.clips + "/long.mp4" + q);
    run_ok(ff + "mandelbrot=size=40x40:rate=24 -frames:v 9 -pix_fmt yuv420p " + d.clips + "/mid.mp4" + q);
    run_ok(ff + "testsrc2=size=64x48:rate=12 -frames:v 7 -pix_fmt yuv420p " + d.clips + "/short.mp4" + q);
    run_ok(ff + "rgbtestsrc=size=40x36:rate=8 -frames:v 2 -pix_fmt yuv420p " + d.clips + "/two.mp4" + q);
    const std::string rows = "long.mp4,a video of the cat walking\nmid.mp4,red dog running on the beach\n"
                             "short.mp4,\"camera slowly pans, a green field\"\ntwo.mp4,blue sunset\n";
    std::ofstream(d.clips + "/metadata.csv") << "video,prompt\n" << rows;
    for (const char* name : {"long.mp4", "mid.mp4", "short.mp4", "two.mp4"}) {
      fs::copy_file(d.clips + "/" + name, d.faults + "/" + name);
    }
    std::ofstream(d.faults + "/notes.mp4") << "this is not a video\n";
    const auto size = fs::file_size(d.clips + "/long.mp4");
    fs::copy_file(d.clips + "/long.mp4", d.faults + "/cut.mp4");
    fs::resize_file(d.faults + "/cut.mp4", size / 3);
    std::ofstream(d.faults + "/metadata.csv") << "video,prompt\nlong.mp4,a video of the cat walking\n"
                                                 "gone.mp4,the dog\nmid.mp4,red dog running on the beach\n"
                                                 "notes.mp4,a field\nshort.mp4,\"camera slowly pans, a green field\"\n"
                                                 "cut.mp4,the beach\ntwo.mp4,blue sunset\n";
    return d;
  }();
  return f;
}

std::string prepare_command(const std::string& dataset, const std::string& cache, int world,
                            const std::string& strategy, const std::string& extra = "") {
  return std::string(ZS_BINARY) + " prepare --nproc " + std::to_string(world) + " --config " + kConfigs +
         "base.yaml --set wan.dataset=" + dataset + " --set wan.tokenizer=" + folder().spm +
         " --set wan.num_frames=13 --set parallel.strategy=" + strategy + " --set parallel.threads=1" +
         " --set run.progress=false --set parallel.comm_timeout_s=60 --set wan.cache=" + cache + extra;
}

// record -> (tensor name -> tensor) of a cache, and its index.json.
struct Cache {
  nlohmann::json index;
  std::map<int64_t, std::map<std::string, at::Tensor>> records;
};

Cache read_cache(const std::string& dir) {
  Cache c;
  c.index = models::diffusion::read_json_file(dir + "/index.json");
  for (const auto& item : c.index.at("items")) {
    const int64_t record = item.at("record").get<int64_t>();
    const io::SafetensorsFile file(dir + "/" + item.at("shard").get<std::string>());
    for (const char* name : {"latent", "context"}) {
      c.records[record][name] = file.read(std::string(name) + "." + std::to_string(record));
    }
  }
  return c;
}

void expect_same_cache(const Cache& want, const Cache& got, const std::string& what) {
  ASSERT_EQ(want.records.size(), got.records.size()) << what;
  for (const auto& [record, tensors] : want.records) {
    ASSERT_EQ(got.records.count(record), 1u) << what << ": record " << record;
    for (const auto& [name, t] : tensors) {
      const at::Tensor& g = got.records.at(record).at(name);
      EXPECT_TRUE(t.sizes() == g.sizes() && t.equal(g)) << what << ": " << name << "." << record << " differs";
    }
  }
  EXPECT_EQ(want.index.at("left_out"), got.index.at("left_out")) << what;
}

const char* const kStrategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};

}  // namespace

TEST(WanDatasets, ClipsOfEveryLengthPrepareToTheSameCacheAtEveryWorldSizeAndStrategy) {
  const std::string root = make_temp_dir("wan_mixed");
  std::string out;
  ASSERT_EQ(run_command(prepare_command(folder().clips, root + "/w1", 1, "no_shard"), &out), 0) << out;
  EXPECT_NE(out.find("cached 4 of 4 records"), std::string::npos) << out;
  // The report: what was read of each item, then the items per clip length.
  for (const char* line : {"row 0 long.mp4: fps 8.0, frames 13,", "source 48x40", "row 1 mid.mp4: fps 24.0, frames 9,",
                           "row 2 short.mp4: fps 12.0, frames 5,", "source 64x48", "row 3 two.mp4: fps 8.0, frames 1,",
                           "frames 13: 1 item", "frames 1: 1 item"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  }
  const Cache want = read_cache(root + "/w1");
  // Latent frames 1 + (frames - 1) / 4 of the 13, 9, 5 and 1 frames each clip gives.
  const int64_t latent_frames[] = {4, 3, 2, 1};
  for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(want.records.at(r).at("latent").size(1), latent_frames[r]) << "record " << r;
  for (int world : {2, 3}) {
    for (const char* strategy : kStrategies) {
      const std::string what = std::string(strategy) + " at W = " + std::to_string(world);
      const std::string dir = root + "/" + strategy + std::to_string(world);
      ASSERT_EQ(run_command(prepare_command(folder().clips, dir, world, strategy), &out), 0) << what << "\n" << out;
      expect_same_cache(want, read_cache(dir), what);
    }
  }
  // The same rows from a metadata file of the user's own, kept outside the folder (wan.metadata),
  // as jsonl and as json.
  std::ofstream(root + "/rows.jsonl") << R"({"video": "long.mp4", "prompt": "a video of the cat walking"}
{"video": "mid.mp4", "prompt": "red dog running on the beach"}
{"video": "short.mp4", "prompt": "camera slowly pans, a green field"}
{"video": "two.mp4", "prompt": "blue sunset"}
)";
  std::ofstream(root + "/rows.json") << R"([{"video": "long.mp4", "prompt": "a video of the cat walking"},
 {"video": "mid.mp4", "prompt": "red dog running on the beach"},
 {"video": "short.mp4", "prompt": "camera slowly pans, a green field"},
 {"video": "two.mp4", "prompt": "blue sunset"}])";
  for (const char* rows : {"rows.jsonl", "rows.json"}) {
    const std::string dir = root + "/" + rows + ".cache";
    ASSERT_EQ(run_command(prepare_command(folder().clips, dir, 2, "optim_grads_params",
                                          " --set wan.metadata=" + root + "/" + rows),
                          &out),
              0)
        << out;
    expect_same_cache(want, read_cache(dir), rows);
  }
}

TEST(WanDatasets, SkipModeLeavesOutEachBadRowAndKeysTheRestByTheirCsvRow) {
  const std::string root = make_temp_dir("wan_skip");
  const std::string skip = " --set wan.on_bad_file=skip";
  std::string out;
  ASSERT_EQ(run_command(prepare_command(folder().faults, root + "/w1", 1, "no_shard", skip), &out), 0) << out;
  EXPECT_NE(out.find("cached 4 of 7 records"), std::string::npos) << out;
  const Cache want = read_cache(root + "/w1");
  std::vector<int64_t> records;
  for (const auto& [r, t] : want.records) records.push_back(r);
  EXPECT_EQ(records, (std::vector<int64_t>{0, 2, 4, 6})) << "the CSV rows of long, mid, short and two";
  const std::string left = want.index.at("left_out").dump();
  for (const char* line : {"metadata.csv:3", "metadata.csv:5", "metadata.csv:7"}) {
    EXPECT_NE(left.find(line), std::string::npos) << line << " not listed: " << left;
  }
  EXPECT_EQ(want.index.at("left_out").size(), 3u) << left;
  // The same kept items as the clean folder's (row k of faults/ is the same clip as there).
  ASSERT_EQ(run_command(prepare_command(folder().clips, root + "/clean", 1, "no_shard"), &out), 0) << out;
  const Cache clean = read_cache(root + "/clean");
  const std::map<int64_t, int64_t> row_in_clean = {{0, 0}, {2, 1}, {4, 2}, {6, 3}};
  for (const auto& [row, clean_row] : row_in_clean) {
    EXPECT_TRUE(want.records.at(row).at("latent").equal(clean.records.at(clean_row).at("latent"))) << "row " << row;
  }
  for (int world : {2, 3}) {
    for (const char* strategy : kStrategies) {
      const std::string what = std::string(strategy) + " at W = " + std::to_string(world);
      const std::string dir = root + "/" + strategy + std::to_string(world);
      ASSERT_EQ(run_command(prepare_command(folder().faults, dir, world, strategy, skip), &out), 0) << what << "\n" << out;
      EXPECT_NE(out.find("cached 4 of 7 records"), std::string::npos) << what << "\n" << out;
      expect_same_cache(want, read_cache(dir), what);
    }
  }
}

TEST(WanDatasets, StopModeEndsEveryRankNamingTheRowAndWritesNothing) {
  const std::string root = make_temp_dir("wan_stop");
  for (int world : {1, 2, 3}) {
    const std::string cache = root + "/cache" + std::to_string(world);
    std::string out;
    const int rc = run_command(prepare_command(folder().faults, cache, world, "optim_grads_params"), &out);
    EXPECT_NE(rc, 0) << out;
    // The missing file is found while reading the metadata, before any rank starts: named once.
    EXPECT_NE(out.find("metadata.csv:3"), std::string::npos) << out;
    EXPECT_EQ(out.find("metadata.csv:3"), out.rfind("metadata.csv:3")) << out;
    EXPECT_EQ(out.find("rank"), std::string::npos) << out;
    EXPECT_NE(out.find("gone.mp4"), std::string::npos) << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(cache)) << out;
    EXPECT_FALSE(fs::exists(cache + ".partial")) << out;
  }
  // Without the missing row, the first bad row read by the towers' loop stops every rank.
  const std::string dir = root + "/nomissing";
  fs::create_directories(dir);
  for (const char* name : {"long.mp4", "notes.mp4", "mid.mp4", "short.mp4"}) {
    fs::copy_file(folder().faults + "/" + name, dir + "/" + name);
  }
  std::ofstream(dir + "/metadata.csv") << "video,prompt\nlong.mp4,a cat\nmid.mp4,a dog\nnotes.mp4,a field\nshort.mp4,the beach\n";
  for (int world : {2, 3}) {
    const std::string cache = root + "/loop" + std::to_string(world);
    std::string out;
    const int rc = run_command(prepare_command(dir, cache, world, "optim_grads_params"), &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("metadata.csv:4"), std::string::npos) << out;
    EXPECT_NE(out.find("wan.on_bad_file=skip"), std::string::npos) << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(cache)) << out;
    EXPECT_FALSE(fs::exists(cache + ".partial")) << out;
  }
}

TEST(WanDatasets, AFolderWithNoReadableRowIsRefusedNamingItsMetadata) {
  const std::string root = make_temp_dir("wan_allbad");
  const std::string dir = root + "/data";
  fs::create_directories(dir);
  fs::copy_file(folder().faults + "/notes.mp4", dir + "/notes.mp4");
  fs::copy_file(folder().faults + "/cut.mp4", dir + "/cut.mp4");
  std::ofstream(dir + "/metadata.csv") << "video,prompt\nnotes.mp4,a field\ncut.mp4,the beach\n";
  for (int world : {1, 2}) {
    const std::string cache = root + "/cache" + std::to_string(world);
    std::string out;
    const int rc = run_command(prepare_command(dir, cache, world, "optim_grads_params", " --set wan.on_bad_file=skip"), &out);
    EXPECT_NE(rc, 0) << out;
    EXPECT_NE(out.find("no record could be read"), std::string::npos) << out;
    EXPECT_NE(out.find("metadata.csv:2"), std::string::npos) << out;
    EXPECT_NE(out.find("metadata.csv:3"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(cache)) << out;
    EXPECT_FALSE(fs::exists(cache + ".partial")) << out;
  }
  // A cache folder that is not a cache (here the dataset's own folder) is refused, not replaced.
  {
    std::string out;
    EXPECT_NE(run_command(prepare_command(folder().clips, folder().clips, 2, "optim_grads_params"), &out), 0) << out;
    EXPECT_NE(out.find("is not a conditioning cache"), std::string::npos) << out;
    EXPECT_EQ(out.find("is not a conditioning cache"), out.rfind("is not a conditioning cache")) << out;
    EXPECT_TRUE(fs::exists(folder().clips + "/metadata.csv") && fs::exists(folder().clips + "/long.mp4")) << out;
  }
  // An empty metadata file: refused at prepare, naming it.
  std::ofstream(dir + "/metadata.csv") << "video,prompt\n";
  std::string out;
  EXPECT_NE(run_command(prepare_command(dir, root + "/empty", 1, "no_shard"), &out), 0) << out;
  EXPECT_NE(out.find(dir + "/metadata.csv"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/empty")) << out;
}

// An empty or blank prompt is a bad row like an unreadable file: left out and listed by its CSV
// line in skip mode (here together with a text file named .mp4), the same cache at every world
// size and strategy; in stop mode it ends every rank naming its line and writes nothing.
TEST(WanDatasets, AnEmptyPromptIsABadRowInSkipAndStopMode) {
  const std::string root = make_temp_dir("wan_prompts");
  const std::string dir = root + "/data";
  fs::create_directories(dir);
  for (const char* name : {"long.mp4", "mid.mp4", "short.mp4", "two.mp4", "notes.mp4"}) {
    fs::copy_file(folder().faults + "/" + name, dir + "/" + name);
  }
  std::ofstream(dir + "/metadata.csv") << "video,prompt\nlong.mp4,a cat\nmid.mp4,\nshort.mp4,\"  \"\ntwo.mp4,blue sunset\n"
                                          "notes.mp4,a field\n";
  const std::string skip = " --set wan.on_bad_file=skip";
  std::string out;
  ASSERT_EQ(run_command(prepare_command(dir, root + "/w1", 1, "no_shard", skip), &out), 0) << out;
  EXPECT_NE(out.find("cached 2 of 5 records"), std::string::npos) << out;
  const Cache want = read_cache(root + "/w1");
  std::vector<int64_t> records;
  for (const auto& [r, t] : want.records) records.push_back(r);
  EXPECT_EQ(records, (std::vector<int64_t>{0, 3})) << "the CSV rows of long and two";
  const std::string left = want.index.at("left_out").dump();
  EXPECT_NE(left.find("metadata.csv:3: column 'prompt': empty prompt"), std::string::npos) << left;
  EXPECT_NE(left.find("metadata.csv:4: column 'prompt': empty prompt"), std::string::npos) << left;
  EXPECT_NE(left.find("metadata.csv:6"), std::string::npos) << left;
  EXPECT_EQ(want.index.at("left_out").size(), 3u) << left;
  for (int world : {2, 3}) {
    for (const char* strategy : kStrategies) {
      const std::string what = std::string(strategy) + " at W = " + std::to_string(world);
      const std::string cache = root + "/" + strategy + std::to_string(world);
      ASSERT_EQ(run_command(prepare_command(dir, cache, world, strategy, skip), &out), 0) << what << "\n" << out;
      expect_same_cache(want, read_cache(cache), what);
    }
  }
  for (int world : {1, 2, 3}) {
    const std::string cache = root + "/stop" + std::to_string(world);
    EXPECT_NE(run_command(prepare_command(dir, cache, world, "optim_grads_params"), &out), 0) << out;
    EXPECT_NE(out.find("metadata.csv:3: column 'prompt': empty prompt"), std::string::npos) << out;
    EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
    EXPECT_FALSE(fs::exists(cache) || fs::exists(cache + ".partial")) << out;
  }
}

// `train --dry-run` reads every row as training would and says what it read of each. With the
// towers in the loop training stops at an unreadable row, so the dry run lists them and fails
// saying how to train on the rest; from a cache prepared in skip mode it lists the cached items
// and what was left out.
TEST(WanDatasets, TrainDryRunReportsEveryRowWithTheTowersInTheLoopAndFromACache) {
  const std::string root = make_temp_dir("wan_dry_run");
  const std::string train = std::string(ZS_BINARY) + " train --dry-run --nproc 2 --config " + kConfigs +
                            "base.yaml --set wan.tokenizer=" + folder().spm + " --set wan.num_frames=13";
  std::string out;
  EXPECT_NE(run_command(train + " --set wan.dataset=" + folder().faults, &out), 0) << out;
  EXPECT_NE(out.find("dry run: model.series wan, 2 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("training reads 4 of 7 records from " + folder().faults + " (towers in the loop)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("row 0 long.mp4: fps 8.0, frames 13"), std::string::npos) << out;
  EXPECT_NE(out.find("row 6 two.mp4: fps 8.0, frames 1"), std::string::npos) << out;
  EXPECT_NE(out.find("source 48x40"), std::string::npos) << out;
  for (const char* line : {"metadata.csv:3", "metadata.csv:5", "metadata.csv:7"}) {
    EXPECT_NE(out.find(std::string("left out: ") + line), std::string::npos) << line << "\n" << out;
  }
  EXPECT_NE(out.find("3 record(s) above cannot be read"), std::string::npos) << out;
  EXPECT_NE(out.find("wan.on_bad_file=skip"), std::string::npos) << out;
  EXPECT_EQ(out.find("terminate called"), std::string::npos) << out;
  // In skip mode training leaves those rows out, and the dry run says so without failing.
  ASSERT_EQ(run_command(train + " --set wan.dataset=" + folder().faults + " --set wan.on_bad_file=skip", &out), 0) << out;
  EXPECT_NE(out.find("training reads 4 of 7 records from " + folder().faults + " (towers in the loop)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("left out: metadata.csv:5"), std::string::npos) << out;

  const std::string cache = root + "/cache";
  ASSERT_EQ(run_command(prepare_command(folder().faults, cache, 2, "optim_grads_params", " --set wan.on_bad_file=skip"),
                        &out),
            0)
      << out;
  ASSERT_EQ(run_command(train + " --set wan.cache=" + cache, &out), 0) << out;
  EXPECT_NE(out.find("training reads 4 of 7 records from " + cache + " (a prepared cache)"), std::string::npos) << out;
  EXPECT_NE(out.find("row 2 mid.mp4: fps 24.0, frames 9"), std::string::npos) << out;
  EXPECT_NE(out.find("frames 5: 1 item"), std::string::npos) << out;
  EXPECT_NE(out.find("left out: metadata.csv:3"), std::string::npos) << out;
}

// Clips of 13, 9, 5 and 1 frames train with the towers in the loop: under optim_grads_params every
// rank's sharded VAE runs the passes of a 13-frame clip for each (the extra ones on zero frames,
// dropped; the other strategies' replicated VAE runs each clip's own), so the four
// strategies agree bitwise at W = 3 with accumulation; W = 1 and W = 2 give the same losses for
// the same global batches (to summation order); and a cache of the same clips trains bitwise as
// the towers in the loop do (the extra passes change no latent).
TEST(WanDatasets, ClipsOfEveryLengthTrainWithTheTowersInTheLoopAtEveryWorldSizeAndStrategy) {
  const std::string common = "--config " + kConfigs + "base.yaml --set wan.dataset=" + folder().clips +
                             " --set wan.tokenizer=" + folder().spm +
                             " --set wan.num_frames=13 --set parallel.threads=1 --set run.progress=false"
                             " --set parallel.comm_timeout_s=120 --set train.steps=3 --set train.warmup_steps=1"
                             " --set train.micro_batch_size=1";
  ParityOptions o;
  o.small_model = false;
  o.final_shards = true;
  const auto w3 = expect_identical_strategies(common + " --set train.grad_accum=2", 3, 3, "wan_lengths", o);
  ASSERT_FALSE(w3.empty());
  const TrainRun w1 = train_series(common + " --set train.grad_accum=6 --set parallel.strategy=no_shard", 1, "wan_len1");
  const TrainRun w2 = train_series(common + " --set train.grad_accum=3", 2, "wan_len2");
  for (const TrainRun* r : {&w1, &w2}) ASSERT_EQ(r->metrics.size(), 3u) << r->output;
  for (size_t i = 0; i < 3; ++i) {
    const double want = w3[0].metrics[i]["loss"].get<double>();
    for (const TrainRun* r : {&w1, &w2}) {
      EXPECT_NEAR(r->metrics[i]["loss"].get<double>(), want, 1e-5 * std::abs(want)) << "step " << i + 1;
    }
  }
  const std::string cache = make_temp_dir("wan_lengths_cache") + "/cache";
  std::string out;
  ASSERT_EQ(run_command(prepare_command(folder().clips, cache, 3, "optim_grads_params"), &out), 0) << out;
  const TrainRun cached = train_series(common + " --set train.grad_accum=2 --set wan.cache=" + cache, 3, "wan_len_cache");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_EQ(loss_texts(cached), loss_texts(w3[0]));
}

// wan.on_bad_file=skip with the towers in the loop: before the first step the ranks read the
// clips, each its share, and agree that the missing, non-video and truncated rows do not read;
// they train on the other four as on a folder of only those (the clean folder holds the same
// clips and prompts in the same order): the four strategies agree bitwise at W = 3 and give the
// clean folder's losses, and so (to summation order) does one rank. The log lists each row left
// out by file:line. Stop mode stops before the first step at the missing file's row.
TEST(WanDatasets, SkipModeTrainsWithTheTowersInTheLoopOnTheRowsThatReadAtEveryWorldSizeAndStrategy) {
  const std::string common = "--config " + kConfigs + "base.yaml --set wan.tokenizer=" + folder().spm +
                             " --set wan.num_frames=13 --set parallel.threads=1 --set run.progress=false"
                             " --set parallel.comm_timeout_s=120 --set train.steps=3 --set train.warmup_steps=1"
                             " --set train.micro_batch_size=1";
  const std::string faults = common + " --set wan.dataset=" + folder().faults;
  const std::string skip = faults + " --set wan.on_bad_file=skip";
  ParityOptions o;
  o.small_model = false;
  const auto w3 = expect_identical_strategies(skip + " --set train.grad_accum=2", 3, 3, "wan_skip", o);
  ASSERT_FALSE(w3.empty());
  const std::string text = read_text(w3[0].dir + "/rank0.log");
  EXPECT_NE(text.find("training reads 4 of 7 records (wan.on_bad_file=skip left out 3)"), std::string::npos) << text;
  for (const char* line : {"left out: metadata.csv:3", "left out: metadata.csv:5", "left out: metadata.csv:7"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  const TrainRun clean = train_series(common + " --set wan.dataset=" + folder().clips +
                                          " --set train.grad_accum=2 --set parallel.strategy=optim_grads_params",
                                      3, "wan_skip_clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(loss_texts(w3[0]), loss_texts(clean));
  const TrainRun w1 = train_series(skip + " --set train.grad_accum=6 --set parallel.strategy=no_shard", 1, "wan_skip1");
  ASSERT_EQ(w1.metrics.size(), 3u) << w1.output;
  for (size_t i = 0; i < 3; ++i) {
    const double want = clean.metrics[i]["loss"].get<double>();
    EXPECT_NEAR(w1.metrics[i]["loss"].get<double>(), want, 1e-5 * std::abs(want)) << "step " << i + 1;
  }
  const TrainRun stop = train_series(faults + " --set train.grad_accum=2", 2, "wan_skip_stop");
  EXPECT_NE(stop.exit_code, 0) << stop.output;
  EXPECT_NE(stop.output.find("metadata.csv:3"), std::string::npos) << stop.output;
  EXPECT_EQ(stop.output.find("terminate called"), std::string::npos) << stop.output;
  EXPECT_TRUE(stop.metrics.empty()) << stop.output;
}
