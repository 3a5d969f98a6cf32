// Activation checkpointing through the binary: the same losses as keeping the activations,
// for the dense and the MoE LM, with the recompute verified bitwise.
#include "support/train_run.h"

#include <gtest/gtest.h>

using namespace zeroshard::testing;

TEST(ActivationCheckpointing, TrainingRunsGiveTheLossesOfRunsWithoutIt) {
  const std::string moe = " --set model.series=moe --set model.n_experts=4 --set model.shared_expert_hidden=16";
  for (const std::string& series : {std::string(), moe}) {
    for (const char* s : {"no_shard", "optim_grads_params"}) {
      const std::string common = series + " --set train.steps=8 --set parallel.strategy=" + s;
      TrainRun plain = train(common, 2, "recompute_off");
      TrainRun ckpt = train(common + " --set train.activation_checkpointing=true --set debug.check_recompute=bitwise", 2,
                            "recompute_on");
      ASSERT_EQ(plain.exit_code, 0) << plain.output;
      ASSERT_EQ(ckpt.exit_code, 0) << ckpt.output;
      EXPECT_EQ(loss_texts(ckpt), loss_texts(plain)) << (series.empty() ? "llama " : "moe ") << s;
    }
  }
  TrainRun bad = train("--set train.steps=2 --set debug.check_recompute=shape", 1, "recompute_bad");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("set train.activation_checkpointing: true"), std::string::npos) << bad.output;
}

// Prefetch only moves when ZeRO-3's all-gathers start: the same bits, alone and combined with
// activation checkpointing and bf16, with at most one more unit gathered at a time.
TEST(Prefetch, SameLossesWithOneMoreUnitGatheredAtMost) {
  for (const std::string& extra : {std::string(), std::string(" --set train.activation_checkpointing=true"
                                                             " --set mixed_precision.param_dtype=bf16")}) {
    const std::string common = " --set train.steps=6 --set train.grad_accum=2 --set parallel.strategy=optim_grads_params" +
                               extra;
    TrainRun plain = train(common + " --set parallel.prefetch=false", 2, "prefetch_off");
    TrainRun ahead = train(common + " --set parallel.prefetch=true", 2, "prefetch_on");
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    ASSERT_EQ(ahead.exit_code, 0) << ahead.output;
    EXPECT_EQ(loss_texts(ahead), loss_texts(plain)) << extra;
    const int64_t peak_plain = plain.metrics.back()["mem_gathered_peak_bytes"].get<int64_t>();
    const int64_t peak_ahead = ahead.metrics.back()["mem_gathered_peak_bytes"].get<int64_t>();
    EXPECT_GT(peak_ahead, peak_plain) << "prefetch must hold the next unit while one computes";
    EXPECT_LE(peak_ahead, 2 * peak_plain) << "at most one unit more";
  }
}

// What checkpointing is for, counted at the allocator (exact, unlike RSS): the activations
// the forward keeps for backward, and the step's peak tensor bytes above the model states.
TEST(ActivationCheckpointing, CutsTheActivationsKeptForBackward) {
  const std::string common = " --set train.steps=3 --set model.n_layers=6 --set parallel.strategy=optim_grads_params";
  TrainRun plain = train(common, 2, "act_mem_off");
  TrainRun ckpt = train(common + " --set train.activation_checkpointing=true", 2, "act_mem_on");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(ckpt.exit_code, 0) << ckpt.output;
  EXPECT_EQ(loss_texts(ckpt), loss_texts(plain));
  const auto kept = [](const TrainRun& r) { return r.metrics.back()["mem_saved_activations_bytes"].get<double>(); };
  const auto peak = [](const TrainRun& r) { return r.metrics.back()["mem_step_peak_bytes"].get<double>(); };
  EXPECT_GT(kept(ckpt), 0);
  EXPECT_GT(kept(plain), 3 * kept(ckpt)) << kept(plain) << " vs " << kept(ckpt) << " bytes kept for backward";
  EXPECT_LT(peak(ckpt), peak(plain)) << peak(plain) << " vs " << peak(ckpt) << " bytes at the step's peak";
}
