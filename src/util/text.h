// Small text helpers shared by the config readers.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace zeroshard::util {

// "a, b ,c" -> {"a", "b", "c"}: split at `sep`, each item trimmed of spaces and tabs (empty
// items kept, so callers can reject them).
inline std::vector<std::string> split_trimmed(const std::string& text, char sep = ',') {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    out.push_back(item);
  }
  return out;
}

}  // namespace zeroshard::util
