// bf16 mixed precision through the binary: parameters gathered and computed in bf16, fp32
// masters, reduction and AdamW state. The four strategies stay bitwise identical, the gathers
// halve, checkpoints keep fp32 masters and resume exactly.
#include "support/train_run.h"

#include <gtest/gtest.h>

using namespace zeroshard::testing;

TEST(MixedPrecision, Bf16StrategiesAgreeBitwiseHalveTheGathersAndResumeExactly) {
  const std::string common = " --set train.steps=10 --set train.micro_batch_size=2 --set train.grad_accum=2";
  const std::string bf16 = " --set mixed_precision.param_dtype=bf16";
  const auto runs = expect_identical_strategies(common + bf16 + " --set train.save_every=5", 2, 10, "bf16");
  ASSERT_FALSE(HasFailure());
  TrainRun fp32 = train(common + " --set parallel.strategy=optim_grads_params", 2, "fp32_ref");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_NE(loss_texts(fp32), loss_texts(runs[3])) << "bf16 must actually change the computation";
  EXPECT_LT(max_rel_loss_diff(fp32, runs[3]), 0.05) << "bf16 training follows fp32 closely";
  EXPECT_LT(runs[3].metrics.back()["loss"].get<double>(), runs[3].metrics.front()["loss"].get<double>());
  // The gathered units are bf16: half the bytes of the fp32 run at the same step.
  EXPECT_EQ(2 * runs[3].metrics.back()["mem_gathered_peak_bytes"].get<int64_t>(),
            fp32.metrics.back()["mem_gathered_peak_bytes"].get<int64_t>());
  // Resume from step 5: fp32 masters and moments in the checkpoint, the same bf16 rounding.
  TrainRun resumed = train(common + bf16 + " --set parallel.strategy=optim_grads_params --resume " + runs[3].dir +
                               "/checkpoints/step_00000005",
                           2, "bf16_resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto all = loss_texts(runs[3]);
  EXPECT_EQ(loss_texts(resumed), std::vector<std::string>(all.begin() + 5, all.end()));
}
