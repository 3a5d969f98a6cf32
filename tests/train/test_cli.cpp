// End to end through the `zeroshard` binary and its launcher: exact parity of the four
// strategies, agreement across world sizes, identical initialization, failure handling.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace zeroshard::testing;


class CliParity : public ::testing::TestWithParam<int> {};

TEST_P(CliParity, FourStrategiesGiveBitwiseIdenticalLossesAndParameters) {
  const int W = GetParam();
  const std::string common = " --set train.steps=30 --set train.micro_batch_size=2 --set train.grad_accum=2"
                             " --set train.clip_grad_norm=0.5";
  ParityOptions o;
  o.final_shards = true;
  const auto runs = expect_identical_strategies(common, W, 30, "parity", o);
  ASSERT_FALSE(HasFailure());
  EXPECT_LT(runs[0].metrics.back()["loss"].get<double>(), runs[0].metrics.front()["loss"].get<double>() - 0.5)
      << "the loss must fall";
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CliParity, ::testing::Values(2, 3));

TEST(Cli, WorldSizes124AgreeWithTheSameGlobalBatch) {
  // Global batch 8 sequences: (micro_batch, accum) = (2, 4), (2, 2), (2, 1).
  const std::string common = " --set train.steps=50 --set train.micro_batch_size=2 --set train.clip_grad_norm=1.0"
                             " --set parallel.strategy=optim_grads_params";
  TrainRun w1 = train(common + " --set train.grad_accum=4", 1, "w1");
  TrainRun w2 = train(common + " --set train.grad_accum=2", 2, "w2");
  TrainRun w4 = train(common + " --set train.grad_accum=1", 4, "w4");
  for (const TrainRun* r : {&w1, &w2, &w4}) ASSERT_EQ(r->metrics.size(), 50u) << r->output;
  double worst = 0;
  for (size_t i = 0; i < 50; ++i) {
    const double a = w1.metrics[i]["loss"].get<double>();
    for (const TrainRun* r : {&w2, &w4}) {
      const double rel = std::abs(r->metrics[i]["loss"].get<double>() - a) / std::abs(a);
      worst = std::max(worst, rel);
    }
  }
  EXPECT_LT(worst, 1e-4) << "largest relative loss difference across W = 1, 2, 4 over 50 steps";
  EXPECT_LT(w1.metrics.back()["loss"].get<double>(), w1.metrics.front()["loss"].get<double>() - 0.5);
}

TEST(Cli, InitializationIsIdenticalForEveryWorldSizeAndStrategy) {
  TrainRun a = train(" --set train.steps=1 --set run.dump_init=true --set parallel.strategy=no_shard", 1, "init1");
  TrainRun b = train(" --set train.steps=1 --set run.dump_init=true --set parallel.strategy=optim_grads_params", 3, "init3");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto x = read_text(a.dir + "/init.safetensors"), y = read_text(b.dir + "/init.safetensors");
  EXPECT_GT(x.size(), 1000u);
  EXPECT_TRUE(x == y);
}

