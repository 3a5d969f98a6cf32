// Sharded checkpoints through the real binary: exact resume for every strategy, resharding
// across world sizes and strategies, saves killed midway, and damaged checkpoints.
#include "checkpoint/checkpoint.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

const char* const kStates[] = {"param", "exp_avg", "exp_avg_sq"};

std::string ckpt_dir(const TrainRun& r, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "/checkpoints/step_%08d", step);
  return r.dir + name;
}

// Every tensor's every state, bitwise.
void expect_same_state(const std::string& a_dir, const std::string& b_dir) {
  ckpt::Checkpoint a(a_dir), b(b_dir);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  EXPECT_EQ(a.step(), b.step());
  EXPECT_EQ(a.optimizer_steps(), b.optimizer_steps());
  for (const auto& ta : a.tensors()) {
    const ckpt::TensorRecord* tb = b.find(ta.name);
    ASSERT_NE(tb, nullptr) << ta.name;
    EXPECT_EQ(ta.shape, tb->shape) << ta.name;
    for (const char* state : kStates) {
      at::Tensor x = at::empty({ta.numel}), y = at::empty({ta.numel});
      a.read(ta, state, 0, ta.numel, x);
      b.read(*tb, state, 0, ta.numel, y);
      EXPECT_TRUE(at::equal(x, y)) << ta.name << " " << state << " differs between " << a_dir << " and " << b_dir;
    }
  }
}

}  // namespace

class Resume : public ::testing::TestWithParam<std::string> {};

TEST_P(Resume, FromStepTenReproducesTheUninterruptedRunBitwise) {
  const std::string common = " --set train.steps=20 --set train.micro_batch_size=2 --set train.grad_accum=2"
                             " --set run.dump_final_shards=true --set parallel.strategy=" + GetParam();
  TrainRun full = train(common + " --set train.save_every=10", 2, "resume_full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ASSERT_TRUE(fs::exists(ckpt_dir(full, 10) + "/manifest.json"));
  TrainRun resumed = train(common + " --resume " + ckpt_dir(full, 10), 2, "resume_half");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;

  ASSERT_EQ(resumed.metrics.size(), 10u) << "a resumed run logs steps 11..20";
  EXPECT_EQ(resumed.metrics.front()["step"], 11);
  auto full_losses = loss_texts(full);
  std::vector<std::string> second_half(full_losses.begin() + 10, full_losses.end());
  EXPECT_EQ(loss_texts(resumed), second_half);
  for (int r = 0; r < 2; ++r) {
    const std::string f = "/final_shard.rank" + std::to_string(r) + ".bin";
    EXPECT_TRUE(read_text(full.dir + f) == read_text(resumed.dir + f)) << "final parameters of rank " << r;
  }
  expect_same_state(ckpt_dir(full, 20), ckpt_dir(resumed, 20));
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, Resume,
                         ::testing::Values("no_shard", "optim", "optim_grads", "optim_grads_params"));

TEST(Reshard, FourRanksZero3LoadsIntoTwoRanksOptimAndThreeRanksNoShard) {
  // The same global batch (12 sequences) at every world size.
  TrainRun w4 = train(" --set train.steps=20 --set train.save_every=10 --set train.micro_batch_size=3"
                      " --set parallel.strategy=optim_grads_params", 4, "reshard_w4");
  ASSERT_EQ(w4.exit_code, 0) << w4.output;
  const std::string saved = ckpt_dir(w4, 10);

  // Load and save again at once (train.steps = the checkpoint's step): every state equal.
  TrainRun w2_load = train(" --set train.steps=10 --set train.micro_batch_size=6 --set parallel.strategy=optim"
                           " --resume " + saved, 2, "reshard_w2_load");
  ASSERT_EQ(w2_load.exit_code, 0) << w2_load.output;
  expect_same_state(saved, ckpt_dir(w2_load, 10));
  TrainRun w3_load = train(" --set train.steps=10 --set train.micro_batch_size=4 --set parallel.strategy=no_shard"
                           " --resume " + saved, 3, "reshard_w3_load");
  ASSERT_EQ(w3_load.exit_code, 0) << w3_load.output;
  expect_same_state(saved, ckpt_dir(w3_load, 10));
  EXPECT_EQ(ckpt::Checkpoint(ckpt_dir(w3_load, 10)).world_size(), 3);

  // And training continues as the uninterrupted 4-rank run (summation order differs).
  TrainRun w2 = train(" --set train.steps=20 --set train.micro_batch_size=6 --set parallel.strategy=optim"
                      " --resume " + saved, 2, "reshard_w2");
  ASSERT_EQ(w2.exit_code, 0) << w2.output;
  TrainRun w3 = train(" --set train.steps=20 --set train.micro_batch_size=4 --set parallel.strategy=no_shard"
                      " --resume " + saved, 3, "reshard_w3");
  ASSERT_EQ(w3.exit_code, 0) << w3.output;
  ASSERT_EQ(w2.metrics.size(), 10u);
  ASSERT_EQ(w3.metrics.size(), 10u);
  EXPECT_LT(max_rel_loss_diff(w4, w2, 10), 1e-4);
  EXPECT_LT(max_rel_loss_diff(w4, w3, 10), 1e-4);
}

TEST(SaveKilledMidway, LeavesThePreviousCheckpointWhichResumesExactly) {
  const std::string common = " --set train.steps=20 --set train.micro_batch_size=2 --set train.save_every=5";
  TrainRun clean = train(common, 2, "kill_clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  TrainRun killed = train(common + " --set debug.fail_kind=sigkill_in_save --set debug.fail_at_step=10"
                                   " --set debug.fail_rank=1", 2, "kill_save");
  ASSERT_NE(killed.exit_code, 0);
  EXPECT_NE(killed.output.find("rank 1"), std::string::npos) << killed.output;
  EXPECT_EQ(read_text(killed.dir + "/checkpoints/latest"), "step_00000005\n");
  EXPECT_FALSE(fs::exists(ckpt_dir(killed, 10))) << "a half-written checkpoint must never look complete";
  std::string inspect;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " inspect " + killed.dir, &inspect), 0) << inspect;

  // Resume from the run folder (its `latest`), in the same folder: continues at step 6.
  TrainRun resumed = train(common + " --resume " + killed.dir, 2, "", killed.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_EQ(resumed.metrics.size(), 20u) << "metrics.jsonl keeps steps 1..5 and continues";
  EXPECT_EQ(loss_texts(resumed), loss_texts(clean));
  expect_same_state(ckpt_dir(clean, 20), ckpt_dir(resumed, 20));
}

