#include "support/spawn.h"
#include "models/llama/series.h"
#include "train/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

using namespace zeroshard::train;
using zeroshard::Strategy;

namespace {
std::string write_yaml(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, DefaultsAreTheDefaultJob) {
  auto c = load_config("", {});
  EXPECT_EQ(c.parallel.strategy, Strategy::OptimGradsParams);
  EXPECT_EQ(c.series, "llama");
  EXPECT_EQ(c.series_config<zeroshard::models::LlamaSeriesConfig>().llama.n_layers, 4);
}

TEST(Config, FileThenOverridesWithProvenance) {
  const auto dir = zeroshard::testing::make_temp_dir("cfg");
  const auto base = write_yaml(dir, "base.yaml", "train:\n  steps: 7\n  lr: 0.01\nmodel:\n  dim: 64\n");
  const auto child = write_yaml(dir, "child.yaml", "base: base.yaml\ntrain:\n  steps: 9\n");
  Provenance prov;
  auto c = load_config(child, {"train.micro_batch_size=3"}, &prov);
  EXPECT_EQ(c.train.steps, 9);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.01);
  EXPECT_EQ(c.series_config<zeroshard::models::LlamaSeriesConfig>().llama.dim, 64);
  EXPECT_EQ(c.train.micro_batch_size, 3);
  EXPECT_EQ(prov["train.steps"], child);
  EXPECT_EQ(prov["train.lr"], base);
  EXPECT_EQ(prov["train.micro_batch_size"], "--set");
  EXPECT_EQ(prov["train.seed"], "default");
}

TEST(Config, UnknownKeyNamesTheClosestValidKey) {
  const auto dir = zeroshard::testing::make_temp_dir("cfg");
  const auto f = write_yaml(dir, "bad.yaml", "train:\n  stpes: 7\n");
  const auto msg = error_of([&] { load_config(f, {}); });
  EXPECT_NE(msg.find(f), std::string::npos) << msg;
  EXPECT_NE(msg.find("'train.stpes'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'train.steps'"), std::string::npos) << msg;
  const auto msg2 = error_of([] { load_config("", {"parallel.zero_stag=3"}); });
  EXPECT_NE(msg2.find("did you mean 'parallel.zero_stage'"), std::string::npos) << msg2;
}

TEST(Config, WrongTypesAndRangesNameKeyValueAndAllowed) {
  auto msg = error_of([] { load_config("", {"train.steps=ten"}); });
  EXPECT_NE(msg.find("train.steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ten' is not an integer"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"train.lr=-1"}); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"parallel.strategy=fsdp"}); });
  EXPECT_NE(msg.find("optim_grads_params"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"run.progress=maybe"}); });
  EXPECT_NE(msg.find("not a boolean"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"train.steps"}); });
  EXPECT_NE(msg.find("expected key=value"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"train.seq_len=512", "model.max_seq_len=256"}); });
  EXPECT_NE(msg.find("train.seq_len (512) exceeds model.max_seq_len (256)"), std::string::npos) << msg;
  msg = error_of([] { load_config("/nonexistent/x.yaml", {}); });
  EXPECT_NE(msg.find("/nonexistent/x.yaml"), std::string::npos) << msg;
}

TEST(Config, ZeroStageAliasAndItsConflicts) {
  EXPECT_EQ(load_config("", {"parallel.zero_stage=2"}).parallel.strategy, Strategy::OptimGrads);
  EXPECT_EQ(load_config("", {"parallel.zero_stage=0"}).parallel.strategy, Strategy::NoShard);
  // The same source giving both, differently, is an error...
  auto msg = error_of([] { load_config("", {"parallel.strategy=optim", "parallel.zero_stage=3"}); });
  EXPECT_NE(msg.find("contradicts"), std::string::npos) << msg;
  // ...while --set overrides what a file says.
  const auto dir = zeroshard::testing::make_temp_dir("cfg");
  const auto f = write_yaml(dir, "s.yaml", "parallel:\n  strategy: optim\n");
  EXPECT_EQ(load_config(f, {"parallel.zero_stage=3"}).parallel.strategy, Strategy::OptimGradsParams);
  EXPECT_EQ(load_config(f, {}).parallel.strategy, Strategy::Optim);
}