TEST(Cli, RankThatThrowsStopsTheJobWithItsMessage) {
  double seconds = 0;
  std::string out;
  const auto dir = make_temp_dir("fail");
  const int code = run_command(std::string(ZS_BINARY) + " train --nproc 3" + kSmallModel + " --set run.dir=" + dir +
                                   " --set train.steps=50 --set debug.fail_rank=1 --set debug.fail_at_step=3",
                               &out, &seconds);
  EXPECT_NE(code, 0);
  EXPECT_LT(seconds, 30.0) << out;
  EXPECT_NE(out.find("rank 1 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("injected failure (debug.fail_at_step=3) on rank 1"), std::string::npos) << out;
}

TEST(Cli, BadConfigFailsBeforeAnyRankStarts) {
  std::string out;
  const int code = run_command(std::string(ZS_BINARY) + " train --nproc 2 --set train.stepz=5", &out);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("did you mean 'train.steps'"), std::string::npos) << out;
  EXPECT_EQ(out.find("[rank"), std::string::npos) << "no rank may have started: " << out;
}

TEST(Cli, UsageErrorsExitOne) {
  // One convention: a bad command line exits 1 like every other error; --help exits 0.
  const std::string bin = std::string(ZS_BINARY);
  for (const std::string args : {" train --nproc 0", " prepare --nproc -3", " train --no-such-option", " sample",
                                 " nonsense", ""}) {
    std::string out;
    EXPECT_EQ(run_command(bin + args, &out), 1) << args << "\n" << out;
    EXPECT_NE(out.find("--help"), std::string::npos) << args << "\n" << out;
  }
  std::string out;
  EXPECT_EQ(run_command(bin + " train --help", &out), 0) << out;
}

TEST(Cli, ConfigKeysListASeriesWithoutItsData) {
  // As the README shows it (`config keys [--series S]`), and from a config that sets no dataset.
  const std::string bin = std::string(ZS_BINARY);
  std::string out;
  ASSERT_EQ(run_command(bin + " config keys --series wan", &out), 0) << out;
  EXPECT_NE(out.find("model.series wan"), std::string::npos) << out;
  EXPECT_NE(out.find("wan.metadata"), std::string::npos) << out;
  ASSERT_EQ(run_command(bin + " config keys --config " + ZS_SOURCE_DIR + "/configs/wan/base.yaml", &out), 0) << out;
  EXPECT_NE(out.find("wan.dataset"), std::string::npos) << out;
  EXPECT_NE(run_command(bin + " config keys --series nope", &out), 0) << out;
  EXPECT_NE(out.find("nope"), std::string::npos) << out;
}

TEST(Cli, TrainRunsFromAnyFolderAndNamesThePrepareCommandForMissingData) {
  // configs/qwen3/no_shard.yaml run from a folder outside the repository: its tokenizer path is
  // relative to the config file's folder, the --set data.output to the working directory. Its
  // corpus is not prepared yet: train refuses before any rank starts, printing the one prepare
  // command that writes it; run as printed, it does, and the same train command then trains.
  const std::string cwd = make_temp_dir("cli_anywhere");
  const std::string config = std::string(ZS_SOURCE_DIR) + "/configs/qwen3/no_shard.yaml";
  const std::string train = std::string(ZS_BINARY) + " train --config " + config +
                            " --set data.output=data/licenses --set train.steps=2 --set run.progress=false --nproc 2";
  std::string out;
  ASSERT_EQ(run_command("cd " + cwd + " && " + train, &out), 1) << out;
  EXPECT_NE(out.find("data.output: data/licenses is not prepared yet (data/licenses.json does not exist)"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("[rank"), std::string::npos) << "no rank may have started: " << out;
  const std::string intro = "write it first with\n  ";
  const size_t at = out.find(intro);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string prepare = out.substr(at + intro.size(), out.find('\n', at + intro.size()) - at - intro.size());
  EXPECT_EQ(prepare, std::string(ZS_BINARY) + " prepare --config " + config +
                         " --set data.output=data/licenses --set train.steps=2 --set run.progress=false --nproc 2");
  ASSERT_EQ(run_command("cd " + cwd + " && " + prepare, &out), 0) << out;
  EXPECT_TRUE(std::filesystem::exists(cwd + "/data/licenses.json")) << out;
  ASSERT_EQ(run_command("cd " + cwd + " && " + train, &out), 0) << out;
  // train --dry-run names the corpus it reads.
  ASSERT_EQ(run_command("cd " + cwd + " && " + train + " --dry-run", &out), 0) << out;
  EXPECT_NE(out.find("qwen3: training reads 1 prepared corpus"), std::string::npos) << out;
  EXPECT_NE(out.find("corpus data/licenses (text, weight 1): "), std::string::npos) << out;
}

TEST(Cli, JoinsAJobFromTheEnvironment) {
  // Two processes started like torchrun/Slurm would, without --nproc.
  const auto dir = make_temp_dir("env");
  std::istringstream split(std::string(kSmallModel) + " --set train.steps=3 --set run.dir=" + dir);
  std::vector<std::string> args{"train"};
  std::string tok;
  while (split >> tok) args.push_back(tok);
  auto results = run_ranks(ZS_BINARY, args, 2, 120);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[1].exit_code, 0);
  std::ifstream in(dir + "/metrics.jsonl");
  int lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 3);
}

