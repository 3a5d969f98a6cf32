// safetensors export and import: exact round trips, a file written by another tool, an
// independent Python reader, lying headers; and deferred (memory-free) model construction.
#include "checkpoint/checkpoint.h"
#include "io/safetensors.h"
#include "models/llama/llama.h"
#include "support/spawn.h"
#include "support/train_run.h"
#include "zeroshard/nn/deferred.h"
#include "zeroshard/shard.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

// Debian's python3 (python3-torch), whatever python3 comes first on PATH.
const std::string kChecker = std::string("/usr/bin/python3 ") + ZS_SOURCE_DIR + "/tests/io/check_safetensors.py";

// Every tensor of `expected` is in `actual` with equal float32 values.
void expect_same_tensors(const std::string& expected, const std::string& actual) {
  io::SafetensorsFile a(expected), b(actual);
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const auto& e : a.entries()) {
    ASSERT_NE(b.find(e.name), nullptr) << e.name;
    EXPECT_TRUE(at::equal(a.read(e.name).to(at::kFloat), b.read(e.name).to(at::kFloat))) << e.name;
  }
}

}  // namespace

TEST(Safetensors, ExportIsExactAndAnIndependentReaderAgrees) {
  TrainRun run = train(" --set train.steps=3", 2, "export_src");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string f32 = run.dir + "/model.safetensors", b16 = run.dir + "/model.bf16.safetensors";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + run.dir + " " + f32, &out), 0) << out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + run.dir + " " + b16 + " --dtype bf16", &out), 0) << out;
  const std::string ckpt = ckpt::resolve_checkpoint(run.dir);
  ASSERT_EQ(run_command(kChecker + " verify " + f32 + " " + ckpt, &out), 0) << out;
  EXPECT_NE(out.find("OK "), std::string::npos) << out;
  ASSERT_EQ(run_command(kChecker + " verify " + b16 + " " + ckpt + " --dtype bf16", &out), 0) << out;

  // Import into other world sizes and strategies: the initial weights are the file, exactly.
  for (const auto& [W, strategy] : std::vector<std::pair<int, std::string>>{{3, "optim_grads_params"}, {2, "no_shard"}}) {
    TrainRun imported = train(" --set train.steps=1 --set run.dump_init=true --set model.init_from=" + f32 +
                                  " --set parallel.strategy=" + strategy,
                              W, "import");
    ASSERT_EQ(imported.exit_code, 0) << imported.output;
    expect_same_tensors(f32, imported.dir + "/init.safetensors");
  }
}

TEST(Safetensors, MultiFileExportWithIndexRoundTrips) {
  TrainRun run = train(" --set train.steps=2", 2, "multi_export");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  std::string out;
  const std::string single = run.dir + "/model.safetensors", multi = run.dir + "/split/model.safetensors";
  fs::create_directories(run.dir + "/split");
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + run.dir + " " + single, &out), 0) << out;
  // At most 64 KiB per file: the small model's ~220 KB of weights spread over several files.
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + run.dir + " " + multi + " --max-file-mb 0.0625", &out), 0)
      << out;
  int files = 0;
  for (const auto& e : fs::directory_iterator(run.dir + "/split")) {
    if (e.path().filename().string().rfind("model-0", 0) == 0) ++files;
  }
  EXPECT_GE(files, 3) << out;
  const nlohmann::json index = nlohmann::json::parse(read_text(multi + ".index.json"));
  EXPECT_EQ(index["weight_map"].size(), io::SafetensorsFile(single).entries().size());
  TrainRun imported = train(" --set train.steps=1 --set run.dump_init=true --set model.init_from=" + multi + ".index.json",
                            3, "import_multi");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  expect_same_tensors(single, imported.dir + "/init.safetensors");

  // An index that points a tensor at a file that does not hold it.
  nlohmann::json bad = index;
  const std::string victim = bad["weight_map"].begin().key();
  std::string other_file;
  for (const auto& [name, file] : bad["weight_map"].items()) {
    if (file != bad["weight_map"][victim]) other_file = file.get<std::string>();
  }
  bad["weight_map"][victim] = other_file;
  const std::string bad_index = run.dir + "/split/bad.safetensors.index.json";
  std::ofstream(bad_index) << bad.dump();
  TrainRun refused = train(" --set train.steps=1 --set model.init_from=" + bad_index, 2, "import_bad_index");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("maps tensor '" + victim + "' to " + run.dir + "/split/" + other_file +
                                ", which does not hold it"),
            std::string::npos)
      << refused.output;
}

