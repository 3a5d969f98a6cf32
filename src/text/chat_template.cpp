#include "text/chat_template.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <utility>

namespace zeroshard::text {

namespace {

// Text pieces of a rendering; `assistant` marks the assistant-produced pieces.
struct Piece {
  std::string text;
  bool assistant = false;
};

void append(std::vector<Piece>& out, std::string text, bool assistant) {
  if (text.empty()) return;
  if (!out.empty() && out.back().assistant == assistant) {
    out.back().text += text;
  } else {
    out.push_back({std::move(text), assistant});
  }
}

std::string lstrip_newlines(const std::string& s) {
  const std::size_t b = s.find_first_not_of('\n');
  return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_newlines(const std::string& s) {
  const std::size_t e = s.find_last_not_of('\n');
  return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
std::string strip_newlines(const std::string& s) { return rstrip_newlines(lstrip_newlines(s)); }

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

std::string msg_where(const std::string& where, std::size_t i) { return where + ": messages[" + std::to_string(i) + "]"; }

std::vector<Piece> render_pieces(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 std::optional<bool> enable_thinking, const std::string& where) {
  if (messages.empty()) throw std::invalid_argument(where + ": messages is empty");
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r == "tool") {
      throw std::invalid_argument(msg_where(where, i) + ": role \"tool\" is not supported (tool calling is not implemented)");
    }
    if (r != "system" && r != "user" && r != "assistant") {
      throw std::invalid_argument(msg_where(where, i) + ": unknown role \"" + r + "\" (expected system, user or assistant)");
    }
  }
  std::vector<Piece> out;
  if (messages[0].role == "system") append(out, "<|im_start|>system\n" + messages[0].content + "<|im_end|>\n", false);
  // The template's last_query_index: the last user message that is not a tool response.
  std::size_t last_query = messages.size() - 1;
  for (std::size_t k = messages.size(); k-- > 0;) {
    const ChatMessage& m = messages[k];
    if (m.role == "user" && !(starts_with(m.content, "<tool_response>") && ends_with(m.content, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      append(out, "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n", false);
      continue;
    }
    if (m.role != "assistant") continue;  // the first system message, rendered above
    std::string content = m.content, reasoning;
    if (m.reasoning_content) {
      reasoning = *m.reasoning_content;
    } else {
      const std::size_t first_end = content.find("</think>");
      if (first_end != std::string::npos) {
        const std::size_t last_end = content.rfind("</think>");
        std::string before = rstrip_newlines(content.substr(0, first_end));
        const std::size_t open = before.rfind("<think>");
        if (open != std::string::npos) before = before.substr(open + 7);
        reasoning = lstrip_newlines(before);
        content = lstrip_newlines(m.content.substr(last_end + 8));
      }
    }
    append(out, "<|im_start|>assistant\n", false);
    const bool after_query = i > last_query;
    std::string body;
    if (after_query && (i + 1 == messages.size() || !reasoning.empty())) {
      body = "<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
    } else {
      body = content;
    }
    append(out, body + "<|im_end|>", true);
    append(out, "\n", false);
  }
  if (add_generation_prompt) {
    append(out, "<|im_start|>assistant\n", false);
    if (enable_thinking.has_value() && !*enable_thinking) append(out, "<think>\n\n</think>\n\n", false);
  }
  return out;
}

void check_chatml_tokens(const BpeTokenizer& tok, const std::string& where) {
  for (const char* t : {"<|im_start|>", "<|im_end|>"}) {
    if (!tok.token_to_id(t)) {
      throw std::invalid_argument(where + ": the tokenizer has no " + std::string(t) + " token (not a Qwen ChatML tokenizer)");
    }
  }
}

}  // namespace

std::vector<ChatMessage> chat_messages_from_json(const nlohmann::json& messages, const std::string& where) {
  if (!messages.is_array()) throw std::invalid_argument(where + ": \"messages\" must be an array");
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const nlohmann::json& m = messages[i];
    const std::string w = msg_where(where, i);
    if (!m.is_object()) throw std::invalid_argument(w + ": expected an object with role and content");
    if (!m.contains("role") || !m.at("role").is_string()) throw std::invalid_argument(w + ": missing string \"role\"");
    ChatMessage msg;
    msg.role = m.at("role").get<std::string>();
    if (m.contains("tool_calls") && !m.at("tool_calls").is_null()) {
      throw std::invalid_argument(w + ": \"tool_calls\" is not supported (tool calling is not implemented)");
    }
    if (!m.contains("content") || m.at("content").is_null()) {
      throw std::invalid_argument(w + ": missing \"content\"");
    }
    if (!m.at("content").is_string()) {
      throw std::invalid_argument(w + ": \"content\" must be a string (multimodal content parts are not supported)");
    }
    msg.content = m.at("content").get<std::string>();
    if (m.contains("reasoning_content") && !m.at("reasoning_content").is_null()) {
      if (!m.at("reasoning_content").is_string()) throw std::invalid_argument(w + ": \"reasoning_content\" must be a string");
      msg.reasoning_content = m.at("reasoning_content").get<std::string>();
    }
    for (auto it = m.begin(); it != m.end(); ++it) {
      const std::string& k = it.key();
      if (k != "role" && k != "content" && k != "reasoning_content" && k != "tool_calls" && k != "loss" && k != "name") {
        throw std::invalid_argument(w + ": unsupported key \"" + k + "\"");
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              std::optional<bool> enable_thinking, const std::string& where) {
  std::string text;
  for (const Piece& p : render_pieces(messages, add_generation_prompt, enable_thinking, where)) text += p.text;
  return text;
}

ChatEncoding encode_qwen3_chat(BpeTokenizer& tokenizer, const std::vector<ChatMessage>& messages, const std::string& where) {
  check_chatml_tokens(tokenizer, where);
  bool has_assistant = false;
  for (const ChatMessage& m : messages) has_assistant = has_assistant || m.role == "assistant";
  if (!has_assistant) {
    throw std::invalid_argument(where + ": the conversation has no assistant message (" + std::to_string(messages.size()) +
                                " messages), so nothing would be trained on");
  }
  ChatEncoding enc;
  for (const Piece& p : render_pieces(messages, false, std::nullopt, where)) {
    const std::size_t before = enc.ids.size();
    tokenizer.encode_append(p.text, enc.ids);
    enc.loss_mask.resize(enc.ids.size(), 0);
    if (p.assistant) std::fill(enc.loss_mask.begin() + static_cast<std::ptrdiff_t>(before), enc.loss_mask.end(), 1);
  }
  return enc;
}

std::vector<int32_t> encode_qwen3_generation_prompt(BpeTokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                                                    std::optional<bool> enable_thinking, const std::string& where) {
  check_chatml_tokens(tokenizer, where);
  std::vector<int32_t> ids;
  for (const Piece& p : render_pieces(messages, true, enable_thinking, where)) tokenizer.encode_append(p.text, ids);
  return ids;
}

}  // namespace zeroshard::text
