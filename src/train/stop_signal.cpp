#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

namespace zeroshard::train {

namespace {

volatile sig_atomic_t g_pending = 0;
struct sigaction g_old_int {}, g_old_term {};

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void on_stop_signal(int sig) {
  if (g_pending == 0) {
    g_pending = sig;
    write_stderr(sig == SIGINT ? "zeroshard: SIGINT received: stopping after this step (again to abort now)\n"
                               : "zeroshard: SIGTERM received: stopping after this step (again to abort now)\n");
  } else {
    write_stderr("zeroshard: second signal: aborting\n");
    _exit(128 + sig);
  }
}

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted system calls resume; the loop polls the flag
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignal::~StopSignal() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignal::pending() { return g_pending; }

}  // namespace zeroshard::train
