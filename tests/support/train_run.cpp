#include "support/train_run.h"

#include "support/spawn.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>

namespace zeroshard::testing {

const char* const kSmallModel =
    " --set data.source=synthetic --set model.dim=48 --set model.n_layers=2 --set model.n_heads=4"
    " --set model.n_kv_heads=2 --set model.ffn_hidden=100 --set model.max_seq_len=32 --set train.seq_len=32"
    " --set train.lr=0.01 --set train.min_lr=0.001 --set train.warmup_steps=3 --set run.progress=false"
    " --set parallel.comm_timeout_s=60";

namespace {

TrainRun run_train(const std::string& args, int nproc, const std::string& tag, const std::string& dir) {
  TrainRun r;
  r.dir = dir.empty() ? make_temp_dir(tag) : dir;
  const std::string cmd =
      std::string(ZS_BINARY) + " train --nproc " + std::to_string(nproc) + " --set run.dir=" + r.dir + " " + args;
  r.exit_code = run_command(cmd, &r.output);
  read_metrics(r);
  return r;
}

}  // namespace

TrainRun train(const std::string& args, int nproc, const std::string& tag, const std::string& dir) {
  return run_train(std::string(kSmallModel) + " " + args, nproc, tag, dir);
}

TrainRun train_series(const std::string& args, int nproc, const std::string& tag) {
  return run_train(args, nproc, tag, "");
}

void read_metrics(TrainRun& r) {
  r.metrics.clear();
  std::ifstream in(r.dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) r.metrics.push_back(nlohmann::json::parse(line));
  }
}

double max_rel_loss_diff(const TrainRun& a, const TrainRun& b, int64_t after_step) {
  std::map<int64_t, double> loss;
  for (const auto& m : a.metrics) loss[m["step"].get<int64_t>()] = m["loss"].get<double>();
  double worst = 0;
  for (const auto& m : b.metrics) {
    const int64_t s = m["step"].get<int64_t>();
    if (s <= after_step) continue;
    auto it = loss.find(s);
    if (it == loss.end()) throw std::runtime_error("step " + std::to_string(s) + " of " + b.dir + " is missing in " + a.dir);
    worst = std::max(worst, std::abs(m["loss"].get<double>() - it->second) / std::abs(it->second));
  }
  return worst;
}

PngDiff compare_pngs(const std::string& path_a, const std::string& path_b) {
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string a = bytes(path_a), b = bytes(path_b);
  PngDiff d;
  if (a.size() != b.size() || a.size() < 100) return d;
  d.differ = d.far = 0;
  for (size_t i = 0; i + 20 < a.size(); ++i) {  // the last 20 bytes: Adler-32, CRC, IEND
    const int x = std::abs(static_cast<int>(static_cast<unsigned char>(a[i])) - static_cast<int>(static_cast<unsigned char>(b[i])));
    d.differ += x > 0 ? 1 : 0;
    d.far += x > 1 ? 1 : 0;
  }
  return d;
}

const std::vector<std::string> kAllStrategies = {"no_shard", "optim", "optim_grads", "optim_grads_params"};

std::vector<TrainRun> expect_identical_strategies(const std::string& args, int world, int64_t steps,
                                                  const std::string& tag, const ParityOptions& o) {
  std::vector<TrainRun> runs;
  const std::string shards = o.final_shards ? " --set run.dump_final_shards=true" : "";
  for (const auto& s : o.strategies) {
    const std::string a = args + shards + " --set parallel.strategy=" + s;
    runs.push_back(o.small_model ? train(a, world, tag + "_" + s) : train_series(a, world, tag + "_" + s));
    const TrainRun& r = runs.back();
    if (r.exit_code != 0) {
      ADD_FAILURE() << tag << ": " << s << " at W=" << world << " exited " << r.exit_code << ":\n" << r.output;
      return runs;
    }
    if (static_cast<int64_t>(r.metrics.size()) != steps) {
      ADD_FAILURE() << tag << ": " << s << " wrote " << r.metrics.size() << " metrics lines, expected " << steps;
      return runs;
    }
  }
  const auto base = loss_texts(runs[0]);
  for (size_t k = 1; k < runs.size(); ++k) {
    const auto texts = loss_texts(runs[k]);
    for (size_t i = 0; i < base.size(); ++i) {
      if (texts[i] != base[i]) {
        ADD_FAILURE() << tag << ": " << o.strategies[k] << " differs from " << o.strategies[0] << " at W=" << world
                      << " step " << i + 1 << ": " << texts[i] << " vs " << base[i];
        break;
      }
    }
    for (int r = 0; o.final_shards && r < world; ++r) {
      const std::string name = "/final_shard.rank" + std::to_string(r) + ".bin";
      const std::string a = read_text(runs[0].dir + name), b = read_text(runs[k].dir + name);
      if (a.empty() || a != b) {
        ADD_FAILURE() << tag << ": final parameters of rank " << r << " under " << o.strategies[k]
                      << (a.empty() ? " (none written)" : " differ from " + o.strategies[0]);
      }
    }
  }
  return runs;
}

std::vector<std::string> loss_texts(const TrainRun& r) {
  std::vector<std::string> out;
  for (const auto& m : r.metrics) out.push_back(m["loss"].dump() + " " + m["grad_norm"].dump());
  return out;
}

void run_ok(const std::string& cmd) {
  std::string out;
  ASSERT_EQ(run_command(cmd, &out), 0) << cmd << "\n" << out;
}

double mean_loss(const TrainRun& r, size_t first, size_t count) {
  double s = 0;
  for (size_t i = first; i < first + count; ++i) s += r.metrics.at(i).at("loss").get<double>();
  return s / static_cast<double>(count);
}

