// Faults through the real binary: a rank SIGKILLed mid-step, NaN losses (abort and skip),
// SIGTERM/SIGINT stopping cleanly with a checkpoint that resumes exactly.
#include "support/spawn.h"
#include "support/train_run.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

size_t count_lines(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) n += !line.empty();
  return n;
}

// `zeroshard train` started directly (no shell), output to dir/output.txt; returns its pid.
pid_t start_train(const std::string& args, int nproc, const std::string& dir) {
  std::vector<std::string> argv = {ZS_BINARY, "train", "--nproc", std::to_string(nproc), "--set", "run.dir=" + dir};
  std::istringstream split(std::string(kSmallModel) + " " + args);
  for (std::string w; split >> w;) argv.push_back(w);
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open((dir + "/output.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST(Faults, RankKilledMidStepStopsTheJobAndTheLastCheckpointResumesExactly) {
  const std::string common = " --set train.steps=12 --set train.micro_batch_size=2 --set train.save_every=5";
  TrainRun clean = train(common, 3, "sigkill_clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  const auto t0 = std::chrono::steady_clock::now();
  TrainRun killed = train(common + " --set debug.fail_kind=sigkill --set debug.fail_at_step=7 --set debug.fail_rank=1"
                                   " --set parallel.comm_timeout_s=30",
                          3, "sigkill");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(killed.exit_code, 0);
  EXPECT_LT(seconds, 30.0) << "the launcher must stop the job well within the collective timeout";
  EXPECT_NE(killed.output.find("rank 1 failed (signal Killed)"), std::string::npos) << killed.output;
  EXPECT_NE(killed.output.find("during step 7; last checkpoint: step 5"), std::string::npos) << killed.output;
  EXPECT_EQ(read_text(killed.dir + "/checkpoints/latest"), "step_00000005\n");
  TrainRun resumed = train(common + " --resume " + killed.dir, 3, "", killed.dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(loss_texts(resumed), loss_texts(clean));
}

TEST(Faults, WithoutALauncherSurvivorsExitWithinTheCollectiveTimeout) {
  const std::string dir = make_temp_dir("sigkill_env");
  std::vector<std::string> args = {"train", "--set", "run.dir=" + dir};
  std::istringstream split(std::string(kSmallModel) +
                           " --set train.steps=20 --set debug.fail_kind=sigkill --set debug.fail_at_step=3"
                           " --set debug.fail_rank=2 --set parallel.comm_timeout_s=10");
  for (std::string w; split >> w;) args.push_back(w);
  auto results = run_ranks(ZS_BINARY, args, 3, /*timeout_s=*/60);
  EXPECT_EQ(results[2].exit_code, 128 + SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].exit_code, 3) << "rank " << r << " lost its peer: exit code kExitPeerLost";
    EXPECT_LT(results[r].seconds, 10.0 + 8.0) << "rank " << r;
  }
}

TEST(Faults, NanLossAbortsOnEveryRankNamingTheRankAndStep) {
  TrainRun r = train(" --set train.steps=6 --set debug.fail_kind=nan --set debug.fail_at_step=3 --set debug.fail_rank=1",
                     2, "nan_abort");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("at step 3 (from rank 1); train.on_nonfinite=abort"), std::string::npos) << r.output;
  EXPECT_EQ(r.metrics.size(), 2u) << "no metrics line for the failed step";
}

TEST(Faults, NanLossSkipIsConsistentOnEveryRank) {
  const std::string common = " --set train.steps=6 --set run.dump_final_shards=true --set train.on_nonfinite=skip";
  TrainRun skipped = train(common + " --set debug.fail_kind=nan --set debug.fail_at_step=3 --set debug.fail_rank=1"
                                    " --set parallel.strategy=optim_grads_params",
                           2, "nan_skip");
  ASSERT_EQ(skipped.exit_code, 0) << skipped.output;
  ASSERT_EQ(skipped.metrics.size(), 6u);
  for (const auto& m : skipped.metrics) EXPECT_EQ(m["skipped"].get<bool>(), m["step"] == 3) << m.dump();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(read_text(skipped.dir + "/rank" + std::to_string(rank) + ".log").find("step 3 skipped"), std::string::npos);
  }
  // The same skip under another strategy: bitwise the same run (all ranks skipped alike).
  TrainRun other = train(common + " --set debug.fail_kind=nan --set debug.fail_at_step=3 --set debug.fail_rank=1"
                                  " --set parallel.strategy=no_shard",
                         2, "nan_skip_no_shard");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_EQ(loss_texts(other), loss_texts(skipped));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string f = "/final_shard.rank" + std::to_string(rank) + ".bin";
    EXPECT_TRUE(read_text(skipped.dir + f) == read_text(other.dir + f));
  }
}

