// SentencePiece tokenizer for the T5 / umT5 text encoders (Wan 2.1: google/umt5-xxl; FLUX.1:
// google/t5-v1_1-xxl), a thin wrapper over Debian's libsentencepiece (`spiece.model`).
//
// Conventions reproduced:
//  - Wan 2.1 `HuggingfaceTokenizer(name='google/umt5-xxl', seq_len=512, clean='whitespace')`:
//    text -> clean_whitespace(text) -> ids + </s> -> truncated to seq_len (the last kept id is
//    always </s>, as Hugging Face truncates the text before appending it) -> padded with the
//    pad id to seq_len; mask 1 on the ids and </s>, 0 on padding. Wan's T5 encoder then keeps
//    the first sum(mask) hidden states of each prompt (the "trim"), and the DiT zero-pads the
//    trimmed states back to text_len (the "then zero-pad"); encode_padded's `length` is that
//    sum(mask).
//  - FLUX.1's T5 (`T5Tokenizer(max_length=512 (dev) / 256 (schnell))`, padding="max_length",
//    truncation=True): the same ids, without cleaning; FLUX passes no attention mask to T5.
//  - The pad id is the model's "<pad>" piece (0 in T5 and umT5), or 0 when the model has none;
//    the end id is the "</s>" piece (1 in T5 and umT5); a model without "</s>" is rejected.
//
// Differences from the Hugging Face tokenizers: "<extra_id_N>" and other special-token strings
// inside the text are tokenized as plain text (Hugging Face matches them as added tokens).
//
// 'whitespace' cleaning (Wan's whitespace_clean(basic_clean(text))):
//   ftfy.fix_text -> html.unescape twice -> strip -> every run of white space to one space ->
//   strip. html.unescape is reproduced exactly for numeric references (&#NNN; &#xHH; with and
//   without ';', including Python's Windows-1252 remapping of 0x80-0x9F, U+FFFD for 0, for
//   surrogates and beyond U+10FFFF, and dropping of the other invalid code points) and for the
//   named references in the table in sentencepiece_tokenizer.cpp (the XML five, nbsp, the
//   Latin-1 and common typographic entities); other named references stay as written (Python
//   knows all 2,231 HTML5 names). White space is Unicode White_Space plus U+001C..U+001F
//   (Python's str.isspace). Of ftfy.fix_text only two steps are reproduced: NFC normalization
//   and uncurl_quotes (U+2018..U+201B and U+02BC -> ', U+201C..U+201F -> "). Not reproduced:
//   mojibake / encoding repair (fix_encoding, decode_inconsistent_utf8, restore_byte_a0,
//   replace_lossy_sequences), fix_latin_ligatures, fix_character_width, remove_control_chars,
//   remove_terminal_escapes, fix_c1_controls, ftfy's own "auto" HTML unescaping, and
//   fix_line_breaks (irrelevant here: line breaks become spaces anyway). The umT5 model's own
//   NFKC normalizer covers ligatures and character widths at encoding time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text {

// Python html.unescape (see above for the named references covered).
std::string html_unescape(std::string_view text);
// Wan's clean='whitespace' (see above). Invalid UTF-8 is replaced by U+FFFD first.
std::string clean_whitespace(std::string_view text);

struct PaddedIds {
  std::vector<int32_t> ids;    // seq_len ids
  std::vector<uint8_t> mask;   // 1 on the text ids and </s>, 0 on padding
  int32_t length = 0;          // sum(mask)
  bool truncated = false;      // the text had more than seq_len - 1 ids
};

class SentencePieceTokenizer {
 public:
  static SentencePieceTokenizer from_file(const std::string& model_path);
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer();

  // Ids of the text alone (no </s>). Invalid UTF-8 is replaced by U+FFFD first.
  std::vector<int32_t> encode(std::string_view text) const;
  // Text ids + </s>, truncated / padded to seq_len (>= 1); `clean` applies clean_whitespace.
  PaddedIds encode_padded(std::string_view text, int32_t seq_len, bool clean) const;
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t vocab_size() const;
  std::string id_to_piece(int32_t id) const;

 private:
  SentencePieceTokenizer() = default;
  struct Handle;  // libsentencepiece's processor, through libzs_spm.so (src/text/spm_shim.cpp)
  std::string path_;
  std::unique_ptr<Handle> sp_;
  int32_t eos_id_ = -1, pad_id_ = 0;
};

}  // namespace zeroshard::text
