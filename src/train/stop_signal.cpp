#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

namespace zeroshard::train {

namespace {

volatile sig_atomic_t g_pending = 0;
volatile sig_atomic_t g_first_ms = 0;  // CLOCK_MONOTONIC of the first signal, in ms (wraps harmlessly)
struct sigaction g_old_int {}, g_old_term {};

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

sig_atomic_t now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<sig_atomic_t>((ts.tv_sec % 1000000) * 1000 + ts.tv_nsec / 1000000);
}

void on_stop_signal(int sig) {
  if (g_pending == 0) {
    g_pending = sig;
    g_first_ms = now_ms();
    write_stderr(sig == SIGINT ? "zeroshard: SIGINT received: stopping after this step (again to abort now)\n"
                               : "zeroshard: SIGTERM received: stopping after this step (again to abort now)\n");
    return;
  }
  // The same stop delivered twice (a scheduler signalling every process and the launcher
  // forwarding it) is not a second request.
  if (now_ms() - g_first_ms < 1000) return;
  write_stderr("zeroshard: second signal: aborting\n");
  // Die by the signal itself, so nobody mistakes this for a clean stop (exit 130 / 0).
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

StopSignal::StopSignal() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGINT);  // one handler at a time
  sigaddset(&sa.sa_mask, SIGTERM);
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