TEST(Checkpoints, SavingAStepAgainReplacesItAtomically) {
  // A run resumed from its own step-4 checkpoint with train.steps = 4 saves step 4 again.
  TrainRun r = train(" --set train.steps=4", 2, "resave");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto before = nlohmann::json::parse(read_text(ckpt_dir(r, 4) + "/manifest.json"))["files"];
  TrainRun again = train(" --set train.steps=4 --resume " + r.dir, 2, "", r.dir);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to train"), std::string::npos) << again.output;
  std::string out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " inspect " + r.dir + " --brief", &out), 0) << out;
  for (const auto& e : fs::directory_iterator(r.dir + "/checkpoints")) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "latest" || n == "step_00000004") << "left behind: " << n;
  }
  // Same state, so the same shard files (sizes and CRCs).
  EXPECT_EQ(nlohmann::json::parse(read_text(ckpt_dir(r, 4) + "/manifest.json"))["files"], before);

  // A crash between moving the old folder aside and moving the new one in leaves only
  // step_4.replaced (and a partial): the next resume puts the complete old one back.
  fs::rename(ckpt_dir(r, 4), ckpt_dir(r, 4) + ".replaced");
  fs::create_directories(ckpt_dir(r, 4) + ".partial");
  TrainRun recovered = train(" --set train.steps=6 --resume " + r.dir, 2, "", r.dir);
  ASSERT_EQ(recovered.exit_code, 0) << recovered.output;
  EXPECT_EQ(recovered.metrics.back()["step"], 6);
  EXPECT_FALSE(fs::exists(ckpt_dir(r, 4) + ".replaced"));
  EXPECT_FALSE(fs::exists(ckpt_dir(r, 4) + ".partial"));
}

