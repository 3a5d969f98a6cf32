#include "data/jsonl.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace zeroshard::data {

JsonlReader::JsonlReader(const std::string& path, const JsonlOptions& options)
    : path_(path), options_(options), in_(path, std::ios::binary) {
  if (!in_) throw std::runtime_error(path + ": cannot open jsonl file: " + std::strerror(errno));
}

bool JsonlReader::next(JsonlRecord& record) {
  while (std::getline(in_, buffer_)) {
    const uint64_t start = offset_;
    offset_ += buffer_.size() + (in_.eof() ? 0 : 1);
    ++line_;
    size_t begin = 0;
    if (line_ == 1 && buffer_.compare(0, 3, "\xEF\xBB\xBF") == 0) begin = 3;
    size_t end = buffer_.size();
    if (end > begin && buffer_[end - 1] == '\r') --end;
    const size_t first = buffer_.find_first_not_of(" \t\r\n", begin);
    if (first == std::string::npos || first >= end) {
      if (options_.skip_blank_lines) continue;
    }
    std::string problem;
    try {
      record.value = nlohmann::json::parse(buffer_.begin() + static_cast<std::ptrdiff_t>(begin),
                                           buffer_.begin() + static_cast<std::ptrdiff_t>(end));
      if (options_.require_object && !record.value.is_object()) {
        problem = std::string("expected a JSON object, got ") + record.value.type_name();
      }
    } catch (const nlohmann::json::parse_error& e) {
      problem = std::string("malformed JSON: ") + e.what();
    }
    if (problem.empty()) {
      record.line = line_;
      record.offset = start;
      return true;
    }
    JsonlError err{line_, path_ + ":" + std::to_string(line_) + ": " + problem};
    if (!options_.collect_errors) throw std::runtime_error(err.message);
    errors_.push_back(std::move(err));
  }
  if (in_.bad()) throw std::runtime_error(path_ + ":" + std::to_string(line_ + 1) + ": read error: " + std::strerror(errno));
  return false;
}

std::vector<JsonlRecord> read_jsonl(const std::string& path, const JsonlOptions& options, std::vector<JsonlError>* errors) {
  if (options.collect_errors && errors == nullptr) {
    throw std::invalid_argument(path + ": read_jsonl with collect_errors needs an errors vector");
  }
  JsonlReader reader(path, options);
  std::vector<JsonlRecord> out;
  JsonlRecord r;
  while (reader.next(r)) out.push_back(std::move(r));
  if (errors != nullptr) *errors = reader.errors();
  return out;
}

}  // namespace zeroshard::data
