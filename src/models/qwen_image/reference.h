// The Qwen-Image family's reference-check kinds (src/reference/reference_check.h):
//   qwen_image_dit  diffusers QwenImageTransformer2DModel (the case's config.json names the commit)
#pragma once

#include <vector>

#include "reference/reference_check.h"

namespace zeroshard::models::qwen_image {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::qwen_image