TEST(Faults, DesyncCheckNamesTheFirstMismatchingCollective) {
  TrainRun r = train(" --set train.steps=5 --set debug.check_desync=true --set debug.fail_kind=desync"
                     " --set debug.fail_at_step=3 --set debug.fail_rank=1",
                     2, "desync");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("the ranks called different collectives"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 1: barrier #"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("during step 3"), std::string::npos) << r.output;
  EXPECT_EQ(r.metrics.size(), 2u);
}

class Signals : public ::testing::TestWithParam<int> {};

TEST_P(Signals, StopAfterTheStepSaveAndResumeExactly) {
  const int sig = GetParam();
  // A constant learning rate, so the schedule does not depend on train.steps.
  const std::string constant_lr = " --set train.micro_batch_size=2 --set train.min_lr=0.01 --set train.warmup_steps=0";
  const std::string common = " --set train.steps=400" + constant_lr;
  const std::string dir = make_temp_dir("signal");
  const pid_t pid = start_train(common, 2, dir);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (count_lines(dir + "/metrics.jsonl") < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, sig);
  const int code = wait_exit_code(pid);
  const std::string output = read_text(dir + "/output.txt");
  EXPECT_EQ(code, sig == SIGINT ? 130 : 0) << output;
  const size_t steps_done = count_lines(dir + "/metrics.jsonl");
  ASSERT_GE(steps_done, 3u);
  ASSERT_LT(steps_done, 400u) << "the run must stop early";
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08zu\n", steps_done);
  EXPECT_EQ(read_text(dir + "/checkpoints/latest"), name) << output;
  EXPECT_NE(output.find("stopped by"), std::string::npos) << output;

  // Continue to steps_done + 3 and compare with a run that was never stopped.
  const std::string until = " --set train.steps=" + std::to_string(steps_done + 3);
  TrainRun resumed = train(constant_lr + until + " --resume " + dir, 2, "", dir);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  TrainRun clean = train(constant_lr + until, 2, "signal_clean");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(loss_texts(resumed), loss_texts(clean));
}

INSTANTIATE_TEST_SUITE_P(TermAndInt, Signals, ::testing::Values(SIGTERM, SIGINT));

TEST(Faults, MemoryCapNamesRankAndPhase) {
  TrainRun r = train(" --set train.steps=3 --set run.max_rss_mb=20", 2, "rss_cap");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("exceeds run.max_rss_mb=20 after initialization"), std::string::npos) << r.output;
}

TEST(Faults, ResumeOfAnotherModelFailsBeforeAnyRankStarts) {
  TrainRun src = train(" --set train.steps=2", 2, "resume_other_src");
  ASSERT_EQ(src.exit_code, 0) << src.output;
  std::string out;
  const int code = run_command(std::string(ZS_BINARY) + " train --nproc 2" + kSmallModel +
                                   " --set model.n_layers=3 --resume " + src.dir,
                               &out);
  EXPECT_EQ(code, 1);
  EXPECT_NE(out.find("model.n_layers: checkpoint 2, this run 3"), std::string::npos) << out;
  EXPECT_EQ(out.find("[rank"), std::string::npos) << "no rank may have started: " << out;
  EXPECT_EQ(run_command(std::string(ZS_BINARY) + " train --resume /nonexistent" + kSmallModel, &out), 1);
  EXPECT_NE(out.find("no checkpoint at '/nonexistent'"), std::string::npos) << out;
}
