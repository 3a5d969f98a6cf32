// BpeTokenizer: golden ids from the Hugging Face `tokenizers` library (Rust, npm `tokenizers`
// 0.23.2; regenerate with `node tests/text/make_goldens.mjs`) on the real Qwen3 tokenizer and on
// small synthetic tokenizer.json files (tests/text/data) that exercise GPT-2 style ByteLevel
// (add_prefix_space, built-in regex), a Llama-3 style Split + ignore_merges + pair-form merges +
// TemplateProcessing, byte fallback with fused unk, and added-token lstrip/rstrip/single_word/
// normalized flags. Plus round trips, invalid UTF-8, errors naming the field, an independent
// reference BPE for long words (both merge strategies) and per-thread copies.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "text/bpe_tokenizer.h"
#include "text/text_test_paths.h"
#include "text/utf8.h"

namespace zeroshard::text {
namespace {

using testing::qwen3_tokenizer_json;
using testing::text_data;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

BpeTokenizer& qwen3() {
  static BpeTokenizer tok = BpeTokenizer::from_file(qwen3_tokenizer_json());
  return tok;
}

struct SynthCase {
  const char* file;
  const char* text;
  std::vector<int32_t> ids, with_special;
  const char* decoded;
  const char* decoded_skip;
};

const std::vector<SynthCase>& synth_cases() {
  static const std::vector<SynthCase> cases = {
    {"bpe_gpt2_style.json", "abc", {32,258}, {268,32,258}, " abc", " abc"},
    {"bpe_gpt2_style.json", " abc abcc", {32,258,32,258,99}, {268,32,258,32,258,99}, " abc abcc", " abc abcc"},
    {"bpe_gpt2_style.json", "ab ab  ab\n\ncc", {32,256,32,256,32,32,256,10,10,261}, {268,32,256,32,256,32,32,256,10,10,261}, " ab ab  ab\n\ncc", " ab ab  ab\n\ncc"},
    {"bpe_gpt2_style.json", "x [L]  y", {32,120,269,32,121}, {268,32,120,269,32,121}, " x[L] y", " x y"},
    {"bpe_gpt2_style.json", "a[L]b", {259,269,32,98}, {268,259,269,32,98}, " a[L] b", " a b"},
    {"bpe_gpt2_style.json", "[W] a[W]b [W]", {270,259,91,87,93,98,32,270}, {268,270,259,91,87,93,98,32,270}, "[W] a[W]b [W]", "[W] a[W]b [W]"},
    {"bpe_gpt2_style.json", "h\xC3\xA9"" h\xC3\xA9""", {271,32,271}, {268,271,32,271}, "h\xEF\xBF\xBD"" h\xEF\xBF\xBD""", "h\xEF\xBF\xBD"" h\xEF\xBF\xBD"""},
    {"bpe_gpt2_style.json", "he\xCC\x81"" x", {271,32,120}, {268,271,32,120}, "h\xEF\xBF\xBD"" x", "h\xEF\xBF\xBD"" x"},
    {"bpe_gpt2_style.json", "a<mask>b", {259,272,32,98}, {268,259,272,32,98}, " a<mask> b", " a b"},
    {"bpe_gpt2_style.json", "a   <mask>", {259,272}, {268,259,272}, " a<mask>", " a"},
    {"bpe_gpt2_style.json", "12 123", {32,267,32,267,51}, {268,32,267,32,267,51}, " 12 123", " 12 123"},
    {"bpe_gpt2_style.json", "ccccc", {32,261,262}, {268,32,261,262}, " ccccc", " ccccc"},
    {"bpe_gpt2_style.json", "dddd", {32,264}, {268,32,264}, " dddd", " dddd"},
    {"bpe_gpt2_style.json", "it's 'S", {32,105,116,39,115,32,39,83}, {268,32,105,116,39,115,32,39,83}, " it's 'S", " it's 'S"},
    {"bpe_gpt2_style.json", "\xC3\xA9""", {32,195,169}, {268,32,195,169}, " \xC3\xA9""", " \xC3\xA9"""},
    {"bpe_gpt2_style.json", "\xF0\x9F\x98\x80"" ok", {32,240,159,152,128,32,111,107}, {268,32,240,159,152,128,32,111,107}, " \xF0\x9F\x98\x80"" ok", " \xF0\x9F\x98\x80"" ok"},
    {"bpe_gpt2_style.json", "", {}, {268}, "", ""},
    {"bpe_llama3_style.json", "abcd abc", {268,32,258}, {269,268,32,258}, "abcd abc", "abcd abc"},
    {"bpe_llama3_style.json", "abcd", {268}, {269,268}, "abcd", "abcd"},
    {"bpe_llama3_style.json", "1234567", {267,51,52,53,54,55}, {269,267,51,52,53,54,55}, "1234567", "1234567"},
    {"bpe_llama3_style.json", "it's IT'S", {105,116,39,115,32,73,84,39,83}, {269,105,116,39,115,32,73,84,39,83}, "it's IT'S", "it's IT'S"},
    {"bpe_llama3_style.json", "a\r\n\r\nb", {97,13,10,13,10,98}, {269,97,13,10,13,10,98}, "a\r\n\r\nb", "a\r\n\r\nb"},
    {"bpe_llama3_style.json", "<|begin_of_text|>x", {269,120}, {269,269,120}, "<|begin_of_text|>x", "x"},
    {"bpe_llama3_style.json", "  \t x", {265,9,32,120}, {269,265,9,32,120}, "  \t x", "  \t x"},
    {"bpe_llama3_style.json", "abcc ab", {258,99,260}, {269,258,99,260}, "abcc ab", "abcc ab"},
    {"bpe_llama3_style.json", "ccc", {262}, {269,262}, "ccc", "ccc"},
    {"bpe_byte_fallback.json", "ab", {3}, {3}, "ab", "ab"},
    {"bpe_byte_fallback.json", "ab\xC3\xA9""", {3,4,5}, {3,4,5}, "ab <0xC3> <0xA9>", "ab <0xC3> <0xA9>"},
    {"bpe_byte_fallback.json", "a\xC3\xA9""\xE2\x82\xAC""x", {1,4,5,0}, {1,4,5,0}, "a <0xC3> <0xA9> <unk>", "a <0xC3> <0xA9> <unk>"},
    {"bpe_byte_fallback.json", "\xE2\x82\xAC""\xE2\x82\xAC""a", {0,1}, {0,1}, "<unk> a", "<unk> a"},
    {"bpe_byte_fallback.json", "a b", {1,6,2}, {1,6,2}, "a   b", "a   b"},
    {"bpe_byte_fallback.json", "ba", {2,1}, {2,1}, "b a", "b a"},
    {"bpe_byte_fallback.json", "c\xC3\xA9""", {7,4,5}, {7,4,5}, "c <0xC3> <0xA9>", "c <0xC3> <0xA9>"},
  };
  return cases;
}

TEST(BpeTokenizer, SyntheticTokenizersMatchHuggingFace) {
  std::map<std::string, BpeTokenizer> toks;
  for (const SynthCase& c : synth_cases()) {
    if (!toks.count(c.file)) toks.emplace(c.file, BpeTokenizer::from_file(text_data(c.file)));
    BpeTokenizer& tok = toks.at(c.file);
    EXPECT_EQ(tok.encode(c.text), c.ids) << c.file << " \"" << c.text << "\"";
    EXPECT_EQ(tok.encode(c.text, true), c.with_special) << c.file << " \"" << c.text << "\"";
    EXPECT_EQ(tok.decode(c.ids), c.decoded) << c.file << " \"" << c.text << "\"";
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded_skip) << c.file << " \"" << c.text << "\"";
  }
}

TEST(BpeTokenizer, MergesStringAndPairFormsAgree) {
  nlohmann::json j = nlohmann::json::parse(slurp(text_data("bpe_gpt2_style.json")));
  ASSERT_TRUE(j["model"]["merges"][0].is_string());
  BpeTokenizer as_strings = BpeTokenizer::from_json(j.dump());
  for (auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    m = nlohmann::json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  BpeTokenizer as_pairs = BpeTokenizer::from_json(j.dump());
  for (const char* t : {"abcc abc ccccc dddd", "12 123 ab", "a b c d"}) EXPECT_EQ(as_strings.encode(t), as_pairs.encode(t));
}

struct QwenGolden {
  const char* text;
  std::vector<int32_t> ids;
};

TEST(BpeTokenizer, Qwen3MatchesHuggingFace) {
  const std::vector<QwenGolden> golden = {
    {"Hello world", {9707,1879}},
    {"I'm can't they'll WE'VE", {40,2776,646,944,807,3278,19677,6,4491}},
    {"  leading\tand\r\ntrailing  \n\n", {220,6388,52477,319,376,14277,18611}},
    {"\xE6\x95\xB0""\xE6\x8D\xAE""\xE5\xB9\xB6""\xE8\xA1\x8C""\xE8\xAE\xAD""\xE7\xBB\x83""\xE5\xBE\x88""\xE5\xBF\xAB""\xE3\x80\x82""", {20074,62926,22243,104034,102154,1773}},
    {"\xF0\x9F\x91\xA8""\xE2\x80\x8D""\xF0\x9F\x91\xA9""\xE2\x80\x8D""\xF0\x9F\x91\xA7""\xE2\x80\x8D""\xF0\x9F\x91\xA6"" \xF0\x9F\x91\x8D""\xF0\x9F\x8F\xBD"" \xF0\x9F\x87\xAF""\xF0\x9F\x87\xB5""", {145367,378,235,145233,378,235,145665,378,235,145988,61804,235,145375,11162,229,107,145516}},
    {"x = [1, 22, 333, 4444]", {87,284,508,16,11,220,17,17,11,220,18,18,18,11,220,19,19,19,19,60}},
    {"<|im_start|>user\nHi<|im_end|>", {151644,872,198,13048,151645}},
    {"e\xCC\x81""t\xC3\xA9""", {38783}},
    {"\xE2\x84\xAB""", {144044}},
    {"\xD9\x85""\xD8\xB1""\xD8\xAD""\xD8\xA8""\xD8\xA7"" \xD8\xA8""\xD8\xA7""\xD9\x84""\xD8\xB9""\xD8\xA7""\xD9\x84""\xD9\x85""", {124122,29825,124671,124476,129634}},
    {"a\xC2\x85""b\xC2\xA0""c\xE3\x80\x80""d", {64,126,227,65,4102,66,22441,67}},
    {"<think>\n\n</think>\n\n", {151667,271,151668,271}},
  };
  for (const QwenGolden& g : golden) EXPECT_EQ(qwen3().encode(g.text), g.ids) << "\"" << g.text << "\"";
}

TEST(BpeTokenizer, Qwen3VocabularyAndSpecialTokens) {
  BpeTokenizer& tok = qwen3();
  EXPECT_EQ(tok.vocab_size(), 151669);  // 151,643 BPE tokens + 26 added tokens (len(tokenizer) in transformers)
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 151643);
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 151645);
  EXPECT_EQ(tok.eos_id(), tok.token_to_id("<|im_end|>"));   // tokenizer_config.json eos_token
  EXPECT_EQ(tok.pad_id(), tok.token_to_id("<|endoftext|>"));  // pad_token
  EXPECT_FALSE(tok.bos_id().has_value());                     // bos_token: null
  EXPECT_TRUE(tok.is_special(151645));
  EXPECT_FALSE(tok.is_special(*tok.token_to_id("<think>")));  // an added token, not special
  EXPECT_EQ(tok.id_to_token(9707), "Hello");
  EXPECT_EQ(tok.added_tokens().size(), 26u);
  EXPECT_THROW(tok.id_to_token(151669), std::out_of_range);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{9707, 200000}), std::out_of_range);
  EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), std::out_of_range);
  const auto ids = tok.encode("<|im_start|>user\nHi<|im_end|><think>x</think>");
  EXPECT_EQ(tok.decode(ids, true), "user\nHi<think>x</think>");
}

