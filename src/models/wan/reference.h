// The Wan 2.1 family's reference kinds: `wan21_dit_t2v` (WanModel.forward, original names),
// `wan21_vae_encode` / `wan21_vae_decode` (WanVAE_.encode / decode with upstream's chunking).
#pragma once

#include "reference/reference_check.h"

#include <vector>

namespace zeroshard::models::wan {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::wan
