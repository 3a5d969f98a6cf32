// A streaming JSON-lines reader: one JSON value per line, read one line at a time (a corpus is
// never held in memory). Lines are numbered from 1 in the file; a UTF-8 byte-order mark at the
// start and a CR before each LF are ignored; blank (whitespace-only) lines are skipped by
// default — they carry no record — and still counted, so later line numbers stay true.
//
// A malformed line throws std::runtime_error "<file>:<line>: malformed JSON: <parser message>"
// (nlohmann's message: byte position within the line and what it expected), or, with
// collect_errors, is recorded in errors() and skipped; the caller decides what to do with them
// (report them all, stop at a threshold) — nothing is dropped without a record.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zeroshard::data {

struct JsonlOptions {
  bool collect_errors = false;   // false: the first malformed line throws
  bool skip_blank_lines = true;  // false: a blank line is a malformed line
  bool require_object = true;    // a line that parses to a non-object is malformed
};

struct JsonlRecord {
  int64_t line = 0;         // 1-based line number in the file
  uint64_t offset = 0;      // byte offset of the line's first byte
  nlohmann::json value;
};

struct JsonlError {
  int64_t line = 0;
  std::string message;      // "<file>:<line>: ..."
};

class JsonlReader {
 public:
  explicit JsonlReader(const std::string& path, const JsonlOptions& options = {});

  // The next record; false at the end of the file.
  bool next(JsonlRecord& record);
  const std::vector<JsonlError>& errors() const { return errors_; }
  const std::string& path() const { return path_; }
  int64_t lines_read() const { return line_; }

 private:
  std::string path_;
  JsonlOptions options_;
  std::ifstream in_;
  std::string buffer_;
  int64_t line_ = 0;
  uint64_t offset_ = 0;
  std::vector<JsonlError> errors_;
};

// The whole file; with options.collect_errors the malformed lines go to *errors (required then).
std::vector<JsonlRecord> read_jsonl(const std::string& path, const JsonlOptions& options = {},
                                    std::vector<JsonlError>* errors = nullptr);

}  // namespace zeroshard::data
