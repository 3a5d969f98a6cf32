#include "train/metrics.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

namespace zeroshard::train {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

namespace {

// The value of the first line of a /proc file starting with `key`, times `unit`; 0 if absent.
int64_t proc_value(const char* path, const std::string& key, int64_t unit) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0) return std::strtoll(line.c_str() + key.size(), nullptr, 10) * unit;
  }
  return 0;
}

}  // namespace

ResidentBytes resident_bytes() {
  return {proc_value("/proc/self/status", "RssAnon:", 1024), proc_value("/proc/self/status", "RssFile:", 1024)};
}

int64_t storage_read_bytes() { return proc_value("/proc/self/io", "read_bytes:", 1); }

std::string exact_float(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", static_cast<double>(x));
  return buf;
}

JsonlWriter::JsonlWriter(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) throw std::runtime_error("cannot open '" + path + "' for writing");
}

void JsonlWriter::write(const nlohmann::json& line) {
  out_ << line.dump() << "\n";
  out_.flush();
  if (!out_) throw std::runtime_error("write to '" + path_ + "' failed");
}

RankLog::RankLog(const std::string& path, int rank) : out_(path, std::ios::app), rank_(rank) {
  if (!out_) throw std::runtime_error("cannot open '" + path + "' for writing");
}

void RankLog::line(const std::string& text) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  out_ << stamp << " [rank " << rank_ << "] " << text << "\n";
  out_.flush();
}

}  // namespace zeroshard::train
