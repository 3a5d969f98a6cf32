#include "models/z_image/prompt.h"

#include "text/chat_template.h"

#include <stdexcept>

namespace zeroshard::models::z_image {

at::Tensor prompt_ids(text::BpeTokenizer& tok, const std::string& prompt, int64_t text_len) {
  const std::string rendered = text::render_qwen3_chat({{"user", prompt, std::nullopt}}, /*add_generation_prompt=*/true,
                                                       /*enable_thinking=*/true);
  std::vector<int32_t> ids = tok.encode(rendered);
  if (static_cast<int64_t>(ids.size()) > text_len) ids.resize(static_cast<size_t>(text_len));  // truncation=True
  at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) t[0][static_cast<int64_t>(i)] = static_cast<int64_t>(ids[i]);
  return t;
}

text::BpeTokenizer load_tokenizer(const ZImageSeriesConfig& c) {
  if (c.io.tokenizer.empty()) throw std::invalid_argument("z_image.tokenizer: the Qwen3 tokenizer.json is required");
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(c.io.tokenizer);
  if (tok.vocab_size() > c.text.vocab_size) {
    throw std::invalid_argument("z_image.text_vocab " + std::to_string(c.text.vocab_size) + " is below the tokenizer's " +
                                std::to_string(tok.vocab_size()) + " ids (" + c.io.tokenizer + ")");
  }
  return tok;
}

}  // namespace zeroshard::models::z_image
