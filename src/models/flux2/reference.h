// The flux2 family's reference kinds (`zeroshard reference-check CASE_DIR`):
//   flux2_dit          Flux2DiT.forward(hidden_states, encoder_hidden_states, timestep, img_ids,
//                      txt_ids[, guidance])
//   flux2_vae_encode   Flux2Vae.encode(x): encoder.*, quant_conv.*, bn.running_*
//   flux2_vae_decode   Flux2Vae.decode(z): decoder.*, post_quant_conv.*, bn.running_*
//   mistral_text       Mistral's language model (FLUX.2 dev's text tower): the hidden states
//                      `_call.hidden_states_layers` concatenated per token
#pragma once

#include "reference/reference_check.h"

#include <vector>

namespace zeroshard::models::flux2 {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::flux2
