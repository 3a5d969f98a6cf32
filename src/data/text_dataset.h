// Byte-level text corpora that need no download: the license texts every Debian system
// ships (/usr/share/common-licenses), a deterministic generated corpus, or any file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::data {

// Byte-level tokenizer: token = byte value (vocab 256).
struct ByteTokenizer {
  static constexpr int64_t kVocabSize = 256;
  static std::vector<uint8_t> encode(const std::string& text) { return {text.begin(), text.end()}; }
  static std::string decode(const std::vector<int64_t>& tokens);
};

struct TextSourceOptions {
  std::string source = "system_text";  // system_text | synthetic | file
  std::string path;                    // for file (and an override directory for system_text)
  int64_t synthetic_bytes = 1 << 20;
  uint64_t seed = 1234;
};

// Loads the corpus; throws std::runtime_error naming the path when it is missing or empty.
std::vector<uint8_t> load_corpus(const TextSourceOptions& options);

// Deterministic English-like text from a small grammar (subject, verb, object, place).
std::string synthetic_text(int64_t bytes, uint64_t seed);

}  // namespace zeroshard::data
