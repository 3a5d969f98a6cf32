#include "support/spawn.h"

#include "zeroshard/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace zeroshard::testing {

std::vector<RankResult> run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                                  double timeout_s) {
  const int port = pick_free_port();
  const auto start = std::chrono::steady_clock::now();
  std::vector<pid_t> pids(world);
  for (int r = 0; r < world; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> argv{const_cast<char*>(program.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(program.c_str(), argv.data());
      _exit(127);
    }
    pids[r] = pid;
  }
  std::vector<RankResult> results(world);
  int remaining = world;
  while (remaining > 0) {
    for (int r = 0; r < world; ++r) {
      if (results[r].exit_code != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        results[r].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        --remaining;
      }
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s) {
      for (int r = 0; r < world; ++r) {
        if (results[r].exit_code == -1) kill(pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return results;
}

std::string make_temp_dir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/zs_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return buf.data();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_command(const std::string& command, std::string* output, double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  if (output) *output = out;
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace zeroshard::testing
