// SentencePieceTokenizer on a tiny model trained here with Debian's spm_train (T5's special ids:
// <pad>=0, </s>=1, <unk>=2, no <s>), the Wan / FLUX padding convention, and the 'whitespace'
// cleaning against golden outputs of Python 3.11's html.unescape and Wan's whitespace_clean
// (regex module \s) on the same inputs.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "text/sentencepiece_tokenizer.h"

namespace zeroshard::text {
namespace {

std::string g_dir;

std::string train(const std::string& name, const std::string& extra) {
  const std::string prefix = g_dir + "/" + name;
  const std::string cmd = "spm_train --input=" + g_dir + "/corpus.txt --model_prefix=" + prefix +
                          " --vocab_size=60 --model_type=unigram --character_coverage=1.0 --unk_id=2 --bos_id=-1 " + extra +
                          " > " + prefix + ".log 2>&1";
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "spm_train failed (Debian package `sentencepiece`): " << cmd;
  return prefix + ".model";
}

class SentencePiece : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/zs_spm_XXXXXX";
    g_dir = mkdtemp(tmpl);
    std::ofstream corpus(g_dir + "/corpus.txt");
    const char* words[] = {"a", "video", "of", "the", "cat", "walking", "on", "beach", "sunset", "camera", "slowly", "pans",
                           "left", "right", "red", "car", "city", "night", "rain", "light", "dog", "runs", "park", "green",
                           "tree", "wind", "blue", "sky", "close", "up", "shot", "woman", "man", "smiling", "water", "水", "猫"};
    std::mt19937 rng(3);
    for (int l = 0; l < 3000; ++l) {
      const int n = 3 + static_cast<int>(rng() % 10);
      for (int k = 0; k < n; ++k) corpus << (k ? " " : "") << words[rng() % (sizeof(words) / sizeof(words[0]))];
      corpus << "\n";
    }
    corpus.close();
    model_path_ = train("t5like", "--pad_id=0 --eos_id=1");
  }
  static std::string model_path_;
};
std::string SentencePiece::model_path_;

TEST_F(SentencePiece, SpecialIdsAndPadding) {
  const auto tok = SentencePieceTokenizer::from_file(model_path_);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.vocab_size(), 60);
  const std::string text = "a cat walking on the beach";
  const auto ids = tok.encode(text);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok.decode(ids), text);
  const PaddedIds p = tok.encode_padded(text, 32, false);
  ASSERT_EQ(p.ids.size(), 32u);
  ASSERT_EQ(p.mask.size(), 32u);
  EXPECT_EQ(p.length, static_cast<int32_t>(ids.size()) + 1);
  EXPECT_FALSE(p.truncated);
  for (std::size_t i = 0; i < 32; ++i) {
    if (i < ids.size()) EXPECT_EQ(p.ids[i], ids[i]);
    else if (i == ids.size()) EXPECT_EQ(p.ids[i], 1);
    else EXPECT_EQ(p.ids[i], 0);
    EXPECT_EQ(p.mask[i], i <= ids.size() ? 1 : 0);
  }
}

TEST_F(SentencePiece, TruncationKeepsEos) {
  const auto tok = SentencePieceTokenizer::from_file(model_path_);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "red car in the city at night ";
  const auto ids = tok.encode(text);
  ASSERT_GT(ids.size(), 8u);
  const PaddedIds p = tok.encode_padded(text, 8, false);
  EXPECT_TRUE(p.truncated);
  EXPECT_EQ(p.length, 8);
  EXPECT_EQ(std::vector<int32_t>(p.ids.begin(), p.ids.begin() + 7), std::vector<int32_t>(ids.begin(), ids.begin() + 7));
  EXPECT_EQ(p.ids[7], tok.eos_id());
  EXPECT_EQ(p.mask, std::vector<uint8_t>(8, 1));
  const PaddedIds one = tok.encode_padded(text, 1, false);
  EXPECT_EQ(one.ids, std::vector<int32_t>{1});
  EXPECT_THROW(tok.encode_padded(text, 0, false), std::invalid_argument);
}

TEST_F(SentencePiece, CleaningIsAppliedBeforeEncoding) {
  const auto tok = SentencePieceTokenizer::from_file(model_path_);
  const std::string raw = "  a &amp;amp; cat\t\n walking &lt;b&gt;  ";
  EXPECT_EQ(tok.encode_padded(raw, 24, true).ids, tok.encode_padded(clean_whitespace(raw), 24, false).ids);
  EXPECT_NE(tok.encode_padded(raw, 24, true).ids, tok.encode_padded(raw, 24, false).ids);
}

TEST_F(SentencePiece, ErrorsNameTheFile) {
  const std::string no_eos = train("no_eos", "--pad_id=0 --eos_id=-1");
  try {
    SentencePieceTokenizer::from_file(no_eos);
    ADD_FAILURE() << "expected a rejection";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("</s>"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(no_eos), std::string::npos) << e.what();
  }
  EXPECT_THROW(SentencePieceTokenizer::from_file(g_dir + "/missing.model"), std::runtime_error);
  const auto tok = SentencePieceTokenizer::from_file(model_path_);
  EXPECT_THROW(tok.decode({5, 60}), std::out_of_range);
}

// Golden outputs of Python 3.11 html.unescape.
TEST(TextClean, HtmlUnescapeMatchesPython) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a &amp; b", "a & b"},
      {"&amp;amp;", "&amp;"},
      {"&lt;&gt;&quot;&#39;&apos;", "<>\"''"},
      {"&#65;&#x42;&#X43", "ABC"},
      {"&#128;&#x9f;&#0;&#13;", "\xE2\x82\xAC\xC5\xB8\xEF\xBF\xBD\r"},
      {"&#xD800;&#1114112;&#99999999999;", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"&#1;&#11;&#xFFFE;&#x10FFFF;", ""},
      {"&ampfoo &notit; &copy2024", "&foo \xC2\xACit; \xC2\xA9" "2024"},
      {"&nbsp;x&nbsp", "\xC2\xA0x\xC2\xA0"},
      {"&unknown; &zz", "&unknown; &zz"},
      {"&hellip;&mdash;&euro;", "\xE2\x80\xA6\xE2\x80\x94\xE2\x82\xAC"},
      {"& amp; &;", "& amp; &;"},
      {"&AMP;&Eacute;&eacute", "&\xC3\x89\xC3\xA9"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(html_unescape(in), out) << in;
}

// Golden outputs of Wan's whitespace_clean(basic_clean(x)) without its ftfy step, for inputs
// ftfy leaves unchanged.
TEST(TextClean, WhitespaceCleanMatchesWan) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"  a \t\n b  ", "a b"},
      {"x&amp;nbsp;y", "x y"},
      {"a\xE3\x80\x80\xE3\x80\x80" "b\xC2\x85" "c", "a b c"},
      {"\x1c" "a\x1c" "b\x1c", "a\x1c" "b"},
      {"&amp;lt;tag&amp;gt;", "<tag>"},
      {"line1\r\nline2", "line1 line2"},
  };
  for (const auto& [in, out] : cases) EXPECT_EQ(clean_whitespace(in), out) << in;
  // The two ftfy steps reproduced: curly quotes and NFC.
  EXPECT_EQ(clean_whitespace("\xE2\x80\x9Cit\xE2\x80\x99s\xE2\x80\x9D e\xCC\x81"), "\"it's\" \xC3\xA9");
}

}  // namespace
}  // namespace zeroshard::text
