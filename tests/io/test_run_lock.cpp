// The run-folder lock with real processes (fork): one winner of a race, a SIGKILLed holder
// releasing the lock, the record naming the holder; and the checks of a folder's earlier run.
#include "io/run_lock.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

namespace zeroshard::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/zs-runlock-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Reads everything the child writes until it closes the pipe.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void write_fd(int fd, const std::string& s) {
  if (::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) _exit(9);
}

TEST(RunLock, RecordsTheHolderAndBeats) {
  TempDir d;
  RunLockOptions o;
  o.heartbeat = std::chrono::milliseconds(100);
  auto lock = RunLock::acquire(d.str() + "/run", o);
  EXPECT_EQ(lock->path(), d.str() + "/run/run.lock");
  auto rec = read_lock_record(d.str() + "/run");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->pid, getpid());
  EXPECT_FALSE(rec->host.empty());
  EXPECT_EQ(rec->started.size(), 20u) << rec->started;  // 2025-01-01T12:00:00Z
  EXPECT_NE(rec->command.find("test"), std::string::npos) << rec->command;
  const int64_t first = rec->heartbeat_unix;
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));
  rec = read_lock_record(d.str() + "/run");
  ASSERT_TRUE(rec.has_value());
  EXPECT_GT(rec->heartbeat_unix, first);
  lock.reset();
  rec = read_lock_record(d.str() + "/run");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ(rec->heartbeat_unix, 0);  // released
  EXPECT_TRUE(fs::exists(d.path / "run" / "run.lock"));  // never deleted
}

TEST(RunLock, SecondHolderInThisProcessIsRefused) {
  // OFD locks belong to the open file, not the process: a second acquire here conflicts too.
  TempDir d;
  auto lock = RunLock::acquire(d.str());
  const std::string msg = message_of([&] { RunLock::acquire(d.str()); });
  EXPECT_NE(msg.find("is in use by another job: host "), std::string::npos) << msg;
  EXPECT_NE(msg.find("pid " + std::to_string(getpid())), std::string::npos) << msg;
  EXPECT_NE(msg.find("run.lock"), std::string::npos) << msg;
  lock.reset();
  EXPECT_NO_THROW(RunLock::acquire(d.str()));
}

TEST(RunLock, ForkedJobsRaceAndOneWins) {
  TempDir d;
  constexpr int kJobs = 4;
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (int i = 0; i < kJobs; ++i) {
    int out[2];
    ASSERT_EQ(pipe(out), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(go[1]);
      close(out[0]);
      char c;
      if (read(go[0], &c, 1) != 0) _exit(8);  // released together when the parent closes `go`
      try {
        auto lock = RunLock::acquire(d.str());
        write_fd(out[1], "won\n");
        close(out[1]);
        pause();  // hold it until killed
      } catch (const std::exception& e) {
        write_fd(out[1], std::string("refused: ") + e.what());
        close(out[1]);
        _exit(3);
      }
      _exit(0);
    }
    close(out[1]);
    pids.push_back(pid);
    outs.push_back(out[0]);
  }
  close(go[0]);
  close(go[1]);
  int winner = -1;
  std::vector<std::string> refusals;
  for (int i = 0; i < kJobs; ++i) {
    const std::string said = read_all(outs[i]);
    close(outs[i]);
    if (said == "won\n") {
      EXPECT_EQ(winner, -1) << "two jobs hold the lock";
      winner = i;
    } else {
      refusals.push_back(said);
    }
  }
  ASSERT_NE(winner, -1);
  ASSERT_EQ(refusals.size(), static_cast<size_t>(kJobs - 1));
  for (const auto& r : refusals) {
    EXPECT_NE(r.find("refused: run folder"), std::string::npos) << r;
    EXPECT_NE(r.find("pid " + std::to_string(pids[winner]) + ","), std::string::npos) << r;  // names the winner
  }
  for (int i = 0; i < kJobs; ++i) {
    if (i == winner) kill(pids[i], SIGKILL);
    int status = 0;
    waitpid(pids[i], &status, 0);
    if (i != winner) {
      EXPECT_EQ(WEXITSTATUS(status), 3);
    }
  }
}

TEST(RunLock, KilledHolderReleasesIt) {
  TempDir d;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    try {
      auto lock = RunLock::acquire(d.str());
      write_fd(ready[1], "locked");
      close(ready[1]);
      pause();
    } catch (...) {
      _exit(4);
    }
    _exit(0);
  }
  close(ready[1]);
  ASSERT_EQ(read_all(ready[0]), "locked");
  close(ready[0]);
  const std::string msg = message_of([&] { RunLock::acquire(d.str()); });
  EXPECT_NE(msg.find("pid " + std::to_string(pid) + ","), std::string::npos) << msg;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  // The record still names the dead holder (it could not clean up), but the kernel released the lock.
  EXPECT_EQ(read_lock_record(d.str())->pid, pid);
  std::unique_ptr<RunLock> lock;
  ASSERT_NO_THROW(lock = RunLock::acquire(d.str()));
  EXPECT_EQ(read_lock_record(d.str())->pid, getpid());
}

