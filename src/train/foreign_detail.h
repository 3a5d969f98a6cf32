// Shared by foreign_config.cpp (accelerate, Megatron, merging) and foreign_deepspeed.cpp.
#pragma once

#include "train/foreign_config.h"

#include <nlohmann/json.hpp>

#include <string>

namespace zeroshard::train::foreign {

// Collects the settings of one file; every method names `file: key` in what it records or throws.
class Mapper {
 public:
  Mapper(ForeignConfig& out, std::string file) : out_(out), file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  std::string where(const std::string& key) const { return file_ + ": " + key; }

  void set(const std::string& key, const std::string& zs_key, const std::string& value, const std::string& note = "");
  void automatic(const std::string& key, const std::string& zs_key);  // "auto": zeroshard's value kept
  void honoured(const std::string& key, const std::string& note);     // nothing to change
  [[noreturn]] void refuse(const std::string& key, const std::string& shown_value, const std::string& why) const;
  ForeignConfig& out() { return out_; }

 private:
  ForeignConfig& out_;
  std::string file_;
};

// Shortest decimal text that reads back as the same double.
std::string number_text(double v);

// Parses a JSON file; a key given twice in one object is an error naming it (DeepSpeed itself
// rejects duplicate keys; Python's json would silently keep the last).
nlohmann::json load_json(const std::string& path);

// A DeepSpeed config (already parsed) into `m`.
void map_deepspeed(const nlohmann::json& ds, Mapper& m);

}  // namespace zeroshard::train::foreign
