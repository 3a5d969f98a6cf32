// model.frozen_storage=file: a LoRA run's frozen base read in place from the user's files
// (memory-mapped, shared by the ranks) instead of each rank's shard in memory. Through the
// zeroshard binary on the tiny Qwen3 from Hugging Face folders it exported itself (bf16 and fp32,
// several shard files): the same bits as model.frozen_storage=memory under the four strategies at
// W = 1, 2, 3 (with accumulation, clipping, activation checkpointing), for parameters used in
// place (bf16 file, bf16 compute) and converted (fp32 file under bf16; bf16 file under fp32);
// exact resume; the same export; and the faults: a tensor missing, a file written, grown or cut
// while the run reads it, a read-only mount.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ZS_SOURCE_DIR;
const std::string kBinary = ZS_BINARY;
const std::string kTokenizer = kSource + "/tests/models/qwen3/data/tiny_tokenizer";

std::string config(const std::string& name) { return kSource + "/configs/qwen3/" + name; }

// The corpus and two exports of one trained tiny Qwen3 (bf16 and fp32, three shard files each),
// made once per test binary.
struct Base {
  std::string dir, corpus, bf16, fp32;
};

const Base& base() {
  static const Base b = [] {
    Base r;
    r.dir = make_temp_dir("frozen_files");
    r.corpus = r.dir + "/licenses";
    std::string out;
    EXPECT_EQ(run_command(kBinary + " prepare --nproc 2 --config " + config("base.yaml") + " --set data.tokenizer=" +
                              kTokenizer + " --set data.output=" + r.corpus,
                          &out),
              0)
        << out;
    const TrainRun trained = train_series("--config " + config("base.yaml") + " --set data.tokenizer=" + kTokenizer +
                                              " --set data.datasets=" + r.corpus +
                                              " --set train.steps=3 --set run.progress=false",
                                          2, "frozen_files_base");
    EXPECT_EQ(trained.exit_code, 0) << trained.output;
    r.bf16 = r.dir + "/hf_bf16";
    r.fp32 = r.dir + "/hf_fp32";
    EXPECT_EQ(run_command(kBinary + " export --format hf --dtype bf16 --max-file-mb 0.1 " + trained.dir + " " + r.bf16, &out), 0)
        << out;
    EXPECT_EQ(run_command(kBinary + " export --format hf --dtype fp32 --max-file-mb 0.2 " + trained.dir + " " + r.fp32, &out), 0)
        << out;
    return r;
  }();
  return b;
}

// LoRA on the attention projections of the folder's weights; accumulation and clipping.
std::string lora_args(const std::string& folder, const std::string& dtype) {
  return "--config " + config("lora.yaml") + " --set data.tokenizer=" + kTokenizer + " --set data.datasets=" +
         base().corpus + " --set model.from_hf=" + folder + " --set mixed_precision.param_dtype=" + dtype +
         " --set train.steps=4 --set train.micro_batch_size=2 --set train.grad_accum=2 --set train.clip_grad_norm=0.5"
         " --set run.progress=false";
}

const std::string kFile = " --set model.frozen_storage=file";

// A file run gives the memory run's losses, gradient norms and final shards (frozen ones read
// back from the files), bit for bit, on every rank.
void expect_same_bits(const TrainRun& memory, const TrainRun& file, int world) {
  ASSERT_EQ(memory.exit_code, 0) << memory.output;
  ASSERT_EQ(file.exit_code, 0) << file.output;
  EXPECT_EQ(loss_texts(memory), loss_texts(file));
  for (int r = 0; r < world; ++r) {
    const std::string f = "/final_shard.rank" + std::to_string(r) + ".bin";
    ASSERT_TRUE(fs::exists(file.dir + f)) << f;
    EXPECT_TRUE(read_text(memory.dir + f) == read_text(file.dir + f)) << "rank " << r << "'s final shards differ";
  }
}

}  // namespace

TEST(FrozenFiles, InPlaceIsBitwiseTheMemoryStorageUnderFourStrategiesAtW1W2W3) {
  ParityOptions o;
  o.small_model = false;
  o.final_shards = true;
  for (int world : {1, 2, 3}) {
    // W = 3 also recomputes every block in backward (activation checkpointing).
    const std::string args = lora_args(base().bf16, "bf16") + " --set run.dump_final_shards=true" +
                             (world == 3 ? " --set train.activation_checkpointing=true" : "");
    const auto file = expect_identical_strategies(args + kFile, world, 4, "frozen_files_w" + std::to_string(world), o);
    ASSERT_FALSE(HasFailure());
    const TrainRun memory = train_series(args + " --set parallel.strategy=no_shard", world,
                                         "frozen_memory_w" + std::to_string(world));
    expect_same_bits(memory, file[0], world);
    // The frozen base is used where it lies: mapped, not in this rank's parameter bytes.
    const nlohmann::json& m = file[0].metrics.back();
    EXPECT_GT(m.value("mem_mapped_bytes", int64_t{0}), 0) << m.dump();
    EXPECT_LT(m.value("mem_params_bytes", int64_t{0}), memory.metrics.back().value("mem_params_bytes", int64_t{0}))
        << m.dump();
  }
}

