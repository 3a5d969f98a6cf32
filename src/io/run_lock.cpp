#include "io/run_lock.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <thread>

namespace zeroshard::io {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLockName = "run.lock";

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string iso_utc(int64_t t) {
  const time_t tt = static_cast<time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string this_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

std::string this_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(s.begin(), s.end(), '\0', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > 300) s = s.substr(0, 297) + "...";
  return s;
}

std::string sys_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}

// Whole-file write lock; true when taken, false when another holder has it.
bool try_lock(int fd, const std::string& path) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;
  int rc = fcntl(fd, F_OFD_SETLK, &fl);
  if (rc != 0 && errno == EINVAL) rc = fcntl(fd, F_SETLK, &fl);  // kernel without OFD locks
  if (rc == 0) return true;
  if (errno == EAGAIN || errno == EACCES) return false;
  throw std::runtime_error(sys_error("cannot lock", path) +
                           " (the filesystem may not support fcntl locks; see src/io/run_lock.h)");
}

std::optional<LockHolder> parse_record(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("host") || !j.contains("pid")) return std::nullopt;
  LockHolder h;
  h.host = j.value("host", "");
  h.pid = j.value("pid", int64_t{0});
  h.started = j.value("started", "");
  h.started_unix = j.value("started_unix", int64_t{0});
  h.heartbeat_unix = j.value("released", false) ? 0 : j.value("heartbeat_unix", int64_t{0});
  h.command = j.value("command", "");
  return h;
}

std::string record_text(const LockHolder& h, bool released) {
  nlohmann::json j = {{"host", h.host},
                      {"pid", h.pid},
                      {"started", h.started},
                      {"started_unix", h.started_unix},
                      {"heartbeat_unix", h.heartbeat_unix},
                      {"released", released},
                      {"command", h.command}};
  return j.dump();
}

std::optional<LockHolder> read_record_file(const std::string& path) {
  // A heartbeat may rewrite the record while we read it: retry a torn read.
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find_first_not_of(" \n") == std::string::npos) return std::nullopt;
    if (auto h = parse_record(text)) return h;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

}  // namespace

std::string LockHolder::describe() const {
  std::string s = "host " + host + ", pid " + std::to_string(pid) + ", started " + started;
  if (!command.empty()) s += " (" + command + ")";
  return s;
}

struct RunLock::Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

std::unique_ptr<RunLock> RunLock::acquire(const std::string& run_dir, const RunLockOptions& options) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw std::runtime_error("cannot create run folder '" + run_dir + "': " + ec.message());
  std::unique_ptr<RunLock> lock(new RunLock());
  lock->path_ = (fs::path(run_dir) / kLockName).string();
  const std::string& path = lock->path_;
  const std::string hostname = options.hostname.empty() ? this_hostname() : options.hostname;
  lock->fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock->fd_ < 0) throw std::runtime_error(sys_error("cannot open lock file", path));

  if (!try_lock(lock->fd_, path)) {
    // The winner writes its record right after locking; until then the file may still show a
    // dead earlier holder from this host: wait a little for the live one.
    std::optional<LockHolder> holder;
    for (int attempt = 0; attempt < 100; ++attempt) {
      holder = read_record_file(path);
      const bool stale_local = holder && holder->host == hostname && kill(static_cast<pid_t>(holder->pid), 0) != 0 &&
                               errno == ESRCH;
      if (holder && !stale_local) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw std::runtime_error("run folder '" + run_dir + "' is in use by another job: " +
                             (holder ? holder->describe() : std::string("(its record is not readable)")) +
                             " [lock file " + path + "]. Wait for it to end or stop it, or choose another run.dir.");
  }
  // Locked. On filesystems whose locks do not reach other hosts, a live job elsewhere still
  // shows a fresh heartbeat in the record.
  if (auto previous = read_record_file(path); previous && previous->host != hostname && previous->heartbeat_unix > 0) {
    const int64_t age = now_unix() - previous->heartbeat_unix;
    const int64_t stale_s = std::chrono::duration_cast<std::chrono::seconds>(options.stale_after).count();
    if (age < stale_s) {
      throw std::runtime_error(
          "run folder '" + run_dir + "' is in use by a job on another host: " + previous->describe() +
          ", heartbeat " + std::to_string(age) + " s ago [lock file " + path +
          "]. The lock itself did not stop this job, so this filesystem's locks do not reach other hosts (see "
          "src/io/run_lock.h). If that job is gone, start again after its heartbeat is " + std::to_string(stale_s) +
          " s old.");
    }
  }
  LockHolder& h = lock->holder_;
  h.host = hostname;
  h.pid = getpid();
  h.started_unix = now_unix();
  h.started = iso_utc(h.started_unix);
  h.heartbeat_unix = h.started_unix;
  h.command = this_command();
  lock->record_size_ = record_text(h, false).size() + 32;  // the heartbeat rewrites in place
  if (ftruncate(lock->fd_, 0) != 0) throw std::runtime_error(sys_error("cannot truncate", path));
  lock->write_record(h.heartbeat_unix);
  lock->held_ = true;

  lock->heartbeat_ = std::make_unique<Heartbeat>();
  Heartbeat* hb = lock->heartbeat_.get();
  RunLock* self = lock.get();
  const auto period = options.heartbeat;
  hb->thread = std::thread([hb, self, period] {
    std::unique_lock<std::mutex> guard(hb->mu);
    while (!hb->cv.wait_for(guard, period, [hb] { return hb->stop; })) {
      try {
        self->write_record(now_unix());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "zeroshard: warning: run lock heartbeat: %s\n", e.what());
      }
    }
  });
  return lock;
}