TEST(BpeTokenizer, Qwen3RoundTrip) {
  BpeTokenizer& tok = qwen3();
  const std::vector<std::string> texts = {
      "", " ", "Hello, world!  \n\n\tTabs\r\nCRLF", "数据并行 👨‍👩‍👧‍👦 👍🏽 🇯🇵 مرحبا שלום", "it's I'M 'll",
      std::string(3000, 'a'), std::string(500, ' ') + "x", "<|im_start|>a<|im_end|>b<|endoftext|>", "\xC3\xA9t\xC3\xA9",
      std::string("nul\0byte", 8), "\xEF\xBB\xBF BOM and \xE2\x80\x8B zero width"};
  for (const std::string& t : texts) {
    EXPECT_EQ(tok.decode(tok.encode(t)), t) << "\"" << t << "\"";
    EXPECT_EQ(tok.normalized_text(t), t);
  }
  // Not in NFC: the tokenizer sees (and decode returns) the NFC form, as in Hugging Face.
  const std::string decomposed = "e\xCC\x81t\xC3\xA9 \xE2\x84\xAB";  // e + U+0301, U+212B ANGSTROM SIGN
  EXPECT_EQ(tok.normalized_text(decomposed), "\xC3\xA9t\xC3\xA9 \xC3\x85");
  EXPECT_EQ(tok.decode(tok.encode(decomposed)), tok.normalized_text(decomposed));
  EXPECT_EQ(tok.encode(decomposed), tok.encode(tok.normalized_text(decomposed)));
}