TEST(FrozenFiles, ConvertedParametersAreBitwiseTheMemoryStorage) {
  // fp32 file under bf16 compute (rounded at each gather), bf16 file under fp32 compute (widened).
  for (const auto& [folder, dtype] : {std::pair<std::string, std::string>{base().fp32, "bf16"}, {base().bf16, "fp32"}}) {
    for (const std::string strategy : {"no_shard", "optim_grads_params"}) {
      const std::string args = lora_args(folder, dtype) + " --set run.dump_final_shards=true --set parallel.strategy=" + strategy;
      const std::string tag = "frozen_conv_" + dtype + "_" + strategy;
      const TrainRun memory = train_series(args, 2, tag + "_memory");
      const TrainRun file = train_series(args + kFile, 2, tag + "_file");
      expect_same_bits(memory, file, 2);
      const nlohmann::json& m = file.metrics.back();
      EXPECT_EQ(m.value("mem_mapped_bytes", int64_t{-1}), 0) << "nothing in place: " << m.dump();
      EXPECT_GT(m.value("mem_converted_bytes", int64_t{0}), 0) << "every frozen parameter converted: " << m.dump();
    }
  }
}

// model.frozen_converted=copy: the fp32 folder under bf16 compute is written once, rounded, into
// the run's converted copy and used in place from there: the memory run's bits, nothing converted
// at a gather; a second run given the same folder reuses it; resuming reads it again exactly.
TEST(FrozenFiles, AConvertedCopyIsBitwiseTheMemoryStorageAndIsReused) {
  const std::string copy_dir = make_temp_dir("frozen_copy") + "/converted";
  const std::string copy = kFile + " --set model.frozen_converted=copy --set model.frozen_copy_dir=" + copy_dir;
  for (const std::string strategy : {"no_shard", "optim_grads_params"}) {
    const std::string args = lora_args(base().fp32, "bf16") + " --set run.dump_final_shards=true --set parallel.strategy=" + strategy;
    const TrainRun memory = train_series(args, 2, "frozen_copy_memory_" + strategy);
    const TrainRun file = train_series(args + copy, 2, "frozen_copy_file_" + strategy);
    expect_same_bits(memory, file, 2);
    const nlohmann::json& m = file.metrics.back();
    EXPECT_EQ(m.value("mem_converted_bytes", int64_t{-1}), 0) << "nothing converted at a gather: " << m.dump();
    EXPECT_GT(m.value("mem_mapped_bytes", int64_t{0}), 0) << "the copy is used in place: " << m.dump();
    // The first run wrote the copy; the second found it unchanged.
    const std::string log = read_text(file.dir + "/rank0.log");
    EXPECT_NE(log.find("model.frozen_converted=copy"), std::string::npos) << log;
    if (strategy == "no_shard") {
      EXPECT_EQ(log.find("(0 unit files written"), std::string::npos) << log;
      EXPECT_NE(log.find(", 0 reused)"), std::string::npos) << log;
    } else {
      EXPECT_NE(log.find("(0 unit files written"), std::string::npos) << log;
    }
  }
  int files = 0;
  for (const auto& e : fs::directory_iterator(copy_dir)) files += e.path().extension() == ".safetensors";
  EXPECT_GT(files, 0);
  expect_exact_resume(lora_args(base().fp32, "bf16") + copy, "frozen_copy_resume");
}

TEST(FrozenFiles, ResumesExactly) { expect_exact_resume(lora_args(base().bf16, "bf16") + kFile, "frozen_files_resume"); }

TEST(FrozenFiles, ExportsWhatTheMemoryStorageExports) {
  const std::string args = lora_args(base().bf16, "bf16");
  const TrainRun memory = train_series(args, 2, "frozen_export_memory");
  const TrainRun file = train_series(args + kFile, 2, "frozen_export_file");
  ASSERT_EQ(memory.exit_code, 0) << memory.output;
  ASSERT_EQ(file.exit_code, 0) << file.output;
  const std::string out = make_temp_dir("frozen_export");
  std::string log;
  for (const std::string kind : {"memory", "file"}) {
    const std::string run = kind == "memory" ? memory.dir : file.dir;
    ASSERT_EQ(run_command(kBinary + " export --merge-lora " + run + " " + out + "/" + kind + ".safetensors", &log), 0) << log;
    ASSERT_EQ(run_command(kBinary + " export --peft " + run + " " + out + "/" + kind + "_peft", &log), 0) << log;
  }
  EXPECT_TRUE(read_text(out + "/memory.safetensors") == read_text(out + "/file.safetensors"));
  EXPECT_TRUE(read_text(out + "/memory_peft/adapter_model.safetensors") == read_text(out + "/file_peft/adapter_model.safetensors"));
}

