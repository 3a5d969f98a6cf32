// Starts real rank processes for multi-rank tests (fork + exec, environment rendezvous).
#pragma once

#include <string>
#include <vector>

namespace zeroshard::testing {

struct RankResult {
  int exit_code = -1;  // 128 + signal when killed
  double seconds = 0;  // wall time until this rank exited
};

// Runs `program args...` as `world` ranks with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set,
// waits for all (killing everything after timeout_s), returns each rank's result.
std::vector<RankResult> run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
                                  double timeout_s = 120);

// A fresh temporary directory under $TMPDIR (or /tmp).
std::string make_temp_dir(const std::string& tag);

std::string read_text(const std::string& path);

// Runs a shell command, capturing stdout+stderr; returns the exit status (or 128 + signal).
int run_command(const std::string& command, std::string* output, double* seconds = nullptr);

}  // namespace zeroshard::testing
