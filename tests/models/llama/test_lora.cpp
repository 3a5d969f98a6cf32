// LoRA fine-tuning from a base model's file: adapters train, the frozen base stays bitwise
// unchanged and holds no gradient or optimizer state, under every strategy.
#include "io/safetensors.h"
#include "nn/layers.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <filesystem>

using namespace zeroshard;
using namespace zeroshard::testing;

TEST(Lora, FourStrategiesAgreeBitwiseAndOnlyTheAdaptersTrain) {
  TrainRun base = train("--set train.steps=10", 2, "lora_base");
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::string base_file = base.dir + "/base.safetensors";
  std::string out;
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + base.dir + " " + base_file, &out), 0) << out;

  const std::string lora = " --set model.init_from=" + base_file +
                           " --set lora.rank=4 --set lora.alpha=8 --set lora.targets=wq,wv --set train.steps=12"
                           " --set train.micro_batch_size=2 --set train.grad_accum=2";
  const auto runs = expect_identical_strategies(lora, 2, 12, "lora");
  ASSERT_FALSE(HasFailure());

  // 2 blocks x (wq: A 4x48 + B 48x4, wv: A 4x48 + B 24x4) = 1344 adapter parameters; under
  // optim_grads_params each rank keeps about half of their gradients and 2 AdamW moments.
  const auto& m = runs[3].metrics.back();
  EXPECT_LE(m["mem_optim_bytes"].get<int64_t>(), 8 * 1344 / 2 + 8 * 2 * 8) << m.dump();
  EXPECT_GE(m["mem_optim_bytes"].get<int64_t>(), 8 * 1344 / 2) << m.dump();
  EXPECT_LE(m["mem_grads_bytes"].get<int64_t>(), 4 * 1344 / 2 + 4 * 2 * 8) << m.dump();

  // The base is bitwise what the file holds; the adapters moved (B started at zero).
  const std::string tuned = runs[3].dir + "/tuned.safetensors";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export " + runs[3].dir + " " + tuned, &out), 0) << out;
  io::SafetensorsFile before(base_file), after(tuned);
  int adapters = 0;
  for (const auto& e : after.entries()) {
    if (nn::is_lora_parameter(e.name)) {
      ++adapters;
      if (e.name.find("lora_b") != std::string::npos) {
        EXPECT_GT(after.read(e.name).abs().max().item<float>(), 0.0f) << e.name << " did not train";
      }
      continue;
    }
    EXPECT_TRUE(at::equal(after.read(e.name), before.read(e.name))) << e.name << " (frozen) changed";
  }
  EXPECT_EQ(adapters, 8);
  // --trainable-only writes the adapters alone.
  const std::string only = runs[3].dir + "/adapters.safetensors";
  ASSERT_EQ(run_command(std::string(ZS_BINARY) + " export --trainable-only " + runs[3].dir + " " + only, &out), 0)
      << out;
  io::SafetensorsFile adapters_file(only);
  EXPECT_EQ(adapters_file.entries().size(), 8u);
  for (const auto& e : adapters_file.entries()) EXPECT_TRUE(nn::is_lora_parameter(e.name)) << e.name;
  // A LoRA run samples like any other.
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " sample " + runs[3].dir + " --tokens 8 --nproc 2", &out), 0) << out;
}

TEST(Lora, ATargetThatMatchesNoLayerIsNamed) {
  TrainRun r = train("--set train.steps=2 --set lora.rank=4 --set lora.targets=wq,wz", 1, "lora_bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("lora.targets: 'wz' names no Linear of the model; it has: w1, w2, w3, wk, wo, wq, wv"),
            std::string::npos)
      << r.output;
  TrainRun off = train("--set train.steps=2 --set lora.targets=wq", 1, "lora_off");
  EXPECT_EQ(off.exit_code, 1);
  EXPECT_NE(off.output.find("apply only with lora.rank > 0"), std::string::npos) << off.output;
}
