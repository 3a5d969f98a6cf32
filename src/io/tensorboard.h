// TensorBoard event files (`run.tensorboard: true`): <dir>/events.out.tfevents.<time>.<host>,
// a sequence of TFRecords -- uint64 length, masked CRC-32C of those 8 bytes, the data, masked
// CRC-32C of the data (little-endian) -- each holding one Event protobuf
// (src/io/tensorboard_event.proto, TensorBoard's field numbers). The first record is the
// file version "brain.Event:2"; scalars are Summary values with simple_value (float32, as
// TensorBoard stores them). Each event is flushed as written, so TensorBoard can follow a
// running job; a record cut short by a crash is the last one, and readers stop there.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::io {

// TFRecord's masking of a CRC-32C (util::crc32c): rotate right by 15 bits, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

class EventWriter {
 public:
  // Creates dir if needed and a new event file in it (a name already taken gets ".<pid>"
  // appended). Writes the file-version record; with resume_step > 0 also a SessionLog START at
  // that step, after which TensorBoard discards the steps >= it from earlier files (the
  // steps a resumed run repeats). Throws std::runtime_error naming the file.
  explicit EventWriter(const std::string& dir, int64_t resume_step = 0);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One Event holding all these scalars at `step` (wall time: now, unless given).
  void add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step, double wall_time = -1);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The scalars of one metrics.jsonl line: every top-level number or boolean (as 0/1) under its
// own key, and each entry of "ranks" as "ranks/<rank>/<key>". Returns {step, scalars}; throws
// std::invalid_argument if the line has no integer "step".
std::pair<int64_t, std::vector<std::pair<std::string, double>>> metrics_scalars(const nlohmann::json& line);

}  // namespace zeroshard::io
