// The T5 family's reference kinds: `wan21_umt5_encoder` (Wan's T5Encoder names, a table per
// layer) and `t5_encoder` (transformers' T5EncoderModel names, one shared table).
#pragma once

#include "reference/reference_check.h"

#include <vector>

namespace zeroshard::models::t5 {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::t5
