// The flux family's reference kinds (`zeroshard reference-check CASE_DIR`):
//   flux1_dit          Flux1DiT.forward(img, img_ids, txt, txt_ids, timesteps, y[, guidance])
//   flux1_vae_encode   Flux1AutoEncoder.encode(x), the encoder half only
//   flux1_vae_decode   Flux1AutoEncoder.decode(z), the decoder half only
//   clip_text_encoder  CLIPTextModel(input_ids[, attention_mask]) (FLUX.1 text_encoder): "output" =
//                      last_hidden_state, "pooled" = pooler_output (probe "probe_pooled")
#pragma once

#include "reference/reference_check.h"

#include <string>
#include <vector>

namespace zeroshard::models::flux {

std::vector<reference::ReferenceKind> reference_kinds();

// The input passed as the upstream argument `arg`: config.json `_call.args` maps argument names to
// input names ({"name", "value"} objects or [name, "inputs:<input>"] pairs; a null value passes
// nothing: an undefined tensor). Without a `_call` entry for `arg`, the input named `arg`.
at::Tensor call_input(const reference::ReferenceCase& c, const std::string& arg);

}  // namespace zeroshard::models::flux