TEST(BpeTokenizer, InvalidUtf8IsReplacedOrRejected) {
  BpeTokenizer tok = qwen3();  // a copy: its own caches and settings
  const std::string bad = std::string("ok ") + "\xFF" + "\xE2\x82" + " \xED\xA0\x80" + " end";
  const std::string replaced = "ok \xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD end";
  std::string via_helper;
  EXPECT_EQ(utf8_append_replacing_invalid(bad, via_helper), 5u);
  EXPECT_EQ(via_helper, replaced);
  EXPECT_EQ(tok.encode(bad), tok.encode(replaced));
  EXPECT_EQ(tok.invalid_utf8_replacements(), 5u);
  EXPECT_EQ(tok.decode(tok.encode(bad)), replaced);
  // decode of a partial character: decode() replaces, decode_bytes() keeps the bytes.
  const auto euro = tok.encode("\xE2\x82\xAC");
  ASSERT_GE(euro.size(), 1u);
  std::string all;
  for (int32_t id : euro) all += tok.decode_bytes(&id, 1);
  EXPECT_EQ(all, "\xE2\x82\xAC");
  tok.set_invalid_utf8(InvalidUtf8::kThrow);
  try {
    tok.encode(bad);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 at byte 3"), std::string::npos) << e.what();
  }
}

