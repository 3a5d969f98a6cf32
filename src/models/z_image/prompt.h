// The z_image series' prompts: Qwen3's chat template and tokenizer. The cache `zeroshard prepare`
// writes (diffusion/image_series.h) holds per record "latent" [16, h, w] and "context"
// [n, text_hidden] (the prompt's kept rows: Z-Image keeps only the attention mask's rows, so the
// cached states carry the mask as their length).
#pragma once

#include "models/z_image/series.h"
#include "text/bpe_tokenizer.h"

#include <string>

namespace zeroshard::models::z_image {

// The prompt as ZImagePipeline encodes it: Qwen3's chat template (one user turn, generation
// prompt, enable_thinking=True: "<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"),
// tokenized and cut at text_len tokens. [1, n] int64.
at::Tensor prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len);
// The tokenizer of z_image.tokenizer, checked against z_image.text_vocab.
text::BpeTokenizer load_tokenizer(const ZImageSeriesConfig& c);

}  // namespace zeroshard::models::z_image
