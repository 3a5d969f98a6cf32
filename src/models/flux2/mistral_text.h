// FLUX.2 dev's text tower: Mistral Small 3.1's language model (inside the released
// Mistral3ForConditionalGeneration, whose vision tower and projector a text prompt never reaches),
// run by the qwen3 family's decoder with model_type mistral (no q/k norm, no biases; head_dim 128
// of a 5120-wide model; rope_theta 1e9), and its prompt as FLUX.2 dev encodes it (DiffSynth's
// Flux2ImagePipeline, diffusers' Flux2Pipeline._get_mistral_3_small_prompt_embeds):
//  - the conversation [system: FLUX.2's fixed system message, user: the prompt] through Mistral
//    Small 3.1's chat template without a generation prompt:
//        "<s>[SYSTEM_PROMPT]{system}[/SYSTEM_PROMPT][INST]{prompt}[/INST]"
//    tokenized with its special tokens as they stand (apply_chat_template adds none);
//  - truncated to text_len (512) from the right, then padded on the LEFT to exactly text_len with
//    the pad token (<pad> = 11; LlamaTokenizerFast's padding side), the attention mask 0 there;
//  - the decoder runs with that mask and positions 0 .. text_len - 1 in every row; the DiT takes
//    all text_len rows, pads included: hidden_states 10, 20, 30 (outputs of layers 9, 19, 29,
//    before the final norm) concatenated per token, 3 x 5120 = 15,360 features.
// The system message is DiffSynth's (flux2_image.py), where the line break diffusers'
// system_messages.py keeps after "relationships," is a space.
#pragma once

#include "models/qwen3/config.h"
#include "models/series.h"
#include "nn/name_map.h"
#include "text/bpe_tokenizer.h"
#include "zeroshard/param_source.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::models::flux2 {

extern const char* const kFlux2SystemMessage;

// The rendered chat text of `prompt` (above).
std::string mistral_chat_text(const std::string& prompt, const std::string& system = kFlux2SystemMessage);

// ids [1, text_len] int64 (left-padded) and the attention mask [1, text_len] int64.
std::pair<at::Tensor, at::Tensor> mistral_prompt_ids(text::BpeTokenizer& tok, const std::string& prompt,
                                                     int64_t text_len);

// Mistral Small 3.1's language model (Mistral-Small-3.1-24B-Instruct-2503 text_config; FLUX.2
// dev's text_encoder): 23,572,403,200 parameters with lm_head, 22,901,314,560 without (what the
// pipeline builds).
qwen3::QwenConfig mistral_small_3_1();

// The released text_encoder's names: ours "model.*" are "language_model.model.*" (transformers <
// 4.52, the FLUX.2-dev files) or "model.language_model.*" (later transformers); the vision tower,
// the projector and lm_head are left unread, each with its reason.
std::shared_ptr<ParamSource> mistral_text_source(const std::string& path);
// seed-weights: ours -> the FLUX.2-dev file names ("language_model.model.*").
nn::NameMap mistral_release_map();
// seed-weights: what the FLUX.2-dev text_encoder/ holds beside the language model, under those
// names: language_model.lm_head.weight [vocab, hidden] and, with `vision`, the Pixtral vision
// tower and the projector at Mistral Small 3.1's released shapes (438,958,080 parameters; the
// projector's output width is `hidden`). With the 22,901,314,560 of the language model the folder
// holds the release's 24,011,361,280.
std::vector<ReleasedFolder::NotRun> mistral_not_run(int64_t vocab, int64_t hidden, bool vision);

}  // namespace zeroshard::models::flux2