// Independent reference: Qwen3 merges read here, plain "lowest rank first, leftmost" loop over
// byte-level characters; long single words go through both of the tokenizer's merge paths.
TEST(BpeTokenizer, LongWordsMatchReferenceMerges) {
  const auto j = nlohmann::json::parse(slurp(qwen3_tokenizer_json()));
  std::map<std::pair<std::string, std::string>, int> rank;
  int r = 0;
  for (const auto& m : j["model"]["merges"]) rank[{m[0].get<std::string>(), m[1].get<std::string>()}] = r++;
  std::mt19937 rng(5);
  for (const std::size_t len : {5u, 40u, 150u, 191u, 193u, 700u, 2500u}) {
    std::string word;
    for (std::size_t i = 0; i < len; ++i) word += static_cast<char>('a' + rng() % 26);
    std::vector<std::string> syms;
    for (const char c : word) syms.emplace_back(1, c);  // ASCII letters map to themselves
    for (;;) {
      int best = -1;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
        const auto it = rank.find({syms[i], syms[i + 1]});
        if (it != rank.end() && (best < 0 || it->second < best)) best = it->second, at = i;
      }
      if (best < 0) break;
      syms[at] += syms[at + 1];
      syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(at) + 1);
    }
    std::vector<int32_t> expected;
    for (const auto& s : syms) expected.push_back(*qwen3().token_to_id(s));
    EXPECT_EQ(qwen3().encode(word), expected) << "length " << len;
  }
}