TEST(Config, GlobalBatchMustDivideByRanksTimesMicroBatch) {
  auto c = load_config("", {"train.global_batch_size=24", "train.micro_batch_size=4"});
  TrainConfig at3 = c;
  apply_world_size(at3, 3, 3);
  EXPECT_EQ(at3.train.grad_accum, 2);
  TrainConfig at4 = c;
  EXPECT_EQ(error_of([&] { apply_world_size(at4, 4, 4); }),
            "train.global_batch_size=24 is not a multiple of world size 4 x train.micro_batch_size 4 = 16");
  auto both = load_config("", {"train.global_batch_size=24", "train.micro_batch_size=4", "train.grad_accum=3"});
  EXPECT_NE(error_of([&] { apply_world_size(both, 3, 3); }).find("contradicts"), std::string::npos);
}

TEST(Config, HybridShardGroupDefaultsToOneHostAndMustDivideTheWorld) {
  auto c = load_config("", {"parallel.hybrid=true"});
  TrainConfig two_hosts = c;
  apply_world_size(two_hosts, 4, 2);  // 2 hosts x 2 ranks
  EXPECT_EQ(two_hosts.parallel.shard_group_size, 2);
  TrainConfig odd = load_config("", {"parallel.hybrid=true", "parallel.shard_group_size=3"});
  EXPECT_EQ(error_of([&] { apply_world_size(odd, 4, 4); }),
            "parallel.shard_group_size=3 does not divide the world size 4: hybrid sharding holds one copy of the "
            "model per group of that many ranks");
  EXPECT_NE(error_of([] { load_config("", {"parallel.shard_group_size=2"}); }).find("set parallel.hybrid: true"),
            std::string::npos);
}

TEST(Config, CheckpointAndFaultKeysAreValidated) {
  EXPECT_NE(error_of([] { load_config("", {"train.on_nonfinite=ignore"}); }).find("expected one of: abort skip"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_config("", {"train.save_evry=5"}); }).find("did you mean 'train.save_every'"),
            std::string::npos);
  EXPECT_NE(error_of([] { load_config("", {"model.init_from=/nonexistent.safetensors"}); })
                .find("model.init_from: file '/nonexistent.safetensors' does not exist"),
            std::string::npos);
}

TEST(Config, SpeedKeysAreTypedAndCheckedAgainstEachOther) {
  auto c = load_config("", {"mixed_precision.reduce_dtype=bf16", "mixed_precision.bf16_matmul=via_fp32",
                            "parallel.max_live_units=3", "parallel.persistence_threshold=100000",
                            "parallel.reduce_bucket_bytes=4194304"});
  EXPECT_EQ(c.mixed_precision.reduce_dtype, DType::BF16);
  EXPECT_EQ(c.mixed_precision.bf16_matmul, Bf16Matmul::ViaFp32);
  EXPECT_TRUE(c.parallel.prefetch) << "ZeRO-3 prefetches by default";
  EXPECT_EQ(c.parallel.max_live_units, 3);
  EXPECT_EQ(c.parallel.persistence_threshold, 100000);
  EXPECT_EQ(c.parallel.reduce_bucket_bytes, 4194304);
  auto msg = error_of([] { load_config("", {"mixed_precision.reduce_dtype=fp16"}); });
  EXPECT_NE(msg.find("mixed_precision.reduce_dtype"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"mixed_precision.bf16_matmul=amx"}); });
  EXPECT_NE(msg.find("via_fp32"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"parallel.max_live_units=0"}); });
  EXPECT_NE(msg.find("parallel.max_live_units"), std::string::npos) << msg;
  // A bound on what prefetch gathers ahead means nothing without prefetch: an error, not ignored.
  msg = error_of([] { load_config("", {"parallel.prefetch=false", "parallel.max_live_units=4"}); });
  EXPECT_NE(msg.find("set parallel.prefetch: true"), std::string::npos) << msg;
}

TEST(Config, KeysOfAnotherSeriesNameTheirSeriesAndEveryKeyHasHelp) {
  auto msg = error_of([] { load_config("", {"vae.z_channels=8"}); });
  EXPECT_NE(msg.find("vae.z_channels=8 applies to model.series: vae, flux, not llama"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"model.series=vae", "model.dim=64"}); });
  EXPECT_NE(msg.find("model.dim=64 applies to model.series: llama, moe, not vae"), std::string::npos) << msg;
  msg = error_of([] { load_config("", {"model.series=gpt5"}); });
  EXPECT_NE(msg.find("'gpt5' is not a model series (registered: llama"), std::string::npos) << msg;
  // The series is read first, wherever it comes: its keys may precede it.
  EXPECT_EQ(load_config("", {"vae.z_channels=8", "model.series=vae"}).series, "vae");
}

