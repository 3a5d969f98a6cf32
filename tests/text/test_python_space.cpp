// strip_python_space (src/text/utf8.h) strips exactly what Python's str.strip() strips: the 29
// code points for which str.isspace() is true (listed by python3 below), and nothing else.
#include "text/utf8.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace zeroshard::text;

TEST(PythonSpace, StripsExactlyWhatPythonsStrStripStrips) {
  // python3 -c "print([hex(c) for c in range(0x110000) if chr(c).isspace()])"
  const std::set<char32_t> python = {0x9,    0xa,    0xb,    0xc,    0xd,    0x1c,   0x1d,   0x1e,   0x1f,   0x20,
                                     0x85,   0xa0,   0x1680, 0x2000, 0x2001, 0x2002, 0x2003, 0x2004, 0x2005, 0x2006,
                                     0x2007, 0x2008, 0x2009, 0x200a, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000};
  int stripped = 0;
  for (char32_t c = 1; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;  // not encodable in UTF-8
    std::string s;
    utf8_append(c, s);
    const std::string padded = s + "x" + s;
    const bool strips = strip_python_space(padded) == "x";
    EXPECT_EQ(strips, python.count(c) == 1) << "U+" << std::hex << static_cast<uint32_t>(c);
    stripped += strips ? 1 : 0;
  }
  EXPECT_EQ(stripped, 29);
}

// is_unicode_white_space (the tokenizers' \s and trims): Python's set less U+001C..U+001F, i.e.
// Unicode's White_Space property, 25 code points.
TEST(PythonSpace, UnicodeWhiteSpaceIsPythonsSetLessTheFourSeparators) {
  int n = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    std::string s;
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const bool python = c != 0 && [&] {
      utf8_append(c, s);
      return strip_python_space(s + "x" + s) == "x";
    }();
    EXPECT_EQ(is_unicode_white_space(c), python && !(c >= 0x1C && c <= 0x1F)) << "U+" << std::hex << static_cast<uint32_t>(c);
    n += is_unicode_white_space(c) ? 1 : 0;
  }
  EXPECT_EQ(n, 25);
}