TEST(Checkpoints, KeepLastPrunesOlderOnes) {
  TrainRun r = train(" --set train.steps=8 --set train.save_every=2 --set train.keep_last=2", 2, "keep_last");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(r.dir + "/checkpoints")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000006", "step_00000008"}));
}

// Each damage: the run fails (no hang: run_command returns), the message names the file or
// tensor, and inspect reports the file as FAILED.
class Damaged : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = new TrainRun(train(" --set train.steps=4", 2, "damaged_src"));
    ASSERT_EQ(source_->exit_code, 0) << source_->output;
  }
  static void TearDownTestSuite() { delete source_; }

  std::string copy_checkpoint(const std::string& tag) {
    const std::string dst = make_temp_dir(tag) + "/ckpt";
    fs::copy(ckpt_dir(*source_, 4), dst);
    return dst;
  }
  TrainRun resume_from(const std::string& ckpt, const std::string& extra = "") {
    return train(" --set train.steps=6 --resume " + ckpt + extra, 2, "damaged_resume");
  }
  static TrainRun* source_;
};
TrainRun* Damaged::source_ = nullptr;

TEST_F(Damaged, TruncatedShardFile) {
  const std::string ck = copy_checkpoint("truncated");
  const std::string f = ck + "/rank00001-of-00002.safetensors";
  fs::resize_file(f, fs::file_size(f) / 2);
  TrainRun r = resume_from(ck);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank00001-of-00002.safetensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
  std::string out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " inspect " + ck, &out), 2) << out;
  EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
}

TEST_F(Damaged, FlippedByte) {
  const std::string ck = copy_checkpoint("flipped");
  const std::string f = ck + "/rank00000-of-00002.safetensors";
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(fs::file_size(f) - 100));
    char c = 0;
    io.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    io.seekp(static_cast<std::streamoff>(fs::file_size(f) - 100));
    io.write(&c, 1);
  }
  TrainRun r = resume_from(ck);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank00000-of-00002.safetensors' fails its CRC-32 check"), std::string::npos) << r.output;
}

TEST_F(Damaged, MissingShardFile) {
  const std::string ck = copy_checkpoint("missing");
  fs::remove(ck + "/rank00001-of-00002.safetensors");
  TrainRun r = resume_from(ck);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("missing shard file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank00001-of-00002.safetensors"), std::string::npos) << r.output;
}

TEST_F(Damaged, ManifestOfAnotherModel) {
  // The config says the same model, but a tensor's recorded shape does not fit.
  const std::string ck = copy_checkpoint("other_model");
  nlohmann::json m = nlohmann::json::parse(read_text(ck + "/manifest.json"));
  for (auto& t : m["tensors"]) {
    if (t["name"] == "layers.0.feed_forward.w1.weight") t["shape"] = {50, 96};  // same numel, other shape
  }
  std::ofstream(ck + "/manifest.json") << m.dump();
  TrainRun r = resume_from(ck);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tensor 'layers.0.feed_forward.w1.weight' has shape [50, 96] but this model expects [100, 48]"),
            std::string::npos)
      << r.output;
  // And a config for another model is named key by key.
  TrainRun r2 = resume_from(ckpt_dir(*source_, 4), " --set model.ffn_hidden=64");
  EXPECT_NE(r2.exit_code, 0);
  EXPECT_NE(r2.output.find("model.ffn_hidden: checkpoint 100, this run 64"), std::string::npos) << r2.output;
}

TEST_F(Damaged, MalformedManifest) {
  const std::string ck = copy_checkpoint("bad_manifest");
  std::ofstream(ck + "/manifest.json") << "{\"format\": \"zeroshard-checkpoint\", \"version\": 1, \"step\": ";
  TrainRun r = resume_from(ck);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(ck + "/manifest.json: not valid JSON"), std::string::npos) << r.output;
}
