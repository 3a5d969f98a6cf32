// The parts of zeroshard that need a library beyond libtorch, Gloo and the header-only ones, each
// behind a CMake option (CMakeLists.txt, ZEROSHARD_WITH_*; ZEROSHARD_CORE=ON leaves them all out).
// A build without a part refuses what needs it by name, before any work starts where it can
// (a dataset's first image, a config key), and otherwise at the call: never a silently skipped
// sample. `zeroshard --version` lists what a binary has.
#pragma once

#include <string>
#include <vector>

namespace zeroshard::util {

enum class OptionalPart { kImages, kVideo, kTokenizers, kSentencePiece, kTensorBoard };

struct OptionalPartInfo {
  OptionalPart part;
  const char* what;          // "image decoding (jpg, png, webp)"
  const char* libraries;     // "libjpeg, libpng, libwebp"
  const char* cmake_option;  // "ZEROSHARD_WITH_IMAGES"
  bool built;
};

// Every optional part, in the enum's order.
const std::vector<OptionalPartInfo>& optional_parts();
bool built_with(OptionalPart part);

// Throws std::runtime_error when `part` was left out of this build: "<needed_by> needs <what>,
// which this zeroshard was built without (<libraries>; configure with -D<option>=ON)".
void require_part(OptionalPart part, const std::string& needed_by);

// One line per part, "images: yes (libjpeg, libpng, libwebp)" / "video: no (... -D...=ON)".
std::string optional_parts_text();

}  // namespace zeroshard::util
