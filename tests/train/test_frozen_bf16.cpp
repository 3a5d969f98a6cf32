// A LoRA run under bf16 param_dtype through the binary: the frozen base is stored in bf16 (no
// fp32 master), the four strategies stay bitwise identical at W = 3 with accumulation, its
// checkpoints hold the base in bf16 (manifest dtype "BF16") and resume exactly at the same world
// size under another strategy, and reshard to another world size with the base unchanged.
#include "checkpoint/checkpoint.h"
#include "io/safetensors.h"
#include "nn/layers.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

const std::string kLora =
    " --set lora.rank=4 --set lora.alpha=8 --set lora.targets=wq,wv --set mixed_precision.param_dtype=bf16"
    " --set train.micro_batch_size=2 --set train.grad_accum=2 --set train.clip_grad_norm=0.5";

// Every tensor's every state of two checkpoints, bitwise (the frozen ones have only "param").
void expect_same_state(const std::string& a_dir, const std::string& b_dir) {
  ckpt::Checkpoint a(a_dir), b(b_dir);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& ta : a.tensors()) {
    const ckpt::TensorRecord* tb = b.find(ta.name);
    ASSERT_NE(tb, nullptr) << ta.name;
    EXPECT_EQ(ta.dtype, tb->dtype) << ta.name;
    for (const char* state : {"param", "exp_avg", "exp_avg_sq"}) {
      if (!ta.trainable && std::string(state) != "param") continue;
      at::Tensor x = at::empty({ta.numel}), y = at::empty({ta.numel});
      a.read(ta, state, 0, ta.numel, x);
      b.read(*tb, state, 0, ta.numel, y);
      EXPECT_TRUE(at::equal(x, y)) << ta.name << " " << state << " differs between " << a_dir << " and " << b_dir;
    }
  }
}

}  // namespace

TEST(FrozenBf16, LoraStrategiesAgreeAtThreeRanksAndTheBf16BaseCheckpointsAndReshards) {
  const auto runs = expect_identical_strategies(kLora + " --set train.steps=6 --set train.save_every=3", 3, 6,
                                                "frozen_bf16");
  ASSERT_FALSE(HasFailure());
  const std::string saved = runs[3].dir + "/checkpoints/step_00000003";

  // The checkpoint: base tensors in bf16, adapters in fp32 with their moments.
  ckpt::Checkpoint ck(saved);
  int64_t frozen = 0, trainable = 0, frozen_shard_elems = 0;
  for (const auto& t : ck.tensors()) {
    EXPECT_EQ(t.dtype, t.trainable ? at::kFloat : at::kBFloat16) << t.name;
    EXPECT_EQ(t.trainable, nn::is_lora_parameter(t.name)) << t.name;
    (t.trainable ? trainable : frozen) += t.numel;
  }
  for (const auto& b : ck.manifest().at("buffers")) {
    if (!b.at("trainable").get<bool>()) frozen_shard_elems += b.at("shard_size").get<int64_t>();
  }
  EXPECT_GT(frozen, 20 * trainable);
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " inspect " + saved, &out), 0) << out;
  EXPECT_NE(out.find("BF16 frozen"), std::string::npos) << out;
  EXPECT_NE(out.find("F32 trainable"), std::string::npos) << out;

  // The base costs 2 bytes per parameter per rank: against the same run in fp32, the
  // parameter bytes of optim_grads_params drop by 2 bytes per element of its frozen shards.
  TrainRun fp32 = train(kLora + " --set mixed_precision.param_dtype=fp32 --set train.steps=1"
                                " --set parallel.strategy=optim_grads_params",
                        3, "frozen_fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_EQ(fp32.metrics.back()["mem_params_bytes"].get<int64_t>() -
                runs[3].metrics.back()["mem_params_bytes"].get<int64_t>(),
            2 * frozen_shard_elems);

  // Exact resume at W = 3 under another strategy (the strategies agree bitwise).
  TrainRun resumed = train(kLora + " --set train.steps=6 --set parallel.strategy=optim --resume " + saved, 3,
                           "frozen_bf16_resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto all = loss_texts(runs[0]);
  EXPECT_EQ(loss_texts(resumed), std::vector<std::string>(all.begin() + 3, all.end()));

  // Reshard: load at W = 2 (no_shard) and save at once: every state equal; then W = 2 ZeRO-3
  // trains on, its frozen base bitwise the W = 3 run's.
  TrainRun w2_load = train(kLora + " --set train.micro_batch_size=3 --set train.steps=3"
                                   " --set parallel.strategy=no_shard --resume " + saved,
                           2, "frozen_bf16_w2_load");
  ASSERT_EQ(w2_load.exit_code, 0) << w2_load.output;
  expect_same_state(saved, w2_load.dir + "/checkpoints/step_00000003");
  TrainRun w2 = train(kLora + " --set train.micro_batch_size=3 --set train.steps=6"
                              " --set parallel.strategy=optim_grads_params --resume " + saved,
                      2, "frozen_bf16_w2");
  ASSERT_EQ(w2.exit_code, 0) << w2.output;
  ASSERT_EQ(w2.metrics.size(), 3u);
  EXPECT_LT(max_rel_loss_diff(runs[0], w2, 3), 1e-2);  // bf16 compute, another summation order
  const std::string a = runs[3].dir + "/final.safetensors", b = w2.dir + "/final.safetensors";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + runs[3].dir + " " + a, &out), 0) << out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + w2.dir + " " + b, &out), 0) << out;
  io::SafetensorsFile fa(a), fb(b);
  int base_tensors = 0;
  for (const auto& e : fa.entries()) {
    if (nn::is_lora_parameter(e.name)) continue;
    const at::Tensor x = fa.read(e.name);
    EXPECT_TRUE(x.equal(fb.read(e.name))) << e.name << " (frozen) differs after resharding";
    EXPECT_TRUE(x.equal(x.to(at::kBFloat16).to(at::kFloat))) << e.name << " is not a bf16 value";
    ++base_tensors;
  }
  EXPECT_GT(base_tensors, 10);
}