// Under contention the pthreads build of OpenBLAS loses scheduler slices to busy processes
// (src/cli/thread_env.h): where Debian's OpenMP build is installed beside it, `zeroshard`
// re-executes itself with that build loaded; ZEROSHARD_THREAD_ENV=0 keeps the system's choice.
TEST(Cli, LoadsTheOpenMpBuildOfOpenBlasWhereInstalled) {
  bool openmp_installed = false;
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"}) {
    openmp_installed |= std::ifstream(std::string(dir) + "/openblas-openmp/libopenblas.so.0").good();
  }
  if (!openmp_installed) GTEST_SKIP() << "libopenblas0-openmp is not installed (scripts/install_deps.sh installs it)";
  auto start_line = [](const std::string& env, const std::string& name, int nproc = 1) {
    const auto dir = make_temp_dir(name);
    std::string out;
    const int code = run_command(env + std::string(ZS_BINARY) + " train --nproc " + std::to_string(nproc) + kSmallModel +
                                     " --set train.steps=1 --set train.save_final=false --set run.dir=" + dir,
                                 &out);
    EXPECT_EQ(code, 0) << out;
    std::istringstream log(read_text(dir + "/rank0.log"));
    std::string line;
    while (std::getline(log, line)) {
      if (line.find("start: ") != std::string::npos) return line;
    }
    return std::string("no start line in ") + dir + "/rank0.log";
  };
  const std::string chosen = start_line("", "blas");
  EXPECT_NE(chosen.find(" blas=OpenBLAS "), std::string::npos) << chosen;
  EXPECT_NE(chosen.find("(OpenMP)"), std::string::npos) << chosen;
  // Ranks started by zeroshard's own launcher, which sets the environment for them without
  // re-executing itself, load the same build.
  const std::string ranks = start_line("", "blas-ranks", 2);
  EXPECT_NE(ranks.find("(OpenMP)"), std::string::npos) << ranks;
  const std::string system = start_line("ZEROSHARD_THREAD_ENV=0 ", "blas-system");
  EXPECT_EQ(system.find("(OpenMP)"), std::string::npos) << "the opt-out must keep the system's build: " << system;
}

TEST(Cli, ProfileStepSplitsTheStepByKindWithoutChangingIt) {
  // The small Llama (causal attention below 2048 keys is the plain formulation: no attention
  // scope) at W = 2: run.profile_step=2 writes each rank's profile of step 2 and logs its line;
  // the losses are the same bits as without it.
  TrainRun plain = train("--set train.steps=3", 2, "profile_off");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  TrainRun r = train("--set train.steps=3 --set run.profile_step=2", 2, "profile_on");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(loss_texts(r), loss_texts(plain));
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(r.dir + "/profile.rank" + std::to_string(rank) + ".json");
    ASSERT_TRUE(in) << "profile.rank" << rank << ".json";
    const nlohmann::json p = nlohmann::json::parse(in);
    const double step = p.at("step_s").get<double>();
    if (rank == 0) {
      EXPECT_DOUBLE_EQ(step, r.metrics.at(1).at("step_time_s").get<double>());  // rank 0's
    }
    EXPECT_GT(p.at("gemm_s").get<double>(), 0.0);
    EXPECT_GT(p.at("elementwise_s").get<double>(), 0.0);
    EXPECT_GT(p.at("optimizer_s").get<double>(), 0.0);
    EXPECT_GT(p.at("engine_s").get<double>(), 0.0);  // every step copies gradients into flat buffers
    double kinds = 0;
    for (const char* k : {"gemm_s", "attention_s", "elementwise_s", "engine_s", "optimizer_s", "autograd_s"}) {
      kinds += p.at(k).get<double>();
    }
    // Self times of the operators of one thread cannot exceed the step's wall time (with 1% for
    // the clocks' granularity).
    EXPECT_LE(kinds, step * 1.01) << p.dump();
    EXPECT_EQ(p.at("top_ops").at(0).size(), 2u);
    // Where copy_'s time went: the engine's gradient copies (every step has them) are among its
    // callers.
    bool grad_copy = false;
    for (const auto& c : p.at("copy_callers")) {
      EXPECT_GE(c.at(1).get<double>(), 0.0) << c.dump();
      grad_copy = grad_copy || c.at(0).get<std::string>().find("zs::grad_copy") != std::string::npos;
    }
    EXPECT_TRUE(grad_copy) << p.at("copy_callers").dump();
    const std::string log = read_text(r.dir + "/rank" + std::to_string(rank) + ".log");
    EXPECT_NE(log.find("profile: step "), std::string::npos) << log;
  }
}

TEST(Examples, CustomModelLearnsAloneAndAsThreeRanks) {
  std::string out;
  EXPECT_EQ(run_command(ZS_EXAMPLE, &out), 0) << out;
  auto results = run_ranks(ZS_EXAMPLE, {}, 3, 180);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(results[r].exit_code, 0) << "rank " << r;
}
