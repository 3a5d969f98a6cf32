// BpeTokenizer: golden ids from the Hugging Face `tokenizers` library (Rust, npm `tokenizers`
// 0.23.2; regenerate with `node tests/text/make_goldens.mjs`) on the real Qwen3 tokenizer and on
// small synthetic tokenizer.json files (tests/text/data) that exercise GPT-2 style ByteLevel
// (add_prefix_space, built-in regex), a Llama-3 style Split + ignore_merges + pair-form merges +
// TemplateProcessing, byte fallback with fused unk, and added-token lstrip/rstrip/single_word/
// normalized flags. Plus round trips, invalid UTF-8, errors naming the field, an independent
// reference BPE for long words (both merge strategies) and per-thread copies. CLIP: a tiny
// CLIP-format folder (vocab.json + merges.txt + tokenizer_config.json, tests/text/data/clip_tiny)
// read as transformers' CLIPConverter reads it; normalizer / pre-tokenizer / post-processor
// variants (Replace, Lowercase, Split invert, RobertaProcessing) of the GPT-2-style file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
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
  expect_rejected([](auto& j) { j["normalizer"] = {{"type", "BertNormalizer"}}; }, "normalizer.type", "BertNormalizer");
  expect_rejected([](auto& j) { j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "x*"}}}, {"content", "-"}}; },
                  "normalizer.pattern.Regex", "empty string");
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
  expect_rejected([](auto& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "post_processor.type", "BertProcessing");
  expect_rejected([](auto& j) { j["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 99999}}, {"cls", {"<s>", 0}}}; },
                  "post_processor.sep", "99999");
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

// ---- CLIP (tests/text/data/clip_tiny: a 49-token CLIP-format vocab.json + merges.txt +
// tokenizer_config.json as FLUX.1 ships them, added tokens <|startoftext|> (normalized) and
// <|endoftext|> (not normalized); goldens from Hugging Face tokenizers (Rust) on the tokenizer.json
// transformers' CLIPConverter builds, decode as CLIPTokenizerFast: make_goldens.mjs).

struct ClipCase {
  const char* text;
  std::vector<int32_t> ids, with_special;
  const char* decoded;  // decode(with_special)
};

const std::vector<ClipCase>& clip_cases() {
  static const std::vector<ClipCase> cases = {
    // lower-casing, "</w>" merges, unknown "f" -> unk (<|endoftext|>, not fused)
    {"A Photo of THE cat", {17,41,4,48,35,37}, {47,17,41,4,48,35,37,48}, "<|startoftext|>a photo o<|endoftext|>the cat <|endoftext|>"},
    // whitespace collapsed and removed by the inverted split
    {"  the\t\n CAT  ", {35,37}, {47,35,37,48}, "<|startoftext|>the cat <|endoftext|>"},
    {"cat's CAT'S", {37,42,37,42}, {47,37,42,37,42,48}, "<|startoftext|>cat's cat's <|endoftext|>"},
    {"the,cat!!", {35,26,37,10,27}, {47,35,26,37,10,27,48}, "<|startoftext|>the, cat!! <|endoftext|>"},
    // per-character lower-casing: no final sigma (σ, not ς, at the end of "σσ")
    {"\xCE\xA3\xCE\xA3 \xCF\x83\xCF\x82", {43,44,43,45}, {47,43,44,43,45,48}, "<|startoftext|>\xCF\x83\xCF\x83 \xCF\x83\xCF\x82 <|endoftext|>"},
    {"\xC4\xB0", {28,15,33}, {47,28,15,33,48}, "<|startoftext|>i \xCC\x87 <|endoftext|>"},  // İ -> i + U+0307
    {"zzz", {48,48,48}, {47,48,48,48,48}, "<|startoftext|><|endoftext|><|endoftext|><|endoftext|><|endoftext|>"},
    {"cat z", {37,48}, {47,37,48,48}, "<|startoftext|>cat <|endoftext|><|endoftext|>"},
    // <|startoftext|> matches after lower-casing, <|endoftext|> only verbatim
    {"<|STARTOFTEXT|>the<|endoftext|>", {47,35,48}, {47,47,35,48,48}, "<|startoftext|><|startoftext|>the <|endoftext|><|endoftext|>"},
    {"<|ENDOFTEXT|>", {48,48,2,48,48,4,48,7,2,48,24,48,48}, {47,48,48,2,48,48,4,48,7,2,48,24,48,48,48},
     "<|startoftext|><|endoftext|><|endoftext|>e<|endoftext|><|endoftext|>o<|endoftext|>te<|endoftext|>t <|endoftext|><|endoftext|><|endoftext|>"},
    {"", {}, {47,48}, "<|startoftext|><|endoftext|>"},
    {"photo, the cat's.", {41,26,35,37,42,48}, {47,41,26,35,37,42,48,48}, "<|startoftext|>photo, the cat's <|endoftext|><|endoftext|>"},
  };
  return cases;
}

void expect_clip_cases(BpeTokenizer& tok, const std::string& how) {
  for (const ClipCase& c : clip_cases()) {
    EXPECT_EQ(tok.encode(c.text), c.ids) << how << " \"" << c.text << "\"";
    EXPECT_EQ(tok.encode(c.text, true), c.with_special) << how << " \"" << c.text << "\"";
    EXPECT_EQ(tok.decode(c.with_special), c.decoded) << how << " \"" << c.text << "\"";
  }
}

TEST(BpeTokenizer, ClipReleasedFilesMatchHuggingFace) {
  BpeTokenizer from_folder = BpeTokenizer::from_file(text_data("clip_tiny"));  // no tokenizer.json there
  expect_clip_cases(from_folder, "from_file(folder)");
  BpeTokenizer direct = BpeTokenizer::from_vocab_merges(text_data("clip_tiny/vocab.json"), text_data("clip_tiny/merges.txt"));
  expect_clip_cases(direct, "from_vocab_merges");
  EXPECT_EQ(direct.vocab_size(), 49);
  EXPECT_EQ(direct.bos_id(), 47);
  EXPECT_EQ(direct.eos_id(), 48);
  EXPECT_EQ(direct.pad_id(), 48);
  EXPECT_TRUE(direct.is_special(47));
  EXPECT_EQ(direct.id_to_token(37), "cat</w>");
  ASSERT_EQ(direct.added_tokens().size(), 2u);
  // The decoder itself (decode_bytes) turns "</w>" into spaces; decode() also strips the ends and
  // cleans up " ," / " 's" / " ." as transformers does with clean_up_tokenization_spaces.
  const std::vector<int32_t> ids = {41, 26, 35, 37, 42};  // photo</w> ,</w> the</w> cat</w> 's</w>
  EXPECT_EQ(direct.decode_bytes(ids.data(), ids.size()), "photo , the cat 's ");
  EXPECT_EQ(direct.decode(ids), "photo, the cat's");
  EXPECT_EQ(direct.decode({47, 35, 48}, true), "the");
}

TEST(BpeTokenizer, ClipTokenizerJsonIsWhatCLIPConverterBuilds) {
  const std::string text = BpeTokenizer::clip_tokenizer_json(slurp(text_data("clip_tiny/vocab.json")),
                                                             slurp(text_data("clip_tiny/merges.txt")),
                                                             slurp(text_data("clip_tiny/tokenizer_config.json")));
  const auto j = nlohmann::json::parse(text);
  const auto expected = nlohmann::json::parse(R"({
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"},
      {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "}, {"type": "Lowercase"}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"},
       "behavior": "Removed", "invert": true},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
    "post_processor": {"type": "RobertaProcessing", "sep": ["<|endoftext|>", 48], "cls": ["<|startoftext|>", 47],
      "trim_offsets": false, "add_prefix_space": false},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "added_tokens": [
      {"id": 47, "content": "<|startoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": true},
      {"id": 48, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}]
  })");
  for (const auto& [key, value] : expected.items()) EXPECT_EQ(j.at(key), value) << key;
  EXPECT_EQ(j["model"]["end_of_word_suffix"], "</w>");
  EXPECT_EQ(j["model"]["continuing_subword_prefix"], "");
  EXPECT_EQ(j["model"]["unk_token"], "<|endoftext|>");
  EXPECT_EQ(j["model"]["fuse_unk"], false);
  EXPECT_EQ(j["model"]["vocab"].size(), 49u);
  // 14 lines, one repeating the merged token of another ("c at</w>" = "ca t</w>"): all kept, in order.
  ASSERT_EQ(j["model"]["merges"].size(), 14u);
  EXPECT_EQ(j["model"]["merges"][0], nlohmann::json::array({"t", "h"}));
  EXPECT_EQ(j["model"]["merges"][13], nlohmann::json::array({"c", "at</w>"}));
  // Read back as a tokenizer.json (with tokenizer_config.json): the same tokenizer.
  BpeTokenizer via_json = BpeTokenizer::from_json(text, slurp(text_data("clip_tiny/tokenizer_config.json")), "clip.json");
  expect_clip_cases(via_json, "from_json(clip_tokenizer_json)");
  // Without tokenizer_config.json: CLIPTokenizer's defaults, both added tokens normalized.
  const auto bare = nlohmann::json::parse(BpeTokenizer::clip_tokenizer_json(slurp(text_data("clip_tiny/vocab.json")),
                                                                            slurp(text_data("clip_tiny/merges.txt"))));
  ASSERT_EQ(bare["added_tokens"].size(), 2u);
  EXPECT_EQ(bare["added_tokens"][1]["content"], "<|endoftext|>");
  EXPECT_EQ(bare["added_tokens"][1]["normalized"], true);
}

// A fresh folder under the system's temporary directory, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "zs_bpe_test_XXXXXX").string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
  }
  std::string str() const { return path.string(); }
};

