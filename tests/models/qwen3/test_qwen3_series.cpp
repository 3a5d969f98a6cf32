// The qwen3 / qwen3_moe series end to end through the zeroshard binary: the published sizes of
// configs/qwen3, `prepare` (W-independent bytes, bad records named by file:line), four strategies
// bitwise identical at W = 3 with accumulation and clipping on a mix of two prepared corpora,
// exact resume mid-epoch, chat fine-tuning with packing, and the Hugging Face folder round trip.
#include "models/qwen3/model.h"
#include "models/qwen3/series.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "train/config.h"
#include "zeroshard/nn/deferred.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ZS_SOURCE_DIR;
const std::string kBinary = ZS_BINARY;
const std::string kTokenizer = kSource + "/tests/models/qwen3/data/tiny_tokenizer";

std::string config(const std::string& name) { return kSource + "/configs/qwen3/" + name; }

// `zeroshard prepare` on the tiny tokenizer; returns the exit code, output in *out.
int prepare(const std::string& args, int nproc, std::string* out) {
  return run_command(kBinary + " prepare --nproc " + std::to_string(nproc) + " --config " + config("base.yaml") +
                         " --set data.tokenizer=" + kTokenizer + " " + args,
                     out);
}

// Two corpora, prepared once per test binary: the Debian license texts (plain text, one document
// per paragraph) and a generated jsonl of `text` records.
struct Corpora {
  std::string dir, licenses, jsonl;
};

const Corpora& corpora() {
  static const Corpora c = [] {
    Corpora r;
    r.dir = make_temp_dir("qwen3_corpora");
    std::ofstream f(r.dir + "/docs.jsonl");
    for (int i = 0; i < 400; ++i) {
      nlohmann::json j = {{"id", i},
                          {"text", "Document " + std::to_string(i) + ": the quick brown fox jumps over " +
                                       std::to_string(i * 7 % 13) + " lazy dogs.\nIt's done — 完了 (" +
                                       std::to_string(i * i) + ")."}};
      f << j.dump() << "\n";
    }
    f.close();
    std::string out;
    r.licenses = r.dir + "/licenses";
    r.jsonl = r.dir + "/docs";
    EXPECT_EQ(prepare("--set data.output=" + r.licenses, 2, &out), 0) << out;
    EXPECT_EQ(prepare("--set data.inputs=" + r.dir + "/docs.jsonl --set data.output=" + r.jsonl, 2, &out), 0) << out;
    return r;
  }();
  return c;
}

std::string train_args(const std::string& cfg) {
  const Corpora& c = corpora();
  return "--config " + config(cfg) + " --set data.tokenizer=" + kTokenizer + " --set data.datasets=0.7," + c.licenses +
         ",0.3," + c.jsonl + " --set run.progress=false";
}

int64_t deferred_count(const std::string& yaml) {
  const train::TrainConfig cfg = train::load_config(config(yaml), {});
  const auto q = cfg.series_config<models::qwen3::QwenSeriesConfig>().qwen();
  nn::DeferredInit deferred;
  models::qwen3::QwenForCausalLM model(q, /*lm_head=*/true);
  return model->num_params();
}

}  // namespace

TEST(Qwen3Series, ConfigsHaveThePublishedParameterCounts) {
  // config.json arithmetic of Qwen/Qwen3-*: e.g. 0.6B = 151936 x 1024 (tied) + 28 x 15,730,944 + 1024.
  EXPECT_EQ(deferred_count("0.6b.yaml"), 596049920);
  EXPECT_EQ(deferred_count("4b.yaml"), 4022468096);
  EXPECT_EQ(deferred_count("8b.yaml"), 8190735360);
  EXPECT_EQ(deferred_count("30b_a3b.yaml"), 30532122624);
}