TEST(Config, EveryKeyHasATypeAllowedValuesAndHelp) {
  TrainConfig c;
  const ConfigKeys keys = config_keys(c);
  EXPECT_GT(keys.all().size(), 50u);
  for (const auto& k : keys.all()) {
    EXPECT_FALSE(k.help.empty()) << k.name;
    EXPECT_FALSE(k.allowed.empty()) << k.name;
    // Printing and parsing back gives the same value.
    const std::string v = k.get();
    k.set(v);
    EXPECT_EQ(k.get(), v) << k.name;
  }
}

TEST(Config, ASavedConfigRebuildsItsModelAndNamesWhatDiffers) {
  TrainConfig c = load_config("", {"model.dim=64", "lora.rank=2", "model.init_from=", "train.steps=3"});
  const nlohmann::json saved = config_to_json(c, 2);
  const TrainConfig back = load_config("", model_overrides(saved));
  EXPECT_EQ(back.series_config<zeroshard::models::LlamaSeriesConfig>().llama.dim, 64);
  EXPECT_EQ(back.lora.rank, 2);
  EXPECT_EQ(back.train.steps, TrainConfig().train.steps) << "training keys are not the model's";
  EXPECT_TRUE(model_differences(back, saved).empty());
  const TrainConfig other = load_config("", {"model.dim=32"});
  const auto diffs = model_differences(other, saved);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0], "model.dim: checkpoint 64, this run 32");
}

// docs/configs.md: a relative path written in a config file is relative to that file's folder
// (each file of a `base:` chain its own), one given by --set to the working directory; absolute
// paths, and the weights among a paths list's items, are kept as written.
TEST(Config, PathsInAFileAreRelativeToItsFolderOnTheCommandLineToTheWorkingDirectory) {
  namespace fs = std::filesystem;
  const auto dir = zeroshard::testing::make_temp_dir("cfg_paths");
  fs::create_directories(dir + "/sub");
  write_yaml(dir + "/sub", "base.yaml",
             "model:\n  series: qwen3\ndata:\n  tokenizer: tok\n  inputs: [a.jsonl, /abs/b.txt, ../c]\n"
             "  datasets: [0.7, corpus_a, 0.3, /abs/corpus_b]\n  output: ../out/x\nrun:\n  dir: runs/r\n");
  const auto child = write_yaml(dir, "child.yaml", "base: sub/base.yaml\nrun:\n  dir: here\nmodel:\n  init_from: ''\n");
  std::map<std::string, std::string> v;
  for (const auto& [key, value] : config_items(load_model_config(child, {"data.output=rel/y"}))) v[key] = value;
  EXPECT_EQ(v["data.tokenizer"], dir + "/sub/tok");
  EXPECT_EQ(v["data.inputs"], dir + "/sub/a.jsonl,/abs/b.txt," + dir + "/c");
  EXPECT_EQ(v["data.datasets"], "0.7," + dir + "/sub/corpus_a,0.3,/abs/corpus_b");
  EXPECT_EQ(v["data.output"], "rel/y");
  EXPECT_EQ(v["run.dir"], dir + "/here");
  EXPECT_EQ(v["model.init_from"], "");
  // The same file named by a relative path: the values are relative to the working directory.
  const std::string rel = fs::relative(child, fs::current_path()).string();
  for (const auto& [key, value] : config_items(load_model_config(rel, {}))) v[key] = value;
  EXPECT_TRUE(fs::path(v["data.tokenizer"]).is_relative()) << v["data.tokenizer"];
  EXPECT_EQ(fs::weakly_canonical(v["data.tokenizer"]), fs::weakly_canonical(dir + "/sub/tok"));
  EXPECT_EQ(fs::weakly_canonical(v["data.output"]), fs::weakly_canonical(dir + "/out/x"));
  // `config keys` says which keys are paths.
  TrainConfig c = load_model_config(child, {});
  const ConfigKeys keys = config_keys(c);
  EXPECT_EQ(keys.get("data.tokenizer", "").type, "path");
  EXPECT_EQ(keys.get("data.datasets", "").type, "paths");
  EXPECT_EQ(keys.get("model.init_from", "").type, "path");
  EXPECT_EQ(keys.get("data.text_split", "").type, "string");
}
