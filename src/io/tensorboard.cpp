#include "io/tensorboard.h"

#include "util/crc32.h"
#include "util/optional_parts.h"

#ifndef ZS_WITH_TENSORBOARD
#error "ZS_WITH_TENSORBOARD comes from CMakeLists.txt"
#endif
#if ZS_WITH_TENSORBOARD
#include "tensorboard_event.pb.h"
#endif

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace zeroshard::io {
namespace {

namespace fs = std::filesystem;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

#if ZS_WITH_TENSORBOARD
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}
#endif

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = util::crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventWriter::EventWriter(const std::string& dir, int64_t resume_step) {
  util::require_part(util::OptionalPart::kTensorBoard, "tensorboard: writing into '" + dir + "'");
#if ZS_WITH_TENSORBOARD
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("tensorboard: cannot create '" + dir + "': " + ec.message());
  const double start = now_seconds();
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(start)) + "." + hostname()))
              .string();
  if (fs::exists(path_)) path_ += "." + std::to_string(getpid());
  file_ = std::fopen(path_.c_str(), "wbx");  // x: never append to another writer's file
  if (file_ == nullptr) throw std::runtime_error("tensorboard: cannot create '" + path_ + "': " + std::strerror(errno));
  zeroshard::tensorboard::Event version;
  version.set_wall_time(start);
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
  if (resume_step > 0) {
    zeroshard::tensorboard::Event restart;
    restart.set_wall_time(start);
    restart.set_step(resume_step);
    restart.mutable_session_log()->set_status(zeroshard::tensorboard::SessionLog::START);
    write_record(restart.SerializeAsString());
  }
#else
  (void)resume_step;
#endif
}

EventWriter::~EventWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EventWriter::add_scalars(const std::vector<std::pair<std::string, double>>& scalars, int64_t step,
                              double wall_time) {
#if ZS_WITH_TENSORBOARD
  zeroshard::tensorboard::Event event;
  event.set_wall_time(wall_time >= 0 ? wall_time : now_seconds());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    auto* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
#else
  (void)scalars, (void)step, (void)wall_time;  // no EventWriter exists in this build
#endif
}

void EventWriter::write_record(const std::string& data) {
  std::string header;
  put_le(header, data.size(), 8);
  const uint32_t header_crc = masked_crc32c(header.data(), header.size());
  std::string record = header;
  put_le(record, header_crc, 4);
  record += data;
  put_le(record, masked_crc32c(data.data(), data.size()), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    throw std::runtime_error("tensorboard: cannot write '" + path_ + "': " + std::strerror(errno));
  }
}

std::pair<int64_t, std::vector<std::pair<std::string, double>>> metrics_scalars(const nlohmann::json& line) {
  if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) {
    throw std::invalid_argument("tensorboard: a metrics line needs an integer \"step\": " + line.dump().substr(0, 80));
  }
  std::vector<std::pair<std::string, double>> out;
  auto add = [&out](const std::string& tag, const nlohmann::json& v) {
    if (v.is_boolean()) out.emplace_back(tag, v.get<bool>() ? 1.0 : 0.0);
    else if (v.is_number()) out.emplace_back(tag, v.get<double>());
  };
  for (const auto& [key, value] : line.items()) {
    if (key == "step") continue;
    if (key == "ranks" && value.is_array()) {
      for (const auto& entry : value) {
        if (!entry.is_object() || !entry.contains("rank")) continue;
        const std::string prefix = "ranks/" + entry["rank"].dump() + "/";
        for (const auto& [k, v] : entry.items()) {
          if (k != "rank") add(prefix + k, v);
        }
      }
    } else {
      add(key, value);
    }
  }
  return {line["step"].get<int64_t>(), out};
}

}  // namespace zeroshard::io