TEST(Safetensors, ImportsAFileWrittenByAnotherTool) {
  TrainRun run = train(" --set train.steps=1 --set run.dump_init=true", 1, "other_tool");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string other = run.dir + "/other.safetensors";
  std::string out;
  ASSERT_EQ(run_command(kChecker + " write " + other + " " + run.dir + "/init.safetensors", &out), 0) << out;
  TrainRun imported = train(" --set train.steps=1 --set run.dump_init=true --set model.init_from=" + other, 2, "import_other");
  ASSERT_EQ(imported.exit_code, 0) << imported.output;
  expect_same_tensors(other, imported.dir + "/init.safetensors");  // BF16 values, exactly representable in F32
}

TEST(Safetensors, HeadersThatLieAboutOffsetsAreRejectedNamingFileAndTensor) {
  TrainRun run = train(" --set train.steps=1 --set run.dump_init=true", 1, "lying");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::string good = run.dir + "/init.safetensors";
  const std::string name = "layers.1.attention.wk.weight";
  for (const std::string how : {"size", "overlap"}) {
    const std::string bad = run.dir + "/lying_" + how + ".safetensors";
    std::string out;
    ASSERT_EQ(run_command(kChecker + " lie " + good + " " + bad + " " + name + " " + how, &out), 0) << out;
    TrainRun r = train(" --set train.steps=1 --set model.init_from=" + bad, 2, "lying_run");
    EXPECT_NE(r.exit_code, 0) << how;
    EXPECT_NE(r.output.find(bad), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("'" + name + "'"), std::string::npos) << r.output;
  }
  // A truncated file, and a file for another model.
  const std::string cut = run.dir + "/cut.safetensors";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) - 1000);
  TrainRun r = train(" --set train.steps=1 --set model.init_from=" + cut, 2, "cut_run");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(cut), std::string::npos) << r.output;
  TrainRun other = train(" --set train.steps=1 --set model.ffn_hidden=64 --set model.init_from=" + good, 2, "other_model");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("tensor 'layers.0.feed_forward.w1.weight' has shape [100, 48] but the model expects [64, 48]"),
            std::string::npos)
      << other.output;
}

TEST(Deferred, ModelHoldsNoParameterBytesAndMaterializesTheEagerValues) {
  models::LlamaConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.ffn_hidden = 64;
  models::Llama eager(c);
  eager->reset_parameters(11);
  models::Llama lazy{nullptr};
  {
    nn::DeferredInit deferred;
    lazy = models::Llama(c);
  }
  for (const auto& p : lazy->parameters()) EXPECT_TRUE(nn::is_deferred(p));
  for (const std::string s : {"no_shard", "optim_grads_params"}) {
    models::Llama model{nullptr};
    {
      nn::DeferredInit deferred;
      model = models::Llama(c);
    }
    ShardOptions o(parse_strategy(s));
    EXPECT_THROW(fully_shard(model.ptr(), make_local_communicator(), o), std::invalid_argument)
        << "a deferred model without a source must be refused";
    o.param_source = param_source_from_init([&](const std::string& n, at::Tensor& t) { models::llama_init(c, 11, n, t); });
    auto sharded = fully_shard(model.ptr(), make_local_communicator(), o);
    auto expected = eager->named_parameters();
    sharded->for_each_full_parameter([&](const std::string& name, const at::Tensor& t) {
      EXPECT_TRUE(at::equal(t, expected[name])) << s << ": " << name;
    });
  }
}
