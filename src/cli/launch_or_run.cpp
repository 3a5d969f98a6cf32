#include "cli/launch_or_run.h"

#include "cli/command.h"
#include "cli/thread_env.h"
#include "zeroshard/launch.h"

#include <unistd.h>

#include <climits>
#include <stdexcept>

namespace zeroshard::cli {
namespace {
std::string g_argv0;
std::vector<std::string> g_args;

// --nproc N > 1 in a process that is the job's only one: it starts the N ranks itself.
bool launches_local(int nproc) { return nproc > 1 && launch_env().world_size == 1; }
}  // namespace

void set_command_line(int argc, char** argv) {
  g_argv0 = argc > 0 ? argv[0] : "zeroshard";
  g_args.assign(argv + 1, argv + argc);
}

const std::string& program_name() { return g_argv0; }

void prepare_compute_process() {
  std::vector<char*> argv;
  argv.push_back(g_argv0.data());
  for (auto& a : g_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  reexec_with_thread_env(argv.data());
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  buf[n] = '\0';
  return buf;
}

const comm::LaunchEnv& launch_env() {
  static const comm::LaunchEnv env = comm::resolve_launch_env();
  return env;
}

bool joins_job(int nproc) { return launch_env().in_job() && !launches_local(nproc); }

int job_world_size(int nproc) { return joins_job(nproc) ? launch_env().world_size : nproc; }
int job_local_world_size(int nproc) { return joins_job(nproc) ? launch_env().local_world_size : nproc; }

int launch_or_run(int nproc, const std::vector<std::string>& extra_args,
                  const std::function<int(const RendezvousInfo&)>& body) {
  const comm::LaunchEnv& env = launch_env();
  comm::check_local_launch(env, nproc);  // --nproc 3 inside a 2-rank srun step: refused
  if (launches_local(nproc)) {
    set_thread_env();  // the ranks inherit it; this process only waits for them
    LaunchOptions lo;
    lo.nproc = nproc;
    lo.argv = {self_exe()};
    lo.argv.insert(lo.argv.end(), g_args.begin(), g_args.end());
    lo.argv.insert(lo.argv.end(), extra_args.begin(), extra_args.end());
    return launch_local(lo);
  }
  prepare_compute_process();
  return body(RendezvousInfo::from_env());  // the same launch environment, as a rendezvous
}

}  // namespace zeroshard::cli
