// Qwen3 chat template: renderings and ids golden from the real template (tokenizer_config.json
// rendered by @huggingface/jinja 0.5.11, tokenized by Hugging Face tokenizers 0.23.2; regenerate
// with `node tests/text/make_goldens.mjs`), the loss mask's placement, and the errors.
// tests/text/tokenizer_parity.mjs compares 120 more conversations the same way.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/text_test_paths.h"

namespace zeroshard::text {
namespace {

BpeTokenizer& qwen3() {
  static BpeTokenizer tok = BpeTokenizer::from_file(testing::qwen3_tokenizer_json());
  return tok;
}

std::vector<ChatMessage> parse(const char* json) { return chat_messages_from_json(nlohmann::json::parse(json), "test"); }

struct Golden {
  const char* messages;
  bool add_generation_prompt;
  std::optional<bool> enable_thinking;
  const char* text;
  std::vector<int32_t> ids;
};

const std::vector<Golden>& goldens() {
  static const std::vector<Golden> g = {
      {R"([{"role":"system","content":"You are helpful."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"}])",
       false, std::nullopt,
       "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n"
       "</think>\n\nHello!<|im_end|>\n",
       {151644, 8948, 198, 2610, 525, 10950, 13, 151645, 198, 151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198,
        151667, 271, 151668, 271, 9707, 0, 151645, 198}},
      {R"([{"role":"user","content":"a"},{"role":"assistant","content":"<think>r</think>b"},{"role":"user","content":"c"},{"role":"assistant","content":"<think>\nx\n</think>\n\nd"}])",
       false, std::nullopt,
       "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>"
       "assistant\n<think>\nx\n</think>\n\nd<|im_end|>\n",
       {151644, 872, 198, 64, 151645, 198, 151644, 77091, 198, 65, 151645, 198, 151644, 872, 198, 66, 151645, 198, 151644,
        77091, 198, 151667, 198, 87, 198, 151668, 271, 67, 151645, 198}},
      {R"([{"role":"user","content":"Q"}])", true, false,
       "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
       {151644, 872, 198, 48, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271}},
  };
  return g;
}

TEST(ChatTemplate, MatchesQwen3TemplateAndTokenizer) {
  for (const Golden& g : goldens()) {
    const auto msgs = parse(g.messages);
    EXPECT_EQ(render_qwen3_chat(msgs, g.add_generation_prompt, g.enable_thinking), g.text);
    if (g.add_generation_prompt) {
      EXPECT_EQ(encode_qwen3_generation_prompt(qwen3(), msgs, g.enable_thinking), g.ids);
    } else {
      const ChatEncoding enc = encode_qwen3_chat(qwen3(), msgs);
      EXPECT_EQ(enc.ids, g.ids);
      EXPECT_EQ(enc.ids, qwen3().encode(g.text));
    }
  }
}

// The mask is 1 exactly on each assistant body and its <|im_end|>: decoding the masked tokens
// gives the bodies back, and every masked run starts right after "<|im_start|>assistant\n".
TEST(ChatTemplate, LossMaskCoversAssistantTokensOnly) {
  const auto msgs = parse(R"([{"role":"system","content":"S"},{"role":"user","content":"u1"},
      {"role":"assistant","content":"first answer"},{"role":"user","content":"u2"},
      {"role":"assistant","content":"second","reasoning_content":"think hard"}])");
  const ChatEncoding enc = encode_qwen3_chat(qwen3(), msgs);
  ASSERT_EQ(enc.ids.size(), enc.loss_mask.size());
  std::vector<std::string> runs;
  std::vector<int32_t> run;
  const int32_t assistant_id = *qwen3().token_to_id("assistant");
  for (std::size_t i = 0; i <= enc.ids.size(); ++i) {
    if (i < enc.ids.size() && enc.loss_mask[i]) {
      if (run.empty()) {
        ASSERT_GE(i, 3u);
        EXPECT_EQ(enc.ids[i - 3], *qwen3().token_to_id("<|im_start|>"));
        EXPECT_EQ(enc.ids[i - 2], assistant_id);
        EXPECT_EQ(qwen3().decode(&enc.ids[i - 1], 1), "\n");
      }
      run.push_back(enc.ids[i]);
    } else if (!run.empty()) {
      runs.push_back(qwen3().decode(run));
      run.clear();
    }
  }
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0], "first answer<|im_end|>");
  EXPECT_EQ(runs[1], "<think>\nthink hard\n</think>\n\nsecond<|im_end|>");
  EXPECT_EQ(enc.ids, qwen3().encode(render_qwen3_chat(msgs, false)));
  // The part before the last answer is exactly the sampling prompt for that turn.
  std::vector<ChatMessage> prompt(msgs.begin(), msgs.end() - 1);
  const auto gen = encode_qwen3_generation_prompt(qwen3(), prompt);
  ASSERT_LT(gen.size(), enc.ids.size());
  EXPECT_EQ(std::vector<int32_t>(enc.ids.begin(), enc.ids.begin() + static_cast<std::ptrdiff_t>(gen.size())), gen);
  EXPECT_EQ(enc.loss_mask[gen.size()], 1);
  EXPECT_EQ(enc.loss_mask[gen.size() - 1], 0);
}