TEST(RunLock, LiveHolderOnAnotherHostIsRespectedWhereLocksStayLocal) {
  // Plays a filesystem whose locks do not reach other hosts: the file is unlocked but its
  // record shows a job on "node7" that beat a moment ago.
  TempDir d;
  auto record = [](int64_t heartbeat, bool released) {
    return nlohmann::json({{"host", "node7"},
                           {"pid", 4242},
                           {"started", "2025-01-01T00:00:00Z"},
                           {"started_unix", 1735689600},
                           {"heartbeat_unix", heartbeat},
                           {"released", released},
                           {"command", "zeroshard train"}})
        .dump();
  };
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  write(d.path / "run.lock", record(now - 5, false));
  const std::string msg = message_of([&] { RunLock::acquire(d.str()); });
  EXPECT_NE(msg.find("in use by a job on another host: host node7, pid 4242"), std::string::npos) << msg;
  EXPECT_EQ(read_lock_record(d.str())->host, "node7");  // the refused job left the record alone
  write(d.path / "run.lock", record(now - 600, false));  // that job died ten minutes ago
  EXPECT_NO_THROW(RunLock::acquire(d.str()));
  write(d.path / "run.lock", record(now - 5, true));  // ... or released it cleanly
  EXPECT_NO_THROW(RunLock::acquire(d.str()));
  // The same record from this host means nothing: the kernel's lock is the authority here.
  RunLockOptions as_node7;
  as_node7.hostname = "node7";
  write(d.path / "run.lock", record(now - 5, false));
  EXPECT_NO_THROW(RunLock::acquire(d.str(), as_node7));
}

TEST(RunDir, FreshOrEmptyFoldersStart) {
  TempDir d;
  EXPECT_NO_THROW(check_run_dir_start(d.str() + "/new", false, false));
  EXPECT_FALSE(inspect_run_dir(d.str() + "/new").exists);
  write(d.path / "metrics.jsonl", "");  // a run that failed before its first step
  fs::create_directories(d.path / "checkpoints");
  write(d.path / "rank0.log", "log\n");
  EXPECT_FALSE(inspect_run_dir(d.str()).has_results());
  EXPECT_NO_THROW(check_run_dir_start(d.str(), false, false));
}

TEST(RunDir, AnEarlierRunNeedsResumeOrOverwrite) {
  TempDir d;
  write(d.path / "metrics.jsonl", "{\"step\":1}\n{\"step\":2}\n");
  write(d.path / "checkpoints" / "step_2" / "meta.json", "{}");
  std::string msg = message_of([&] { check_run_dir_start(d.str(), false, false); });
  EXPECT_NE(msg.find("holds an interrupted run (no summary.json, 2 lines in metrics.jsonl, checkpoints/ step_2)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--resume " + d.str()), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set run.overwrite=true"), std::string::npos) << msg;
  write(d.path / "summary.json", "{}");
  msg = message_of([&] { check_run_dir_start(d.str(), false, false); });
  EXPECT_NE(msg.find("holds a finished run (summary.json"), std::string::npos) << msg;
  EXPECT_NO_THROW(check_run_dir_start(d.str(), true, false));
  EXPECT_NO_THROW(check_run_dir_start(d.str(), false, true));
  // Each of the three alone counts.
  TempDir s;
  write(s.path / "summary.json", "{}");
  EXPECT_TRUE(inspect_run_dir(s.str()).has_results());
  TempDir c;
  write(c.path / "checkpoints" / "latest", "step_5");
  EXPECT_TRUE(inspect_run_dir(c.str()).has_results());
}

TEST(RunDir, OverwriteRemovesOnlyWhatARunWrites) {
  TempDir d;
  for (const char* f : {"metrics.jsonl", "summary.json", "config.json", "rank0.log", "rank12.log", "init.safetensors",
                        "batches.rank1.bin", "final_shard.rank0.bin", "events.out.tfevents.1700000000.vm",
                        "notes.txt", "rank0.log.bak", "my_metrics.jsonl"}) {
    write(d.path / f, "x");
  }
  write(d.path / "checkpoints" / "step_1" / "shard.bin", "x");
  auto lock = RunLock::acquire(d.str());
  const auto removed = clear_run_results(d.str());
  EXPECT_EQ(removed, (std::vector<std::string>{"batches.rank1.bin", "checkpoints", "config.json",
                                               "events.out.tfevents.1700000000.vm", "final_shard.rank0.bin",
                                               "init.safetensors", "metrics.jsonl", "rank0.log", "rank12.log",
                                               "summary.json"}));
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(d.path)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{"my_metrics.jsonl", "notes.txt", "rank0.log.bak", "run.lock"}));
  EXPECT_FALSE(inspect_run_dir(d.str()).has_results());
}

}  // namespace
}  // namespace zeroshard::io
