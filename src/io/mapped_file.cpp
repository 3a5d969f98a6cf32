#include "io/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace zeroshard::io {

namespace {

// The mappings a SIGBUS may come from, for its message. A fixed table read by the signal handler
// without a lock (slots are filled before their mapping is handed out and cleared after munmap).
struct MappedRange {
  uintptr_t begin = 0, end = 0;
  char path[480] = {};
};
std::array<MappedRange, 1024> g_ranges;
std::mutex g_ranges_mutex;

void write_str(const char* s) {
  const ssize_t unused = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)unused;
}

void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const MappedRange& r : g_ranges) {
    if (r.begin <= addr && addr < r.end) {
      write_str("zeroshard: bus error reading the memory-mapped file '");
      write_str(r.path);
      write_str("': it was truncated or replaced while this run used it (weights files must stay unchanged "
                "for the whole run)\n");
      ::_exit(1);
    }
  }
  ::signal(sig, SIG_DFL);  // not ours: the default action once the instruction runs again
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
}

void register_range(const char* data, uint64_t size, const std::string& path) {
  std::lock_guard<std::mutex> lock(g_ranges_mutex);
  for (MappedRange& r : g_ranges) {
    if (r.end != 0) continue;
    std::strncpy(r.path, path.c_str(), sizeof(r.path) - 1);
    r.begin = reinterpret_cast<uintptr_t>(data);
    r.end = r.begin + size;
    return;
  }
  // More than the table holds: the mapping works, a bus error in it is reported as a bare signal.
}

void unregister_range(const char* data) {
  std::lock_guard<std::mutex> lock(g_ranges_mutex);
  for (MappedRange& r : g_ranges) {
    if (r.begin == reinterpret_cast<uintptr_t>(data) && r.end != 0) r = MappedRange{};
  }
}

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error("cannot map '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || st.st_size == 0) {
    ::close(fd_);
    throw std::runtime_error("cannot map '" + path + "': it is empty or cannot be read");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  dev_ = static_cast<uint64_t>(st.st_dev);
  ino_ = static_cast<uint64_t>(st.st_ino);
  mtime_ns_ = mtime_ns(st);
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error("cannot map '" + path + "': " + std::strerror(err));
  }
  data_ = static_cast<char*>(p);
  install_sigbus_handler();
  register_range(data_, size_, path_);
}

MappedFile::~MappedFile() {
  ::munmap(data_, size_);
  unregister_range(data_);
  ::close(fd_);
}

void MappedFile::check_unchanged() const {
  struct stat now {}, named {};
  if (::fstat(fd_, &now) != 0) throw std::runtime_error("'" + path_ + "': cannot stat it: " + std::strerror(errno));
  std::string what;
  if (static_cast<uint64_t>(now.st_size) != size_) {
    what = "its size changed from " + std::to_string(size_) + " to " + std::to_string(now.st_size) + " bytes";
  } else if (mtime_ns(now) != mtime_ns_) {
    what = "it was written to (its modification time changed)";
  } else if (::stat(path_.c_str(), &named) != 0) {
    what = "it was removed";
  } else if (static_cast<uint64_t>(named.st_dev) != dev_ || static_cast<uint64_t>(named.st_ino) != ino_) {
    what = "the path now names another file (replaced)";
  }
  if (!what.empty()) {
    throw std::runtime_error("'" + path_ + "' changed while this run reads its weights in place: " + what +
                             "; weights files must stay unchanged for the whole run");
  }
}

namespace {

// The page-aligned range covering [offset, offset + n) of a mapping at `base`.
void advise(char* base, uint64_t size, uint64_t offset, uint64_t n, int advice) {
  if (n == 0 || offset >= size) return;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = offset / page * page;
  const uint64_t end = std::min(size, offset + n);
  ::madvise(base + begin, end - begin, advice);  // a hint: an error (an old kernel) changes nothing read
}

}  // namespace

void MappedFile::will_need(uint64_t offset, uint64_t n) const { advise(data_, size_, offset, n, MADV_WILLNEED); }

void MappedFile::done_with(uint64_t offset, uint64_t n) const {
#ifdef MADV_COLD
  advise(data_, size_, offset, n, MADV_COLD);
#else
  (void)offset;
  (void)n;
#endif
}

}  // namespace zeroshard::io
