// Small text helpers (name matching, list parsing, sizes).
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace zeroshard::util {

// Non-empty and only the digits 0-9.
inline bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

inline bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

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

// {"a", "b"}, ", " -> "a, b".
inline std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// "23.80 GB": bytes in decimal gigabytes, as the logs and benches print sizes.
inline std::string gigabytes(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  return buf;
}

}  // namespace zeroshard::util
