// The Z-Image family's reference-check kinds (src/reference/reference_check.h):
//   z_image_dit  Tongyi-MAI/Z-Image ZImageTransformer2DModel (the case's config.json names the commit)
#pragma once

#include <vector>

#include "reference/reference_check.h"

namespace zeroshard::models::z_image {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::z_image