// An answer starting with a line break: whole-text tokenization would fuse it with the "\n"
// after "assistant"; we cut at the turn boundary (documented in chat_template.h).
TEST(ChatTemplate, LeadingNewlineAnswerKeepsPromptIds) {
  const auto msgs = parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"<think>t</think>a"},
      {"role":"user","content":"q2"},{"role":"assistant","content":"\n\nindented answer"}])");
  // msgs: the answer after the last query gets a think block in front, so no difference there.
  // msgs2: the earlier answer is rendered as written, starting with "\n\n".
  const auto msgs2 = parse(R"([{"role":"user","content":"q"},{"role":"assistant","content":"\n\nanswer"},
      {"role":"user","content":"q2"},{"role":"assistant","content":"ok"}])");
  const ChatEncoding enc = encode_qwen3_chat(qwen3(), msgs2);
  const auto whole = qwen3().encode(render_qwen3_chat(msgs2, false));
  EXPECT_NE(enc.ids, whole);
  EXPECT_EQ(qwen3().decode(enc.ids), qwen3().decode(whole));
  const auto gen = encode_qwen3_generation_prompt(qwen3(), {msgs2[0]});
  EXPECT_EQ(std::vector<int32_t>(enc.ids.begin(), enc.ids.begin() + static_cast<std::ptrdiff_t>(gen.size())), gen);
  EXPECT_EQ(encode_qwen3_chat(qwen3(), msgs).ids, qwen3().encode(render_qwen3_chat(msgs, false)));
}

void expect_error(const char* json, const std::string& needle, bool via_encode = true) {
  try {
    const auto msgs = parse(json);
    if (via_encode) encode_qwen3_chat(qwen3(), msgs, "data.jsonl:7");
    ADD_FAILURE() << "expected an error containing " << needle;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, ErrorsNameTheMessage) {
  expect_error(R"([{"role":"system","content":"s"},{"role":"user","content":"u"}])", "data.jsonl:7: the conversation has no assistant message");
  expect_error(R"([{"role":"user","content":"u"},{"role":"robot","content":"x"},{"role":"assistant","content":"a"}])",
               "data.jsonl:7: messages[1]: unknown role \"robot\"");
  expect_error(R"([{"role":"user","content":"u"},{"role":"assistant","content":"a"},{"role":"tool","content":"r"}])",
               "messages[2]: role \"tool\" is not supported");
  expect_error(R"([{"role":"user","content":"u"},{"role":"assistant","content":"","tool_calls":[{"name":"f"}]}])",
               "test: messages[1]: \"tool_calls\" is not supported", false);
  expect_error(R"([{"role":"user","content":[{"type":"text","text":"u"}]}])", "messages[0]: \"content\" must be a string", false);
  expect_error(R"([{"role":"user"}])", "messages[0]: missing \"content\"", false);
  expect_error(R"({"role":"user"})", "\"messages\" must be an array", false);
}

}  // namespace
}  // namespace zeroshard::text