TEST(FrozenFiles, AMissingTensorIsNamedBeforeTraining) {
  const std::string dir = make_temp_dir("frozen_missing");
  fs::copy(base().bf16, dir + "/hf", fs::copy_options::recursive);
  std::ifstream in(dir + "/hf/model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  in.close();
  const std::string dropped = "model.layers.1.mlp.down_proj.weight";
  ASSERT_EQ(index["weight_map"].erase(dropped), 1u) << index.dump();
  std::ofstream(dir + "/hf/model.safetensors.index.json") << index.dump(1);
  const TrainRun r = train_series(lora_args(dir + "/hf", "bf16") + kFile, 2, "frozen_missing_run");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(dropped), std::string::npos) << r.output;
}

// A file of the folder written to, grown or cut while a run reads it in place: the run stops
// with an error naming the file, never computing with what the file holds now.
TEST(FrozenFiles, AFileChangedDuringTheRunIsNamed) {
  const std::vector<std::pair<std::string, std::string>> changes = {
      {"written", "touch -d '2001-01-01 00:00:00' "}, {"grown", "sh -c 'printf x >> \"$0\"' "}, {"cut", "truncate -s 100 "}};
  for (const auto& [what, command] : changes) {
    const std::string dir = make_temp_dir("frozen_changed_" + what);
    fs::copy(base().bf16, dir + "/hf", fs::copy_options::recursive);
    std::vector<std::string> shards;
    for (const auto& e : fs::directory_iterator(dir + "/hf")) {
      if (e.path().extension() == ".safetensors") shards.push_back(e.path().string());
    }
    std::sort(shards.begin(), shards.end());
    ASSERT_GE(shards.size(), 2u) << "the export should have several shard files";
    const std::string victim = shards[1];
    const std::string run_dir = dir + "/run";
    auto running = std::async(std::launch::async, [&] {
      TrainRun r;
      r.dir = run_dir;
      // Bounded whatever happens: the launcher is stopped (and stops its ranks) after 240 s.
      r.exit_code = run_command("timeout -k 20 240 " + kBinary + " train --nproc 2 " + lora_args(dir + "/hf", "bf16") +
                                    kFile + " --set train.steps=20000 --set run.dir=" + run_dir,
                                &r.output);
      return r;
    });
    // After the first step (metrics.jsonl has a line), change the file.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    bool stepped = false;
    while (!stepped && std::chrono::steady_clock::now() < deadline &&
           running.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      std::ifstream m(run_dir + "/metrics.jsonl");
      std::string line;
      stepped = static_cast<bool>(std::getline(m, line)) && !line.empty();
    }
    ASSERT_TRUE(stepped) << what << ": the run never finished a step";
    std::string out;
    ASSERT_EQ(run_command(command + victim, &out), 0) << out;
    const TrainRun r = running.get();  // at most the timeout above
    EXPECT_NE(r.exit_code, 124) << what << ": the run did not stop within 240 s";
    EXPECT_NE(r.exit_code, 0) << what;
    EXPECT_NE(r.output.find(victim), std::string::npos) << what << ": " << r.output;
  }
}

// Weights on a read-only mount (a private mount namespace: unshare -m) are read as well as
// anywhere: nothing is written beside them.
TEST(FrozenFiles, ReadsFromAReadOnlyMount) {
  std::string out;
  ASSERT_EQ(run_command("unshare -m true", &out), 0) << "this test needs a mount namespace (root, as CI runs): " << out;
  const std::string dir = make_temp_dir("frozen_ro");
  fs::copy(base().bf16, dir + "/hf", fs::copy_options::recursive);
  const std::string run_dir = dir + "/run";
  const std::string train = kBinary + " train --nproc 2 " + lora_args(dir + "/hf", "bf16") + kFile +
                            " --set run.dump_final_shards=true --set run.dir=" + run_dir;
  ASSERT_EQ(run_command("unshare -m sh -c 'mount --bind " + dir + "/hf " + dir + "/hf && mount -o remount,ro,bind " +
                            dir + "/hf && touch " + dir + "/hf/probe 2>/dev/null && exit 3; " + train + "'",
                        &out),
            0)
      << out;
  TrainRun file;
  file.dir = run_dir;
  file.exit_code = 0;
  read_metrics(file);
  const TrainRun memory = train_series(lora_args(base().bf16, "bf16") + " --set run.dump_final_shards=true", 2, "frozen_ro_memory");
  expect_same_bits(memory, file, 2);
}
