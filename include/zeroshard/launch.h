// Starts N local ranks of a command, torchrun-style: each child gets RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. If one rank fails, the others are
// stopped and the failing rank's last error lines are printed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace zeroshard {

// Exit code of a rank that stopped because another rank failed (a CommError): the launcher
// reports the rank that failed for another reason as the cause.
constexpr int kExitPeerLost = 3;

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> argv;  // argv[0] is the program to exec (a path)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;                            // 0: pick a free port
  std::chrono::milliseconds grace{5000};          // SIGTERM -> SIGKILL delay for survivors
  // After forwarding SIGINT/SIGTERM: how long the ranks may take to finish the step and
  // save before they are killed (a second signal kills them at once).
  std::chrono::milliseconds signal_grace{600000};
};

// Runs the ranks to completion. Returns 0 when all succeed, otherwise the failing rank's
// exit code (128 + signal for a signal), after the other ranks have been stopped. SIGINT and
// SIGTERM are forwarded to the ranks once; then the ranks' own exit code is returned.
int launch_local(const LaunchOptions& options);

// A TCP port that was free on this host a moment ago.
int pick_free_port();

}  // namespace zeroshard