TEST(Qwen3Series, PrepareIsIndependentOfTheRankCountAndNamesBadRecords) {
  const Corpora& c = corpora();
  std::string out;
  const std::string one = c.dir + "/docs_w1";
  ASSERT_EQ(prepare("--set data.inputs=" + c.dir + "/docs.jsonl --set data.output=" + one, 1, &out), 0) << out;
  for (const char* ext : {".bin", ".idx"}) {
    EXPECT_TRUE(read_text(one + ext) == read_text(c.jsonl + ext)) << ext << " differs between W = 1 and W = 2";
  }
  const nlohmann::json meta = nlohmann::json::parse(read_text(c.jsonl + ".json"));
  EXPECT_EQ(meta.value("documents", int64_t{0}), 400) << meta.dump();

  const std::string dir = make_temp_dir("qwen3_bad");
  std::ofstream(dir + "/bad.jsonl") << "{\"text\": \"fine\"}\n{not json\n";
  EXPECT_NE(prepare("--set data.inputs=" + dir + "/bad.jsonl --set data.output=" + dir + "/bad", 1, &out), 0);
  EXPECT_NE(out.find("bad.jsonl:2"), std::string::npos) << out;
  std::ofstream(dir + "/chat.jsonl") << R"({"messages": [{"role": "user", "content": "hi"}]})" << "\n";
  EXPECT_NE(prepare("--set data.kind=chat --set data.inputs=" + dir + "/chat.jsonl --set data.output=" + dir + "/chat", 1,
                    &out),
            0);
  EXPECT_NE(out.find("chat.jsonl:1"), std::string::npos) << out;
  EXPECT_NE(out.find("no assistant"), std::string::npos) << out;
  // A tokenizer with more ids than the model has embedding rows.
  EXPECT_NE(prepare("--set model.vocab_size=300 --set data.output=" + dir + "/v", 1, &out), 0);
  EXPECT_NE(out.find("model.vocab_size"), std::string::npos) << out;

  // Skip mode with an invalid UTF-8 byte in a record: skipped and named by file:line, the report
  // stays JSON; the other records are prepared.
  std::ofstream(dir + "/utf8.jsonl") << "{\"text\": \"fine\"}\n{\"text\": \"bad \xff byte\"}\n{\"text\": \"also fine\"}\n";
  for (int world : {1, 2}) {
    ASSERT_EQ(prepare("--set data.on_bad_record=skip --set data.inputs=" + dir + "/utf8.jsonl --set data.output=" + dir +
                          "/utf8_" + std::to_string(world),
                      world, &out),
              0)
        << out;
    EXPECT_NE(out.find("2 documents"), std::string::npos) << out;
    EXPECT_NE(out.find("utf8.jsonl:2"), std::string::npos) << out;
  }
  // An empty file and a file of bad records only: refused at prepare naming the file, nothing left.
  std::ofstream(dir + "/empty.jsonl") << "";
  std::ofstream(dir + "/allbad.jsonl") << "{not json\n[1]\n";
  for (const char* name : {"empty", "allbad"}) {
    for (int world : {1, 2}) {
      const std::string output = dir + "/out_" + name + std::to_string(world);
      EXPECT_NE(prepare(std::string("--set data.on_bad_record=skip --set data.inputs=") + dir + "/" + name +
                            ".jsonl --set data.output=" + output,
                        world, &out),
                0)
          << out;
      EXPECT_NE(out.find(dir + "/" + name + ".jsonl"), std::string::npos) << out;
      for (const auto& e : fs::directory_iterator(dir)) {
        EXPECT_EQ(e.path().filename().string().rfind("out_", 0), std::string::npos) << "left behind: " << e.path();
      }
    }
  }
}

TEST(Qwen3Series, FourStrategiesAgreeBitwiseAtW3) {
  const std::string common =
      " --set train.steps=6 --set train.micro_batch_size=2 --set train.grad_accum=2 --set train.clip_grad_norm=0.5";
  ParityOptions o;
  o.small_model = false;
  o.final_shards = true;
  expect_identical_strategies(train_args("base.yaml") + common, 3, 6, "qwen3", o);
  const auto moe = expect_identical_strategies(train_args("moe.yaml") + common, 3, 6, "qwen3_moe", o);
  ASSERT_FALSE(HasFailure());
  for (const auto& m : moe[0].metrics) ASSERT_TRUE(m.contains("aux_loss")) << m.dump();
}