TEST(BpeTokenizer, CopiesEncodeIndependentlyOnThreads) {
  const std::string text = "Thread safety: each copy has its own caches. 数据并行 👍🏽\n";
  const auto expected = qwen3().encode(text);
  std::vector<std::vector<int32_t>> got(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      BpeTokenizer mine = qwen3();
      for (int k = 0; k < 200; ++k) got[t] = mine.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

void expect_rejected(const std::function<void(nlohmann::json&)>& edit, const std::string& field, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(slurp(text_data("bpe_gpt2_style.json")));
  edit(j);
  try {
    BpeTokenizer::from_json(j.dump(), {}, "synthetic.json");
    ADD_FAILURE() << "expected a rejection naming " << field;
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("synthetic.json"), std::string::npos) << what;
    EXPECT_NE(what.find(field), std::string::npos) << what;
    EXPECT_NE(what.find(value), std::string::npos) << what;
  }
}

TEST(BpeTokenizer, UnsupportedOptionsNameTheField) {
  expect_rejected([](auto& j) { j["model"]["type"] = "WordPiece"; }, "model.type", "WordPiece");
  expect_rejected([](auto& j) { j["model"]["dropout"] = 0.1; }, "model.dropout", "0.1");
  expect_rejected([](auto& j) { j["model"]["merges"][0] = "a b c"; }, "model.merges[0]", "a b c");
  expect_rejected([](auto& j) { j["model"]["merges"][1] = "a zz"; }, "model.merges[1]", "zz");
  expect_rejected([](auto& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type", "Lowercase");
  expect_rejected([](auto& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "pre_tokenizer.type", "Metaspace");
  expect_rejected(
      [](auto& j) {
        j["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers",
                               {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}},
                                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
      },
      "pre_tokenizer.pretokenizers[0].behavior", "MergedWithPrevious");
  expect_rejected(
      [](auto& j) {
        j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "\\w+"}}}, {"behavior", "Isolated"}, {"invert", false}};
      },
      "pre_tokenizer.pattern.Regex", "\\w");
  expect_rejected([](auto& j) { j["decoder"] = {{"type", "Metaspace"}}; }, "decoder.type", "Metaspace");
  expect_rejected([](auto& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, "post_processor.type", "RobertaProcessing");
  expect_rejected([](auto& j) { j["truncation"] = {{"max_length", 8}}; }, "truncation", "max_length");
  expect_rejected([](auto& j) { j["model"]["some_new_option"] = true; }, "model.some_new_option", "true");
  expect_rejected([](auto& j) { j["added_tokens"][1]["id"] = 500; }, "added_tokens[1].id", "269");
  expect_rejected([](auto& j) { j["pre_tokenizer"]["add_prefix_space"] = "yes"; }, "pre_tokenizer.add_prefix_space", "yes");
}

TEST(BpeTokenizer, UncoverableCharacterThrowsInsteadOfDropping) {
  nlohmann::json j = nlohmann::json::parse(slurp(text_data("bpe_byte_fallback.json")));
  j["model"]["unk_token"] = nullptr;
  BpeTokenizer tok = BpeTokenizer::from_json(j.dump(), {}, "no_unk.json");
  EXPECT_EQ(tok.encode("ab"), (std::vector<int32_t>{3}));
  EXPECT_THROW(tok.encode("a\xE2\x82\xAC"), std::runtime_error);
}

}  // namespace
}  // namespace zeroshard::text