TEST(BpeTokenizer, ClipMergesAreReadAsCLIPTokenizerReadsThem) {
  const std::string vocab = slurp(text_data("clip_tiny/vocab.json"));
  const std::string merges = slurp(text_data("clip_tiny/merges.txt"));
  const std::vector<int32_t> the_cat = {35, 37};
  {
    // CRLF line ends, blank lines around the text (Python's strip), no tokenizer_config.json.
    TempDir d;
    std::string crlf = "\n\n";
    for (const char c : merges) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
    d.write("vocab.json", vocab);
    d.write("merges.txt", crlf + "\r\n\r\n");
    BpeTokenizer tok = BpeTokenizer::from_file(d.str());
    EXPECT_EQ(tok.encode("The cat", true), (std::vector<int32_t>{47, 35, 37, 48}));
  }
  {
    // Only the first 49152 - 256 - 2 merges after the header count: "th e</w>" past them is dropped.
    TempDir d;
    std::string many = "#version: 0.2\n";
    for (int i = 0; i < 49152 - 256 - 2; ++i) many += "t h\n";
    d.write("vocab.json", vocab);
    d.write("merges.txt", many + "th e</w>\n");
    BpeTokenizer tok = BpeTokenizer::from_file(d.str());
    EXPECT_EQ(tok.encode("the"), (std::vector<int32_t>{34, 19}));  // "th", "e</w>"
    d.write("merges.txt", many.substr(0, many.size() - 4) + "th e</w>\n");
    EXPECT_EQ(BpeTokenizer::from_file(d.str()).encode("the"), (std::vector<int32_t>{35}));  // "the</w>"
  }
}

