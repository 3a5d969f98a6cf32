#include "util/optional_parts.h"

#include <stdexcept>

// CMakeLists.txt defines each ZS_WITH_* as 0 or 1 for zs_base's files.
#if !defined(ZS_WITH_IMAGES) || !defined(ZS_WITH_VIDEO) || !defined(ZS_WITH_TOKENIZERS) || \
    !defined(ZS_WITH_SENTENCEPIECE) || !defined(ZS_WITH_TENSORBOARD)
#error "ZS_WITH_IMAGES, _VIDEO, _TOKENIZERS, _SENTENCEPIECE and _TENSORBOARD come from CMakeLists.txt"
#endif

namespace zeroshard::util {

const std::vector<OptionalPartInfo>& optional_parts() {
  static const std::vector<OptionalPartInfo> parts = {
      {OptionalPart::kImages, "image decoding (jpg, png, webp)", "libjpeg, libpng, libwebp", "ZEROSHARD_WITH_IMAGES",
       ZS_WITH_IMAGES != 0},
      {OptionalPart::kVideo, "video decoding and encoding", "FFmpeg: libavformat, libavcodec, libswscale, libavutil",
       "ZEROSHARD_WITH_VIDEO", ZS_WITH_VIDEO != 0},
      {OptionalPart::kTokenizers, "the tokenizer.json and SentencePiece tokenizers", "PCRE2, ICU",
       "ZEROSHARD_WITH_TOKENIZERS", ZS_WITH_TOKENIZERS != 0},
      {OptionalPart::kSentencePiece, "SentencePiece models (spiece.model: T5, umT5)", "libsentencepiece",
       "ZEROSHARD_WITH_SENTENCEPIECE", ZS_WITH_SENTENCEPIECE != 0},
      {OptionalPart::kTensorBoard, "TensorBoard event files (run.tensorboard)", "protobuf",
       "ZEROSHARD_WITH_TENSORBOARD", ZS_WITH_TENSORBOARD != 0},
  };
  return parts;
}

bool built_with(OptionalPart part) { return optional_parts().at(static_cast<size_t>(part)).built; }

void require_part(OptionalPart part, const std::string& needed_by) {
  const OptionalPartInfo& p = optional_parts().at(static_cast<size_t>(part));
  if (p.built) return;
  throw std::runtime_error(needed_by + " needs " + p.what + ", which this zeroshard was built without (" + p.libraries +
                           "; configure with -D" + p.cmake_option + "=ON)");
}

std::string optional_parts_text() {
  std::string out;
  for (const OptionalPartInfo& p : optional_parts()) {
    out += std::string(p.what) + ": " + (p.built ? "yes (" : "no (") + p.libraries;
    if (!p.built) out += std::string("; -D") + p.cmake_option + "=ON";
    out += ")\n";
  }
  return out;
}

}  // namespace zeroshard::util
