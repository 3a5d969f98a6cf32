#include "cli/launch_or_run.h"

#include "cli/command.h"
#include "zeroshard/launch.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

namespace zeroshard::cli {
namespace {
std::vector<std::string> g_args;
}

void set_command_line(int argc, char** argv) { g_args.assign(argv + 1, argv + argc); }

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = '\0';
  return buf;
}

bool inside_job() { return std::getenv("RANK") != nullptr; }

int launch_or_run(int nproc, const std::vector<std::string>& extra_args,
                  const std::function<int(const RendezvousInfo&)>& body) {
  const RendezvousInfo rdv = RendezvousInfo::from_env();
  if (!inside_job() && nproc > 1) {
    LaunchOptions lo;
    lo.nproc = nproc;
    lo.argv = {self_exe()};
    lo.argv.insert(lo.argv.end(), g_args.begin(), g_args.end());
    lo.argv.insert(lo.argv.end(), extra_args.begin(), extra_args.end());
    return launch_local(lo);
  }
  if (inside_job() && nproc > 1 && nproc != rdv.world_size) {
    throw std::invalid_argument("--nproc " + std::to_string(nproc) + " disagrees with WORLD_SIZE=" +
                                std::to_string(rdv.world_size) + " of the surrounding launcher");
  }
  return body(rdv);
}

}  // namespace zeroshard::cli
