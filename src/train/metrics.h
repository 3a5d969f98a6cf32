// metrics.jsonl (one JSON object per optimizer step), per-rank logs and process figures.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>

namespace zeroshard::train {

// Peak resident set size of this process, in bytes.
int64_t peak_rss_bytes();
// This process's resident bytes now, private (RssAnon) and file pages (RssFile: mapped files,
// shared with every process mapping them, e.g. frozen weights under model.frozen_storage=file),
// from /proc/self/status; 0 where it cannot be read.
struct ResidentBytes {
  int64_t anon = 0, file = 0;
};
ResidentBytes resident_bytes();
// Bytes this process has caused to be read from storage so far (/proc/self/io read_bytes: page
// cache misses, mapped pages included); 0 where it cannot be read.
int64_t storage_read_bytes();

// A float printed so that parsing it gives back the same float ("%.9g").
std::string exact_float(float x);

class JsonlWriter {
 public:
  explicit JsonlWriter(const std::string& path);
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  std::ofstream out_;
};

// <run_dir>/rank<N>.log: timestamped lines, flushed as written.
class RankLog {
 public:
  RankLog(const std::string& path, int rank);
  void line(const std::string& text);

 private:
  std::ofstream out_;
  int rank_;
};

}  // namespace zeroshard::train