TEST(Qwen3Series, ResumesExactlyMidEpoch) {
  const std::string common = train_args("moe.yaml") + " --set train.steps=8 --set train.micro_batch_size=2" +
                             " --set train.grad_accum=2 --set run.dump_final_shards=true";
  const TrainRun full = train_series(common + " --set train.save_every=4", 2, "qwen3_resume_full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  const TrainRun resumed =
      train_series(common + " --resume " + full.dir + "/checkpoints/step_00000004", 2, "qwen3_resume_half");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_EQ(resumed.metrics.size(), 4u);
  EXPECT_EQ(resumed.metrics.front()["step"], 5);
  const auto all = loss_texts(full), second = loss_texts(resumed);
  EXPECT_EQ(std::vector<std::string>(all.begin() + 4, all.end()), second);
  for (int r = 0; r < 2; ++r) {
    const std::string f = "/final_shard.rank" + std::to_string(r) + ".bin";
    ASSERT_TRUE(fs::exists(full.dir + f)) << f;
    EXPECT_TRUE(read_text(full.dir + f) == read_text(resumed.dir + f)) << f;
  }
}

TEST(Qwen3Series, ChatFineTuningWithPackingTrainsOnAssistantTokens) {
  const std::string dir = make_temp_dir("qwen3_chat");
  {
    std::ofstream f(dir + "/chat.jsonl");
    for (int i = 0; i < 60; ++i) {
      nlohmann::json m = nlohmann::json::array();
      if (i % 3 == 0) m.push_back({{"role", "system"}, {"content", "You are terse."}});
      m.push_back({{"role", "user"}, {"content", "What is " + std::to_string(i) + " plus " + std::to_string(i) + "?"}});
      m.push_back({{"role", "assistant"}, {"content", std::to_string(2 * i) + "."}});
      f << nlohmann::json({{"messages", m}}).dump() << "\n";
    }
  }
  std::string out;
  ASSERT_EQ(prepare("--set data.kind=chat --set data.inputs=" + dir + "/chat.jsonl --set data.output=" + dir + "/chat", 2,
                    &out),
            0)
      << out;
  const nlohmann::json meta = nlohmann::json::parse(read_text(dir + "/chat.json"));
  const int64_t tokens = meta.value("tokens", int64_t{0}), targets = meta.value("target_tokens", int64_t{0});
  EXPECT_GT(targets, 0) << meta.dump();
  EXPECT_LT(targets * 2, tokens) << "only the assistant turns are targets: " << meta.dump();
  ParityOptions o;
  o.small_model = false;
  const std::string args = "--config " + config("base.yaml") + " --set data.tokenizer=" + kTokenizer +
                           " --set data.datasets=" + dir + "/chat --set data.packing=true --set train.seq_len=64" +
                           " --set train.steps=4 --set train.grad_accum=2 --set run.progress=false";
  const auto runs = expect_identical_strategies(args, 2, 4, "qwen3_chat", o);
  ASSERT_FALSE(HasFailure());
  int64_t step_targets = 0;
  for (const auto& m : runs[0].metrics) step_targets += m.value("target_tokens", int64_t{0});
  EXPECT_GT(step_targets, 0);
}

TEST(Qwen3Series, HuggingFaceFolderRoundTripsBitwise) {
  const TrainRun base = train_series(train_args("base.yaml") + " --set train.steps=3", 2, "qwen3_hf_base");
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::string dir = make_temp_dir("qwen3_hf"), a = dir + "/a", b = dir + "/b";
  std::string out;
  ASSERT_EQ(run_command(kBinary + " export --format hf " + base.dir + " " + a + " --max-file-mb 0.3", &out), 0) << out;
  ASSERT_TRUE(fs::exists(a + "/model.safetensors.index.json")) << out;
  ASSERT_TRUE(fs::exists(a + "/model-00002-of-00003.safetensors")) << "several shards: " << out;
  // From the folder with a zero learning rate (AdamW leaves every weight as it is), then out again.
  const TrainRun again = train_series(train_args("base.yaml") + " --set model.from_hf=" + a +
                                          " --set train.steps=1 --set train.lr=0 --set train.min_lr=0"
                                          " --set train.warmup_steps=0",
                                      2, "qwen3_hf_again");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  ASSERT_EQ(run_command(kBinary + " export --format hf " + again.dir + " " + b + " --max-file-mb 0.3", &out), 0) << out;
  int files = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(read_text(e.path().string()) == read_text(b + "/" + name)) << name << " differs after the round trip";
    ++files;
  }
  EXPECT_GE(files, 6);
  // The first step from the folder starts from the trained weights, not a fresh init.
  EXPECT_LT(again.metrics.front()["loss"].get<double>(), base.metrics.front()["loss"].get<double>());
}

TEST(Qwen3Series, SeedWeightsInTheReleasedLayoutTrainInPlaceBitwiseAsTheSeededModel) {
  const std::string keys = expect_seeded_folders_train_as_seeded(train_args("lora.yaml"), "qwen3_seed_weights");
  EXPECT_NE(keys.find("model.from_hf="), std::string::npos) << keys;  // config.json + the weights
}
