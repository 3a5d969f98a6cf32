#include "zeroshard/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <thread>

namespace zeroshard {
namespace {

volatile sig_atomic_t g_forward_signal = 0;  // the first SIGINT/SIGTERM received
volatile sig_atomic_t g_signal_count = 0;
void on_signal(int sig) {
  if (g_signal_count == 0) g_forward_signal = sig;
  g_signal_count = g_signal_count + 1;
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int err_fd = -1;          // read end of the child's stderr
  std::string partial;      // incomplete last line
  std::deque<std::string> tail;  // last lines of stderr, for the failure report
  bool exited = false;
  int status = 0;
};

void forward_lines(Child& c, const char* data, size_t n) {
  c.partial.append(data, n);
  size_t pos;
  while ((pos = c.partial.find('\n')) != std::string::npos) {
    std::string line = c.partial.substr(0, pos);
    c.partial.erase(0, pos + 1);
    std::fprintf(stderr, "[rank %d] %s\n", c.rank, line.c_str());
    c.tail.push_back(line);
    if (c.tail.size() > 12) c.tail.pop_front();
  }
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "unknown status";
}

}  // namespace

int pick_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("pick_free_port: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw std::runtime_error(std::string("pick_free_port: ") + std::strerror(errno));
  }
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

int launch_local(const LaunchOptions& options) {
  if (options.nproc < 1) throw std::invalid_argument("--nproc must be >= 1, got " + std::to_string(options.nproc));
  if (options.argv.empty()) throw std::invalid_argument("launch_local: empty command");
  const int port = options.master_port > 0 ? options.master_port : pick_free_port();

  std::vector<Child> children(options.nproc);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  const pid_t launcher_pid = getpid();
  for (int r = 0; r < options.nproc; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error(std::string("launch: pipe: ") + std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("launch: fork: ") + std::strerror(errno));
    if (pid == 0) {
      // Own process group: a terminal's Ctrl-C reaches the launcher only, which forwards it
      // once (a rank that got it twice would abort instead of stopping cleanly).
      setpgid(0, 0);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      // If the launcher dies (even by SIGKILL), the ranks stop too instead of training on.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher_pid) _exit(1);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      if (r != 0) {  // only rank 0 talks on stdout; the others log to their files
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
      }
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(options.nproc).c_str(), 1);
      setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      std::fprintf(stderr, "launch: exec %s failed: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    children[r].rank = r;
    children[r].pid = pid;
    children[r].err_fd = fds[0];
  }

  using Clock = std::chrono::steady_clock;
  // Exit 0, or 130 after a forwarded SIGINT (a rank that stopped cleanly), is no failure.
  auto expected_exit = [](int status) {
    const int code = exit_code_of(status);
    return code == 0 || (g_forward_signal == SIGINT && code == 130 && WIFEXITED(status));
  };
  Clock::time_point first_failure_at{};
  int failed_rank = -1;
  int failed_status = 0;
  bool stopping = false, forwarded = false, killed_on_second_signal = false;
  auto stop_deadline = std::chrono::steady_clock::now();
  int running = options.nproc;
  int open_pipes = options.nproc;
  while (running > 0 || open_pipes > 0) {
    std::vector<pollfd> pfds;
    std::vector<Child*> owners;
    for (auto& c : children) {
      if (c.err_fd >= 0) {
        pfds.push_back({c.err_fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 100);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        ssize_t n = read(pfds[i].fd, buf, sizeof(buf));
        if (n > 0) {
          forward_lines(*owners[i], buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          close(pfds[i].fd);
          owners[i]->err_fd = -1;
          --open_pipes;
          if (!owners[i]->partial.empty()) forward_lines(*owners[i], "\n", 1);
        }
      }
    }
    for (auto& c : children) {
      if (c.exited) continue;
      int status = 0;
      pid_t got = waitpid(c.pid, &status, WNOHANG);
      if (got == c.pid) {
        c.exited = true;
        c.status = status;
        --running;
        if (!expected_exit(status) && !stopping && first_failure_at == Clock::time_point{}) {
          first_failure_at = Clock::now();
        }
      }
    }
    // After the first failure, give the others a moment to exit on their own, then blame the
    // rank that failed for its own reason rather than one that only lost its peer.
    if (!stopping && first_failure_at != Clock::time_point{} &&
        (running == 0 || Clock::now() - first_failure_at > std::chrono::milliseconds(1500))) {
      for (const auto& c : children) {
        if (!c.exited || expected_exit(c.status)) continue;
        const bool own_reason = exit_code_of(c.status) != kExitPeerLost;
        if (failed_rank < 0 || (own_reason && exit_code_of(children[failed_rank].status) == kExitPeerLost)) {
          failed_rank = c.rank;
          failed_status = c.status;
        }
      }
    }
    // First signal: the ranks finish their step (and save), then exit by themselves.
    // Second signal: kill them now.
    if (g_forward_signal != 0 && !forwarded) {
      for (auto& c : children) if (!c.exited) kill(c.pid, g_forward_signal);
      forwarded = true;
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() + options.signal_grace;
    }
    if (g_signal_count >= 2 && !killed_on_second_signal) {
      std::fprintf(stderr, "zeroshard launch: second signal: killing the ranks\n");
      for (auto& c : children) if (!c.exited) kill(c.pid, SIGKILL);
      killed_on_second_signal = true;
    }
    if (failed_rank >= 0 && !stopping) {
      std::fprintf(stderr, "zeroshard launch: rank %d failed (%s); stopping the other ranks\n", failed_rank,
                   describe(failed_status).c_str());
      for (auto& c : children) if (!c.exited) kill(c.pid, SIGTERM);
      stopping = true;
      stop_deadline = std::chrono::steady_clock::now() + options.grace;
    }
    if (stopping && running > 0 && std::chrono::steady_clock::now() > stop_deadline) {
      for (auto& c : children) if (!c.exited) kill(c.pid, SIGKILL);
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::hours(1);
    }
    // A rank that exited can leave its stderr pipe open in a grandchild: stop reading then.
    if (running == 0) {
      for (auto& c : children) {
        if (c.err_fd >= 0) {
          char buf[4096];
          int flags = fcntl(c.err_fd, F_GETFL);
          fcntl(c.err_fd, F_SETFL, flags | O_NONBLOCK);
          ssize_t n;
          while ((n = read(c.err_fd, buf, sizeof(buf))) > 0) forward_lines(c, buf, static_cast<size_t>(n));
          close(c.err_fd);
          c.err_fd = -1;
          --open_pipes;
        }
      }
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (failed_rank >= 0) {
    const Child& c = children[failed_rank];
    std::fprintf(stderr, "zeroshard launch: job failed: rank %d ended with %s. Its last error output:\n",
                 failed_rank, describe(failed_status).c_str());
    for (const auto& line : c.tail) std::fprintf(stderr, "  | %s\n", line.c_str());
    return exit_code_of(failed_status);
  }
  if (g_forward_signal != 0) {
    const int sig = g_forward_signal;
    g_forward_signal = 0;
    g_signal_count = 0;
    // Ranks that stopped cleanly: their code (130 for SIGINT, 0 for SIGTERM); else 128 + sig.
    for (const auto& c : children) {
      if (!WIFEXITED(c.status)) return 128 + sig;
    }
    return exit_code_of(children[0].status);
  }
  for (const auto& c : children) {
    if (exit_code_of(c.status) != 0) return exit_code_of(c.status);
  }
  return 0;
}

}  // namespace zeroshard