void expect_folder_rejected(const std::map<std::string, std::string>& files, const std::vector<std::string>& needles) {
  TempDir d;
  for (const auto& [name, content] : files) d.write(name, content);
  try {
    BpeTokenizer::from_file(d.str());
    ADD_FAILURE() << "expected a rejection mentioning " << needles[0];
  } catch (const std::exception& e) {
    for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(BpeTokenizer, ClipFolderErrorsNameTheFile) {
  const std::string vocab = slurp(text_data("clip_tiny/vocab.json"));
  const std::string config = slurp(text_data("clip_tiny/tokenizer_config.json"));
  expect_folder_rejected({{"vocab.json", vocab}, {"merges.txt", "#version: 0.2\nt h\nc a x\n"}},
                         {"merges.txt:3", "two tokens", "c a x"});
  expect_folder_rejected({{"vocab.json", vocab}, {"merges.txt", "#version: 0.2\nq h\n"}}, {"merges.txt:2", "\"q\"", "vocab.json"});
  expect_folder_rejected({{"vocab.json", vocab}, {"merges.txt", "#version: 0.2\nt h\nh t\n"}},
                         {"merges.txt:3", "merged token \"ht\""});
  expect_folder_rejected({{"vocab.json", "{\"a\": 0,"}, {"merges.txt", "#version: 0.2\n"}}, {"vocab.json", "not valid JSON"});
  expect_folder_rejected({{"vocab.json", "{\"a\": \"x\"}"}, {"merges.txt", "#version: 0.2\n"}, {"tokenizer_config.json", config}},
                         {"vocab.json", "\"a\"", "expected an id"});
  expect_folder_rejected({{"vocab.json", "{\"a\": 0}"}, {"merges.txt", "#version: 0.2\n"}}, {"vocab.json", "<|startoftext|>"});
  expect_folder_rejected({{"vocab.json", vocab}, {"merges.txt", "#version: 0.2\n"}, {"tokenizer_config.json", "{\"tokenizer_class\": \"GPT2Tokenizer\"}"}},
                         {"tokenizer_config.json", "GPT2Tokenizer"});
  expect_folder_rejected({{"vocab.json", vocab}}, {"no tokenizer.json", "merges.txt"});
  EXPECT_THROW(BpeTokenizer::from_vocab_merges(text_data("clip_tiny/vocab.json"), text_data("clip_tiny/missing.txt")),
               std::runtime_error);
}

// Normalizers in any order, Replace, Lowercase, Split with invert and RobertaProcessing on the
// GPT-2-style tokenizer (full byte alphabet, so the ids spell the normalized bytes); goldens from
// Hugging Face tokenizers (make_goldens.mjs GPT2_VARIANTS).
TEST(BpeTokenizer, NormalizerAndPreTokenizerVariantsMatchHuggingFace) {
  using nlohmann::json;
  const std::map<std::string, json> variants = {
      {"replace_then_lower", {{"normalizer", json::parse(R"({"type": "Sequence", "normalizers": [{"type": "Replace",
          "pattern": {"String": "ab"}, "content": "B"}, {"type": "Lowercase"}, {"type": "NFC"}]})")}}},
      {"lower_then_replace", {{"normalizer", json::parse(R"({"type": "Sequence", "normalizers": [{"type": "Lowercase"},
          {"type": "Replace", "pattern": {"String": "ab"}, "content": "B"}]})")}}},
      {"collapse_ws", {{"normalizer", json::parse(R"({"type": "Sequence", "normalizers": [{"type": "Replace",
          "pattern": {"Regex": "\\s+"}, "content": " "}, {"type": "Lowercase"}]})")}}},
      {"split_invert_isolated", {{"pre_tokenizer", json::parse(R"({"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"Regex": "[a-c]+"}, "behavior": "Isolated", "invert": true}, {"type": "ByteLevel",
          "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})")}}},
      {"split_invert_removed", {{"pre_tokenizer", json::parse(R"({"type": "Sequence", "pretokenizers": [{"type": "Split",
          "pattern": {"String": "b"}, "behavior": "Removed", "invert": true}, {"type": "ByteLevel",
          "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})")}}},
      {"roberta", {{"post_processor", json::parse(R"({"type": "RobertaProcessing", "sep": ["<mask>", 272],
          "cls": ["<s>", 268], "trim_offsets": true, "add_prefix_space": true})")}}},
  };
  const std::vector<std::string> texts = {"AB ab Ab", "axxb x", "\xCE\xA3\xCE\x91\xCE\xA3 \xC4\xB0 \xC7\x85 abc",
                                          "a \t\n\xE3\x80\x80 b\xC2\x85" "c  ", "abcxabcab b"};
  // variant -> per text: ids, then ids with special tokens
  const std::map<std::string, std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>> golden = {
    {"replace_then_lower", {
      {{32,256,32,98,32,256}, {268,32,256,32,98,32,256}},
      {{259,120,120,98,32,120}, {268,259,120,120,98,32,120}},
      {{32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,257}, {268,32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,257}},
      {{259,32,9,10,227,128,128,32,98,194,133,99,265}, {268,259,32,9,10,227,128,128,32,98,194,133,99,265}},
      {{32,257,120,257,98,32,98}, {268,32,257,120,257,98,32,98}}}},
    {"lower_then_replace", {
      {{32,66,32,66,32,66}, {268,32,66,32,66,32,66}},
      {{259,120,120,98,32,120}, {268,259,120,120,98,32,120}},
      {{32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,66,99}, {268,32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,66,99}},
      {{259,32,9,10,227,128,128,32,98,194,133,99,265}, {268,259,32,9,10,227,128,128,32,98,194,133,99,265}},
      {{32,66,99,120,66,99,66,32,98}, {268,32,66,99,120,66,99,66,32,98}}}},
    {"collapse_ws", {
      {{32,256,32,256,32,256}, {268,32,256,32,256,32,256}},
      {{259,120,120,98,32,120}, {268,259,120,120,98,32,120}},
      {{32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,258}, {268,32,207,131,206,177,207,131,32,105,204,135,32,199,134,32,258}},
      {{259,32,98,32,99,32}, {268,259,32,98,32,99,32}},
      {{32,258,120,258,256,32,98}, {268,32,258,120,258,256,32,98}}}},
    {"split_invert_isolated", {
      {{65,66,32,256,32,65,98}, {268,65,66,32,256,32,65,98}},
      {{97,120,120,98,32,120}, {268,97,120,120,98,32,120}},
      {{206,163,206,145,206,163,32,196,176,32,199,133,32,258}, {268,206,163,206,145,206,163,32,196,176,32,199,133,32,258}},
      {{97,32,9,10,227,128,128,32,98,194,133,99,265}, {268,97,32,9,10,227,128,128,32,98,194,133,99,265}},
      {{258,120,258,256,32,98}, {268,258,120,258,256,32,98}}}},
    {"split_invert_removed", {
      {{98,98}, {268,98,98}}, {{98}, {268,98}}, {{98}, {268,98}}, {{98}, {268,98}}, {{98,98,98,98}, {268,98,98,98,98}}}},
    {"roberta", {
      {{32,65,66,32,256,32,65,98}, {268,32,65,66,32,256,32,65,98,272}},
      {{259,120,120,98,32,120}, {268,259,120,120,98,32,120,272}},
      {{32,206,163,206,145,206,163,32,196,176,32,199,133,32,258}, {268,32,206,163,206,145,206,163,32,196,176,32,199,133,32,258,272}},
      {{259,32,9,10,227,128,128,32,98,194,133,99,265}, {268,259,32,9,10,227,128,128,32,98,194,133,99,265,272}},
      {{32,258,120,258,256,32,98}, {268,32,258,120,258,256,32,98,272}}}},
  };
  const json base = json::parse(slurp(text_data("bpe_gpt2_style.json")));
  for (const auto& [name, edit] : variants) {
    json j = base;
    for (const auto& [key, value] : edit.items()) j[key] = value;
    BpeTokenizer tok = BpeTokenizer::from_json(j.dump(), {}, name);
    const auto& g = golden.at(name);
    for (std::size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(tok.encode(texts[i]), g[i].first) << name << " \"" << texts[i] << "\"";
      EXPECT_EQ(tok.encode(texts[i], true), g[i].second) << name << " \"" << texts[i] << "\"";
    }
  }
}

// Hugging Face's Lowercase is Rust's char::to_lowercase per character (not str::to_lowercase).
TEST(BpeTokenizer, LowercaseIsPerCharacterWithoutFinalSigma) {
  nlohmann::json j = nlohmann::json::parse(slurp(text_data("bpe_gpt2_style.json")));
  j["normalizer"] = {{"type", "Lowercase"}};
  BpeTokenizer tok = BpeTokenizer::from_json(j.dump(), {}, "lower.json");
  // ΟΔΟΣ İ ǅ ẞ Ⅻ 𐐀 -> οδοσ i̇ ǆ ß ⅻ 𐐨
  EXPECT_EQ(tok.normalized_text("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3 \xC4\xB0 \xC7\x85 \xE1\xBA\x9E \xE2\x85\xAB \xF0\x90\x90\x80"),
            "\xCE\xBF\xCE\xB4\xCE\xBF\xCF\x83 i\xCC\x87 \xC7\x86 \xC3\x9F \xE2\x85\xBB \xF0\x90\x90\xA8");
  EXPECT_EQ(tok.normalized_text("ALREADY lower? no: MIXED 123"), "already lower? no: mixed 123");
  EXPECT_EQ(tok.normalized_text("\xE6\x95\xB0\xE6\x8D\xAE ok"), "\xE6\x95\xB0\xE6\x8D\xAE ok");
}

}  // namespace
}  // namespace zeroshard::text