const std::vector<std::string> kCaptionedImagePrompts = {"a test card with a clock", "red green and blue bars",
                                                         "a fractal, blue and black", "colour bars for a television"};

std::string make_captioned_images(const std::string& tag) {
  const std::string d = make_temp_dir(tag) + "/images";
  std::filesystem::create_directories(d);
  const std::string ff = "ffmpeg -loglevel error -y -f lavfi -i ", q = " > /dev/null 2>&1";
  run_ok(ff + "testsrc=size=40x36 -frames:v 1 " + d + "/a.png" + q);
  run_ok(ff + "rgbtestsrc=size=36x40 -frames:v 1 " + d + "/b.png" + q);
  run_ok(ff + "mandelbrot=size=48x48 -frames:v 1 " + d + "/c.jpg" + q);
  run_ok(ff + "smptebars=size=64x48 -frames:v 1 " + d + "/d.png" + q);
  const auto& p = kCaptionedImagePrompts;
  std::ofstream(d + "/metadata.csv") << "image,prompt\na.png," << p[0] << "\nb.png," << p[1] << "\nc.jpg,\"" << p[2]
                                     << "\"\nd.png," << p[3] << "\n";
  return d;
}

const std::vector<std::string> kClipCaptionWords = {"a",      "video", "of",    "the",  "cat",  "walking",
                                                    "on",     "beach", "sunset", "camera", "slowly", "pans",
                                                    "red",    "blue",  "green", "dog",  "running", "field"};

std::string train_tiny_spm(const std::string& dir, const std::vector<std::string>& words) {
  {
    std::ofstream corpus(dir + "/corpus.txt");
    const size_t n = words.size();
    for (size_t i = 0; i < 300; ++i) {
      for (size_t j = 0; j < 8; ++j) corpus << words[(i * 7 + j * 5 + i * j) % n] << (j < 7 ? " " : "\n");
    }
  }
  run_ok("spm_train --input=" + dir + "/corpus.txt --model_prefix=" + dir + "/spm --vocab_size=40"
         " --hard_vocab_limit=false --model_type=unigram --character_coverage=1.0 --pad_id=0 --eos_id=1 --unk_id=2"
         " --bos_id=-1 > /dev/null 2>&1");
  return dir + "/spm.model";
}

void expect_exact_resume(const std::string& args, const std::string& tag) {
  const std::string common = args + " --set train.steps=4 --set run.dump_final_shards=true";
  TrainRun full = train_series(common + " --set train.save_every=2", 2, tag + "_full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  TrainRun resumed = train_series(common + " --set train.resume=" + full.dir + "/checkpoints/step_00000002", 2, tag);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto a = loss_texts(full), b = loss_texts(resumed);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(b, std::vector<std::string>(a.begin() + 2, a.end()));
  for (int r = 0; r < 2; ++r) {
    const std::string f = "/final_shard.rank" + std::to_string(r) + ".bin";
    EXPECT_TRUE(read_text(full.dir + f) == read_text(resumed.dir + f)) << "final parameters of rank " << r;
  }
}

std::string expect_seeded_folders_train_as_seeded(const std::string& args, const std::string& tag,
                                                  const std::string& seed_extra) {
  const std::string out_dir = make_temp_dir(tag + "_weights") + "/weights";
  std::string out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " seed-weights " + args + " --out " + out_dir +
                            " --dtype fp32 --max-file-mb 0.2" + seed_extra,
                        &out),
            0)
      << out;
  // The keys follow "a run reads them with", one "--set key=path" per line.
  std::string keys;
  const size_t from = out.find("a run reads them with");
  EXPECT_NE(from, std::string::npos) << out;
  if (from == std::string::npos) return keys;
  for (size_t at = out.find("--set ", from); at != std::string::npos; at = out.find("--set ", at + 6)) {
    const size_t end = out.find_first_of(" \\\n", at + 6);
    keys += " --set " + out.substr(at + 6, end - at - 6);
  }
  EXPECT_FALSE(keys.empty()) << out;
  const std::string common = args + " --set train.steps=2 --set parallel.strategy=optim_grads_params";
  const TrainRun seeded = train_series(common, 2, tag + "_seeded");
  EXPECT_EQ(seeded.exit_code, 0) << seeded.output;
  const TrainRun from_files = train_series(common + keys + " --set model.frozen_storage=file", 2, tag + "_files");
  EXPECT_EQ(from_files.exit_code, 0) << from_files.output;
  EXPECT_EQ(loss_texts(seeded).size(), 2u) << seeded.output;
  EXPECT_EQ(loss_texts(seeded), loss_texts(from_files)) << keys;
  if (!from_files.metrics.empty()) {
    EXPECT_GT(from_files.metrics.back().value("mem_mapped_bytes", int64_t{0}), 0)
        << "nothing was read in place: " << from_files.metrics.back().dump();
  }
  // Through a converted copy in the run folder (what the files hold in another layout, FLUX.1's
  // separate q/k/v, written once fused): the same losses, nothing converted at a gather.
  const TrainRun copied = train_series(common + keys + " --set model.frozen_storage=file --set model.frozen_converted=copy",
                                       2, tag + "_copy");
  EXPECT_EQ(copied.exit_code, 0) << copied.output;
  EXPECT_EQ(loss_texts(seeded), loss_texts(copied)) << keys;
  if (!copied.metrics.empty()) {
    EXPECT_EQ(copied.metrics.back().value("mem_converted_bytes", int64_t{-1}), 0) << copied.metrics.back().dump();
  }
  return keys;
}

}  // namespace zeroshard::testing
