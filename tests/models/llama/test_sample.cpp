// Sampling from LM checkpoints: the same text under every strategy and world size.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

using namespace zeroshard;
using namespace zeroshard::testing;

TEST(Sample, SameTextUnderEveryStrategyWorldSizeAndWithoutCache) {
  TrainRun run = train("--set train.steps=30 --set train.save_final=true", 2, "sample_src");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto sample = [&](const std::string& args) {
    std::string out;
    const int rc = run_command(std::string(ZS_BINARY) + " sample " + run.dir +
                                   " --prompt 'The ' --tokens 24 " + args,
                               &out);
    EXPECT_EQ(rc, 0) << args << "\n" << out;
    return out;
  };
  const std::string reference = sample("--nproc 1 --strategy no_shard --temperature 0");
  EXPECT_EQ(reference.rfind("The ", 0), 0u) << reference;
  EXPECT_EQ(reference.size(), 4u + 24u + 1u) << "prompt + 24 bytes + newline: " << reference;
  for (const char* s : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
    EXPECT_EQ(sample(std::string("--nproc 2 --temperature 0 --strategy ") + s), reference) << s;
  }
  EXPECT_EQ(sample("--nproc 2 --temperature 0 --no-cache"), reference);
  // Sampling with a temperature is seeded: the same seed gives the same text.
  EXPECT_EQ(sample("--nproc 2 --temperature 1 --seed 3"), sample("--nproc 1 --temperature 1 --seed 3"));

  std::string out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " sample " + run.dir + " --tokens 40", &out), 1);
  EXPECT_NE(out.find("exceeds model.max_seq_len 32"), std::string::npos) << out;
}
