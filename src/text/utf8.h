// UTF-8 helpers shared by the tokenizers (no dependencies beyond the standard library).
//
// Invalid UTF-8 convention (used by every tokenizer in zeroshard::text): an ill-formed byte
// sequence is replaced by U+FFFD following the Unicode "substitution of maximal subparts"
// practice (Unicode §3.9, the WHATWG Encoding Standard decoder, Python's
// `bytes.decode('utf-8', errors='replace')`, Rust's `String::from_utf8_lossy`): each maximal
// prefix of a would-be well-formed sequence becomes one U+FFFD, and every other bad byte
// becomes one U+FFFD. Surrogates (ED A0..BF xx), overlongs (C0, C1, E0 80..9F, F0 80..8F) and
// code points above U+10FFFF (F4 90.., F5..FF) are ill-formed. This is exactly what a Python
// or JavaScript data pipeline hands a Hugging Face tokenizer after reading bytes leniently,
// so ids stay comparable with those pipelines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zeroshard::text {

// Length of the well-formed UTF-8 sequence starting at s[i] (1..4), or 0 when the bytes at i
// do not start a well-formed sequence; `bad_len` then receives the length of the maximal
// subpart to replace by one U+FFFD (>= 1).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i, std::size_t* bad_len);

// Byte offset of the first ill-formed sequence, or s.size() when `s` is valid UTF-8.
std::size_t utf8_first_invalid(std::string_view s);

inline bool utf8_is_valid(std::string_view s) { return utf8_first_invalid(s) == s.size(); }

// Appends `s` to `out` with every maximal ill-formed subpart replaced by U+FFFD (see above).
// Returns the number of replacements made.
std::size_t utf8_append_replacing_invalid(std::string_view s, std::string& out);

// Decodes the well-formed sequence at s[i] (the caller guarantees validity) and advances i.
inline char32_t utf8_decode_valid(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  if (b0 < 0xE0) {
    const char32_t c = (char32_t(b0 & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
    i += 2;
    return c;
  }
  if (b0 < 0xF0) {
    const char32_t c = (char32_t(b0 & 0x0F) << 12) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 6) |
                       (static_cast<unsigned char>(s[i + 2]) & 0x3F);
    i += 3;
    return c;
  }
  const char32_t c = (char32_t(b0 & 0x07) << 18) | (char32_t(static_cast<unsigned char>(s[i + 1]) & 0x3F) << 12) |
                     (char32_t(static_cast<unsigned char>(s[i + 2]) & 0x3F) << 6) |
                     (static_cast<unsigned char>(s[i + 3]) & 0x3F);
  i += 4;
  return c;
}

// Length in bytes of the (valid) sequence whose lead byte is `b0`.
inline std::size_t utf8_lead_length(unsigned char b0) {
  return b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
}

// Appends the UTF-8 encoding of code point `c` (must be a scalar value).
void utf8_append(char32_t c, std::string& out);

// Printable description of a byte string for error messages: at most `max_bytes` bytes, with
// control and non-ASCII bytes as \xNN.
std::string utf8_escape_for_message(std::string_view s, std::size_t max_bytes = 40);

// Unicode's White_Space property (PropList.txt: 25 code points, unchanged since Unicode 6.3
// dropped U+180E): Rust's char::is_whitespace, regex \s, what ICU's u_isUWhiteSpace answers.
bool is_unicode_white_space(char32_t c);

// Python's str.strip() on valid UTF-8: drops Unicode White_Space and U+001C..U+001F at both ends
// (the SentencePiece shim's text clean-up and CLIP's decode both strip as Python does).
std::string_view strip_python_space(std::string_view s);

}  // namespace zeroshard::text
