// Qwen ChatML chat template for `messages` conversations (the ms-swift / Hugging Face jsonl SFT
// format: [{"role": "system"|"user"|"assistant", "content": "...", "reasoning_content"?: "..."}]),
// reproducing the Qwen3 tokenizer_config.json `chat_template` for conversations without tools:
//
//   - a first system message: "<|im_start|>system\n{content}<|im_end|>\n"; a later system
//     message and every user message: "<|im_start|>{role}\n{content}<|im_end|>\n";
//   - an assistant message: its reasoning is `reasoning_content` when the key is present (even
//     empty), else, when the content contains "</think>", the text between the last "<think>"
//     before the first "</think>" and that "</think>" (newlines stripped), and the content
//     becomes what follows the last "</think>" (leading newlines stripped). Assistant messages
//     after the last user message are rendered "<|im_start|>assistant\n<think>\n{reasoning}\n
//     </think>\n\n{content}" when they are the last message or have a non-empty reasoning;
//     every other assistant message is "<|im_start|>assistant\n{content}" (earlier turns'
//     reasoning is dropped, as Qwen3's template does). Each ends with "<|im_end|>\n";
//   - generation prompt: "<|im_start|>assistant\n", plus "<think>\n\n</think>\n\n" when
//     enable_thinking is false.
// The rendered text is byte-identical to the jinja template's (checked against
// @huggingface/jinja by tests/text/tokenizer_parity.mjs).
//
// Not supported (std::invalid_argument naming the message index): the "tool" role and
// assistant `tool_calls` (the template's tool-calling branches), non-string content (multimodal
// parts), unknown roles. A conversation for training must contain an assistant message.
//
// Ids and loss mask (encode_qwen3_chat): the rendered text is tokenized in pieces cut at each
// assistant turn's boundaries: "...<|im_start|>assistant\n" (mask 0) | the assistant's rendered
// body and its "<|im_end|>" (mask 1) | "\n<|im_start|>..." (mask 0). loss_mask[i] == 1 means
// ids[i] is a training target (the trainer predicts ids[i] from ids[<i]). The cuts before and
// after <|im_end|> are token boundaries of the whole-text tokenization anyway (it is a special
// token); the cut after "assistant\n" is one too unless the assistant body starts with white
// space containing a line break ("\n...", " \n..."), which the pre-tokenizer would have fused
// with the "\n" before it. In that case the ids differ from tokenizing the whole rendered text
// (as ms-swift's piecewise encoding also does), so the prompt part keeps exactly the ids the
// model sees at sampling time. Every other conversation gives exactly the ids of
// tokenizer.encode(rendered text).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "text/bpe_tokenizer.h"

namespace zeroshard::text {

struct ChatMessage {
  std::string role;
  std::string content;
  std::optional<std::string> reasoning_content;
};

struct ChatEncoding {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // 1 on assistant-produced tokens (body and its <|im_end|>)
};

// Reads a `messages` array. `where` names the source in errors (e.g. "data.jsonl:12").
std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages, const std::string& where);

// The template's text. `enable_thinking` unset means "not defined" for the template.
std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              std::optional<bool> enable_thinking = std::nullopt,
                              const std::string& where = "conversation");

// Training form: ids and loss mask of the whole conversation (needs an assistant message).
ChatEncoding encode_qwen3_chat(BpeTokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                               const std::string& where = "conversation");

// Sampling form: ids of the conversation followed by the generation prompt (the model then
// writes the assistant's answer; stop at <|im_end|>, i.e. tokenizer_config's eos_token).
std::vector<int32_t> encode_qwen3_generation_prompt(BpeTokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                    std::optional<bool> enable_thinking = std::nullopt,
                                                    const std::string& where = "conversation");

}  // namespace zeroshard::text
