#include "cli/thread_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace zeroshard::cli {

void reexec_with_thread_env(char** argv) {
  const char* marker = std::getenv("ZEROSHARD_THREAD_ENV");
  if (marker != nullptr) return;  // "1": set by the previous exec (ranks inherit it); "0": opted out
  // overwrite = 0: a value the user chose wins.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0);
  setenv("ZEROSHARD_THREAD_ENV", "1", 1);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "zeroshard: warning: re-executing /proc/self/exe to set OMP_WAIT_POLICY failed (%s); idle "
               "compute threads will spin (slow when other processes keep the cores busy)\n", std::strerror(errno));
}

}  // namespace zeroshard::cli
