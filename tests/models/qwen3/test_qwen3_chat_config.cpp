// configs/qwen3/chat.yaml as a user runs it: the file parses to a chat corpus with packing, and
// `prepare` + `train --nproc 2` work from the repository root with the file's own paths (the
// example conversations in examples/data, the tiny tokenizer) and only the output folders moved
// to a temporary directory. Packing is checked against the same run without it: the same
// conversations, more assistant (target) tokens per step when several share a sequence. The
// series' model FLOPs (the TFLOP/s and MFU figures) are checked against a count of the model's
// own weight matrices.
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
#include <set>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = ZS_SOURCE_DIR;
const std::string kBinary = ZS_BINARY;
const std::string kChatConfig = "configs/qwen3/chat.yaml";  // relative: the commands run in kSource

// Runs `zeroshard ARGS` in the repository root (where the config's relative paths point).
int zeroshard_in_source(const std::string& args, std::string* out) {
  return run_command("cd " + kSource + " && " + kBinary + " " + args, out);
}

int64_t count_lines(const std::string& path) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

// A training run of chat.yaml on the prepared corpus `data`; the metrics of rank 0.
TrainRun train_chat(const std::string& data, const std::string& extra, const std::string& tag) {
  TrainRun r;
  r.dir = make_temp_dir(tag);
  r.exit_code = zeroshard_in_source("train --nproc 2 --config " + kChatConfig + " --set data.output=" + data +
                                        " --set run.dir=" + r.dir +
                                        " --set train.steps=6 --set train.log_every=1 --set run.progress=false " + extra,
                                    &r.output);
  read_metrics(r);
  return r;
}

int64_t total_targets(const TrainRun& r) {
  int64_t n = 0;
  for (const auto& m : r.metrics) n += m.value("target_tokens", int64_t{0});
  return n;
}

}  // namespace

TEST(Qwen3ChatConfig, ParsesToAPackedChatCorpus) {
  const train::TrainConfig cfg = train::load_config(kSource + "/" + kChatConfig, {});
  EXPECT_EQ(cfg.series, "qwen3");
  const auto& s = cfg.series_config<models::qwen3::QwenSeriesConfig>();
  EXPECT_EQ(s.kind, "chat");
  EXPECT_TRUE(s.packing);
  // The config's paths are relative to its folder: resolved against an absolute config path.
  EXPECT_EQ(s.inputs, kSource + "/examples/data/qwen3_chat.jsonl");
  EXPECT_TRUE(fs::exists(s.inputs)) << "data.inputs=" << s.inputs;
  EXPECT_TRUE(fs::exists(s.tokenizer)) << "data.tokenizer=" << s.tokenizer;
}

TEST(Qwen3ChatConfig, PreparesAndTrainsOnAssistantTokensWithPacking) {
  const train::TrainConfig cfg = train::load_config(kSource + "/" + kChatConfig, {});
  const std::string inputs = cfg.series_config<models::qwen3::QwenSeriesConfig>().inputs;
  const std::string dir = make_temp_dir("qwen3_chat_config"), data = dir + "/chat";
  std::string out;
  ASSERT_EQ(zeroshard_in_source("prepare --nproc 2 --config " + kChatConfig + " --set data.output=" + data, &out), 0)
      << out;
  const nlohmann::json meta = nlohmann::json::parse(read_text(data + ".json"));
  EXPECT_EQ(meta.value("kind", std::string()), "chat") << meta.dump();
  EXPECT_EQ(meta.value("documents", int64_t{-1}), count_lines(inputs)) << "one document per conversation: " << meta.dump();
  const int64_t tokens = meta.value("tokens", int64_t{0}), targets = meta.value("target_tokens", int64_t{0});
  EXPECT_GT(targets, 0) << meta.dump();
  EXPECT_LT(targets, tokens) << "system and user turns and the template are context, not targets: " << meta.dump();

  const TrainRun packed = train_chat(data, "", "qwen3_chat_packed");
  ASSERT_EQ(packed.exit_code, 0) << packed.output;
  ASSERT_EQ(packed.metrics.size(), 6u) << packed.output;
  for (const auto& m : packed.metrics) {
    EXPECT_GT(m.value("target_tokens", int64_t{0}), 0) << m.dump();
    EXPECT_EQ(m.value("truncated_sequences", int64_t{-1}), 0) << "chat.yaml's seq_len fits every example: " << m.dump();
  }
  // Learning: the loss of the last step below the first (lr 2e-3 from a random init).
  EXPECT_LT(packed.metrics.back()["loss"].get<double>(), packed.metrics.front()["loss"].get<double>());

  // Model FLOPs per token, as torchtitan counts them: 6 per weight of every matrix a token goes
  // through (chat.yaml's model ties its embedding: that matrix once, as the output projection),
  // plus 12 * layers * heads * head_dim * seq_len for the attention scores and values. Counted
  // here from the parameter shapes of the model the config builds; tflops_per_rank is that
  // times tokens/s over the 2 ranks.
  const auto& series = cfg.series_config<models::qwen3::QwenSeriesConfig>();
  const models::qwen3::QwenConfig q = series.qwen();
  ASSERT_TRUE(q.tie_word_embeddings) << "the count below assumes a tied embedding";
  double matrix_weights = 0;
  {
    nn::DeferredInit deferred;
    models::qwen3::QwenForCausalLM model(q, /*lm_head=*/true);
    std::set<const void*> seen;  // the tied head registers the embedding's tensor a second time
    for (const auto& p : model->named_parameters(/*recurse=*/true)) {
      if (p.value().dim() != 2 || !seen.insert(p.value().unsafeGetTensorImpl()).second) continue;
      matrix_weights += static_cast<double>(p.value().numel());
    }
  }
  const double per_token = 6.0 * matrix_weights + 12.0 * static_cast<double>(q.num_hidden_layers * q.num_attention_heads *
                                                                             q.head_dim * series.seq_len);
  for (const auto& m : packed.metrics) {
    ASSERT_TRUE(m.contains("tflops_per_rank") && m.contains("mfu")) << m.dump();
    const double want = per_token * m["tokens_per_s"].get<double>() / 2.0 / 1e12;
    EXPECT_NEAR(m["tflops_per_rank"].get<double>(), want, 1e-9 * want) << m.dump();
    EXPECT_GT(m["mfu"].get<double>(), 0.0) << m.dump();
  }

  const TrainRun single = train_chat(data, "--set data.packing=false", "qwen3_chat_single");
  ASSERT_EQ(single.exit_code, 0) << single.output;
  ASSERT_EQ(single.metrics.size(), 6u) << single.output;
  EXPECT_GT(total_targets(packed), total_targets(single))
      << "packing puts several conversations (and their assistant tokens) into each sequence";
}
