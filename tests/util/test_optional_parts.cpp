// The optional parts (src/util/optional_parts.h): each is built exactly as its CMake option says,
// and in a build without one (ZEROSHARD_CORE=ON: scripts/core_build.sh) every entry point that
// needs it refuses, naming the user's input and the option, instead of failing sample by sample.
#include "util/optional_parts.h"

#include "data/metadata_csv.h"
#include "io/image_codec.h"
#include "io/tensorboard.h"
#include "io/video_codec.h"
#include "text/bpe_tokenizer.h"
#include "text/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

using namespace zeroshard;
namespace fs = std::filesystem;

namespace {

// What an entry point threw, or "" when it did not throw.
template <typename F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Expects `message` to be the refusal of `option`, naming `input`.
void expect_refusal(const std::string& message, const std::string& option, const std::string& input) {
  EXPECT_NE(message.find("built without"), std::string::npos) << message;
  EXPECT_NE(message.find("-D" + option + "=ON"), std::string::npos) << message;
  EXPECT_NE(message.find(input), std::string::npos) << message;
}

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("zs_parts_" + std::to_string(::getpid()));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST(OptionalParts, EachPartIsBuiltExactlyAsItsCMakeOptionSays) {
  const std::map<std::string, bool> configured = {
      {"ZEROSHARD_WITH_IMAGES", ZS_TEST_WITH_IMAGES},         {"ZEROSHARD_WITH_VIDEO", ZS_TEST_WITH_VIDEO},
      {"ZEROSHARD_WITH_TOKENIZERS", ZS_TEST_WITH_TOKENIZERS}, {"ZEROSHARD_WITH_SENTENCEPIECE", ZS_TEST_WITH_SENTENCEPIECE},
      {"ZEROSHARD_WITH_TENSORBOARD", ZS_TEST_WITH_TENSORBOARD}};
  ASSERT_EQ(util::optional_parts().size(), configured.size());
  for (const util::OptionalPartInfo& p : util::optional_parts()) {
    EXPECT_EQ(p.built, configured.at(p.cmake_option)) << p.cmake_option;
    EXPECT_EQ(util::built_with(p.part), p.built) << p.cmake_option;
    const std::string message = thrown([&] { util::require_part(p.part, "the user's input"); });
    if (p.built) {
      EXPECT_EQ(message, "") << p.cmake_option;
    } else {
      expect_refusal(message, p.cmake_option, "the user's input");
      EXPECT_NE(message.find(p.libraries), std::string::npos) << message;
    }
  }
  EXPECT_NE(util::optional_parts_text().find("TensorBoard"), std::string::npos);
}

// Each entry point of a part this build lacks. A full build runs every part's own tests instead
// (tests/io, tests/text, tests/data).
TEST(OptionalParts, WhatThisBuildLacksIsRefusedByNameAtEveryEntryPoint) {
  TempDir dir;
  int checked = 0;
  if (!util::built_with(util::OptionalPart::kImages)) {
    const uint8_t png_head[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    expect_refusal(thrown([&] { io::decode_image(png_head, sizeof png_head, "cat.png"); }), "ZEROSHARD_WITH_IMAGES",
                   "cat.png");
    // A dataset is refused when it is listed, naming its first row: never sample by sample.
    std::ofstream((dir.path / "cat.png").string()) << "not read";
    std::ofstream((dir.path / "metadata.csv").string()) << "image,prompt\ncat.png,a cat\n";
    expect_refusal(thrown([&] { data::load_media_dataset(dir.path.string()); }), "ZEROSHARD_WITH_IMAGES",
                   "metadata.csv:2");
    ++checked;
  }
  if (!util::built_with(util::OptionalPart::kVideo)) {
    const std::string clip = (dir.path / "clip.mp4").string();
    expect_refusal(thrown([&] { io::VideoReader r(clip); }), "ZEROSHARD_WITH_VIDEO", clip);
    expect_refusal(thrown([&] { io::write_video(clip, {io::RgbImage(2, 2)}); }), "ZEROSHARD_WITH_VIDEO", clip);
    ++checked;
  }
  if (!util::built_with(util::OptionalPart::kTokenizers)) {
    expect_refusal(thrown([] { text::BpeTokenizer::from_file("/models/qwen3/tokenizer.json"); }),
                   "ZEROSHARD_WITH_TOKENIZERS", "/models/qwen3/tokenizer.json");
    ++checked;
  }
  if (!util::built_with(util::OptionalPart::kSentencePiece)) {
    const std::string message = thrown([] { text::SentencePieceTokenizer::from_file("/models/umt5/spiece.model"); });
    EXPECT_NE(message.find("built without"), std::string::npos) << message;
    EXPECT_NE(message.find("/models/umt5/spiece.model"), std::string::npos) << message;
    ++checked;
  }
  if (!util::built_with(util::OptionalPart::kTensorBoard)) {
    const std::string events = (dir.path / "events").string();
    expect_refusal(thrown([&] { io::EventWriter w(events); }), "ZEROSHARD_WITH_TENSORBOARD", events);
    EXPECT_FALSE(fs::exists(events)) << "refused, yet the folder was made";
    ++checked;
  }
  int missing = 0;
  for (const util::OptionalPartInfo& p : util::optional_parts()) missing += p.built ? 0 : 1;
  EXPECT_EQ(checked, missing);
  if (missing == 0) GTEST_SKIP() << "a full build: every part is built, each checked by its own tests";
}
