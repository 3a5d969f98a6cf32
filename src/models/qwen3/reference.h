// Reference kinds of the Qwen family (../shared/fixtures/README.md has the case format):
//   qwen3_lm      Qwen3ForCausalLM: input_ids, labels -> logits, loss (the model's mean CE)
//   qwen3_moe_lm  Qwen3MoeForCausalLM: + ce_loss, aux_loss, router_logits.<i>; loss = ce + coef * aux
//   qwen25_text   Qwen2Model / Qwen2.5-VL language model: input_ids, attention_mask, position_ids
//                 -> last hidden state after the final norm ("output", loss = sum(output * probe))
// Every size, head count and length is read from the case's config.json and inputs.
#pragma once

#include "reference/reference_check.h"

#include <vector>

namespace zeroshard::models::qwen3 {

std::vector<reference::ReferenceKind> reference_kinds();

}  // namespace zeroshard::models::qwen3