void RunLock::write_record(int64_t heartbeat_unix) {
  LockHolder h = holder_;
  h.heartbeat_unix = heartbeat_unix;
  std::string text = record_text(h, heartbeat_unix == 0);
  if (text.size() + 1 > record_size_) record_size_ = text.size() + 1;
  text.resize(record_size_ - 1, ' ');
  text += '\n';
  if (pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    throw std::runtime_error(sys_error("cannot write lock record", path_));
  }
  fdatasync(fd_);  // other hosts read the record from the server
}

RunLock::~RunLock() {
  if (heartbeat_) {
    {
      std::lock_guard<std::mutex> guard(heartbeat_->mu);
      heartbeat_->stop = true;
    }
    heartbeat_->cv.notify_all();
    heartbeat_->thread.join();
  }
  if (held_) {
    // Released: a job on another host need not wait for the heartbeat to age. (A refused
    // job never writes: the record is the holder's.)
    try {
      write_record(0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zeroshard: warning: releasing run lock: %s\n", e.what());
    }
  }
  if (fd_ >= 0) close(fd_);
}

std::optional<LockHolder> read_lock_record(const std::string& run_dir) {
  return read_record_file((fs::path(run_dir) / kLockName).string());
}

std::optional<LockHolder> current_lock_holder(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / kLockName).string();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct flock fl {};
  fl.l_type = F_WRLCK;  // would a write lock conflict? (a query: nothing is taken)
  fl.l_whence = SEEK_SET;
  int rc = fcntl(fd, F_OFD_GETLK, &fl);
  if (rc != 0 && errno == EINVAL) {
    fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    rc = fcntl(fd, F_GETLK, &fl);
  }
  close(fd);
  if (rc != 0 || fl.l_type == F_UNLCK) return std::nullopt;
  if (auto h = read_record_file(path)) return h;
  LockHolder unknown;
  unknown.host = "(unreadable record in " + path + ")";
  return unknown;
}

std::string RunDirState::describe() const {
  std::string s = summary ? "a finished run (summary.json" : "an interrupted run (no summary.json";
  if (metrics_lines > 0) s += ", " + std::to_string(metrics_lines) + " lines in metrics.jsonl";
  if (!checkpoints.empty()) {
    s += ", checkpoints/";
    for (size_t i = 0; i < checkpoints.size() && i < 4; ++i) s += (i ? ", " : " ") + checkpoints[i];
    if (checkpoints.size() > 4) s += ", ... (" + std::to_string(checkpoints.size()) + " entries)";
  }
  return s + ")";
}

RunDirState inspect_run_dir(const std::string& run_dir) {
  RunDirState st;
  std::error_code ec;
  st.exists = fs::is_directory(run_dir, ec);
  if (!st.exists) return st;
  const fs::path dir(run_dir);
  if (std::ifstream in(dir / "metrics.jsonl"); in) {
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") != std::string::npos) ++st.metrics_lines;
    }
  }
  if (fs::is_directory(dir / "checkpoints", ec)) {
    for (const auto& entry : fs::directory_iterator(dir / "checkpoints", ec)) {
      st.checkpoints.push_back(entry.path().filename().string());
    }
    std::sort(st.checkpoints.begin(), st.checkpoints.end());
  }
  st.summary = fs::exists(dir / "summary.json", ec);
  return st;
}

void check_run_dir_start(const std::string& run_dir, bool resuming, bool overwrite) {
  if (resuming || overwrite) return;
  const RunDirState st = inspect_run_dir(run_dir);
  if (!st.has_results()) return;
  throw std::invalid_argument("run.dir '" + run_dir + "' holds " + st.describe() +
                              ". To continue it: `zeroshard train --resume " + run_dir +
                              " ...`; to start over there, replacing its results: `--set run.overwrite=true`; or "
                              "choose another run.dir.");
}

std::vector<std::string> clear_run_results(const std::string& run_dir) {
  static const std::regex ours(
      R"((metrics\.jsonl|summary\.json|config\.json|checkpoints|init\.safetensors|rank[0-9]+\.log|)"
      R"(batches\.rank[0-9]+\.bin|final_shard\.rank[0-9]+\.bin|events\.out\.tfevents\..+))");
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, ours)) continue;
    fs::remove_all(entry.path(), ec);
    if (ec) throw std::runtime_error("run.overwrite: cannot remove '" + entry.path().string() + "': " + ec.message());
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace zeroshard::io
