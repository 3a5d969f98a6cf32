#include "text/utf8.h"

#include <cstdio>
#include <cstring>

namespace zeroshard::text {

std::size_t utf8_sequence_length(std::string_view s, std::size_t i, std::size_t* bad_len) {
  const std::size_t n = s.size();
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = b(i);
  if (b0 < 0x80) return 1;
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    if (bad_len) *bad_len = 1;  // 80..C1, F5..FF never start a sequence
    return 0;
  }
  // Count how many continuation bytes are well-formed: that prefix is the maximal subpart.
  std::size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= n) break;
    const unsigned char c = b(i + k);
    const unsigned char l = (k == 1) ? lo : 0x80, h = (k == 1) ? hi : 0xBF;
    if (c < l || c > h) break;
  }
  if (k == need) return need;
  if (bad_len) *bad_len = k;
  return 0;
}

std::size_t utf8_first_invalid(std::string_view s) {
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence_length(s, i, nullptr);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

std::size_t utf8_append_replacing_invalid(std::string_view s, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::size_t replaced = 0, i = 0, run = 0;
  const std::size_t n = s.size();
  out.reserve(out.size() + n + 8);
  while (i < n) {
    std::size_t bad = 0;
    const std::size_t len = utf8_sequence_length(s, i, &bad);
    if (len > 0) {
      i += len;
      continue;
    }
    out.append(s.data() + run, i - run);
    out.append(kReplacement, 3);
    ++replaced;
    i += bad;
    run = i;
  }
  out.append(s.data() + run, n - run);
  return replaced;
}

void utf8_append(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string utf8_escape_for_message(std::string_view s, std::size_t max_bytes) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

// Written out rather than asked of ICU, so that this file, the datasets and the core build need no
// ICU (tests/text/test_python_space.cpp checks it against Python over every code point).
bool is_unicode_white_space(char32_t c) {
  if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || c == 0x20;
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

namespace {
// Python's str.isspace: White_Space plus U+001C..U+001F (bidi classes B and S).
bool is_python_space(char32_t c) { return is_unicode_white_space(c) || (c >= 0x1C && c <= 0x1F); }
}  // namespace

std::string_view strip_python_space(std::string_view s) {
  std::size_t b = 0;
  while (b < s.size()) {
    std::size_t k = b;
    if (!is_python_space(utf8_decode_valid(s, k))) break;
    b = k;
  }
  std::size_t e = s.size();
  while (e > b) {
    std::size_t p = e - 1;
    while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
    std::size_t k = p;
    if (!is_python_space(utf8_decode_valid(s, k))) break;
    e = p;
  }
  return s.substr(b, e - b);
}

}  // namespace zeroshard::text
