#include "text/sentencepiece_tokenizer.h"

#include "util/optional_parts.h"

#include <dlfcn.h>
#include <unistd.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <stdexcept>

#include "text/utf8.h"

namespace zeroshard::text {

namespace {

struct NamedEntity {
  const char* name;   // without the ';'
  const char* value;  // UTF-8
  bool legacy;        // also recognised without ';' (the HTML5 "legacy" names)
};

// Generated from the WHATWG named character reference table (as Python's
// html.entities.html5 carries it): all legacy names plus common typographic ones.
constexpr NamedEntity kEntities[] = {
    {"AElig", "\xC3\x86""", true},
    {"AMP", "&", true},
    {"Aacute", "\xC3\x81""", true},
    {"Acirc", "\xC3\x82""", true},
    {"Agrave", "\xC3\x80""", true},
    {"Aring", "\xC3\x85""", true},
    {"Atilde", "\xC3\x83""", true},
    {"Auml", "\xC3\x84""", true},
    {"COPY", "\xC2\xA9""", true},
    {"Ccedil", "\xC3\x87""", true},
    {"Dagger", "\xE2\x80\xA1""", false},
    {"ETH", "\xC3\x90""", true},
    {"Eacute", "\xC3\x89""", true},
    {"Ecirc", "\xC3\x8A""", true},
    {"Egrave", "\xC3\x88""", true},
    {"Euml", "\xC3\x8B""", true},
    {"GT", ">", true},
    {"Iacute", "\xC3\x8D""", true},
    {"Icirc", "\xC3\x8E""", true},
    {"Igrave", "\xC3\x8C""", true},
    {"Iuml", "\xC3\x8F""", true},
    {"LT", "<", true},
    {"Ntilde", "\xC3\x91""", true},
    {"OElig", "\xC5\x92""", false},
    {"Oacute", "\xC3\x93""", true},
    {"Ocirc", "\xC3\x94""", true},
    {"Ograve", "\xC3\x92""", true},
    {"Oslash", "\xC3\x98""", true},
    {"Otilde", "\xC3\x95""", true},
    {"Ouml", "\xC3\x96""", true},
    {"Prime", "\xE2\x80\xB3""", false},
    {"QUOT", "\x22""", true},
    {"REG", "\xC2\xAE""", true},
    {"Scaron", "\xC5\xA0""", false},
    {"THORN", "\xC3\x9E""", true},
    {"Uacute", "\xC3\x9A""", true},
    {"Ucirc", "\xC3\x9B""", true},
    {"Ugrave", "\xC3\x99""", true},
    {"Uuml", "\xC3\x9C""", true},
    {"Yacute", "\xC3\x9D""", true},
    {"Yuml", "\xC5\xB8""", false},
    {"aacute", "\xC3\xA1""", true},
    {"acirc", "\xC3\xA2""", true},
    {"acute", "\xC2\xB4""", true},
    {"aelig", "\xC3\xA6""", true},
    {"agrave", "\xC3\xA0""", true},
    {"amp", "&", true},
    {"apos", "'", false},
    {"aring", "\xC3\xA5""", true},
    {"atilde", "\xC3\xA3""", true},
    {"auml", "\xC3\xA4""", true},
    {"bdquo", "\xE2\x80\x9E""", false},
    {"brvbar", "\xC2\xA6""", true},
    {"bull", "\xE2\x80\xA2""", false},
    {"ccedil", "\xC3\xA7""", true},
    {"cedil", "\xC2\xB8""", true},
    {"cent", "\xC2\xA2""", true},
    {"circ", "\xCB\x86""", false},
    {"clubs", "\xE2\x99\xA3""", false},
    {"copy", "\xC2\xA9""", true},
    {"curren", "\xC2\xA4""", true},
    {"dagger", "\xE2\x80\xA0""", false},
    {"darr", "\xE2\x86\x93""", false},
    {"deg", "\xC2\xB0""", true},
    {"diams", "\xE2\x99\xA6""", false},
    {"divide", "\xC3\xB7""", true},
    {"eacute", "\xC3\xA9""", true},
    {"ecirc", "\xC3\xAA""", true},
    {"egrave", "\xC3\xA8""", true},
    {"emsp", "\xE2\x80\x83""", false},
    {"ensp", "\xE2\x80\x82""", false},
    {"eth", "\xC3\xB0""", true},
    {"euml", "\xC3\xAB""", true},
    {"euro", "\xE2\x82\xAC""", false},
    {"fnof", "\xC6\x92""", false},
    {"frac12", "\xC2\xBD""", true},
    {"frac14", "\xC2\xBC""", true},
    {"frac34", "\xC2\xBE""", true},
    {"frasl", "\xE2\x81\x84""", false},
    {"ge", "\xE2\x89\xA5""", false},
    {"gt", ">", true},
    {"harr", "\xE2\x86\x94""", false},
    {"hearts", "\xE2\x99\xA5""", false},
    {"hellip", "\xE2\x80\xA6""", false},
    {"iacute", "\xC3\xAD""", true},
    {"icirc", "\xC3\xAE""", true},
    {"iexcl", "\xC2\xA1""", true},
    {"igrave", "\xC3\xAC""", true},
    {"infin", "\xE2\x88\x9E""", false},
    {"iquest", "\xC2\xBF""", true},
    {"iuml", "\xC3\xAF""", true},
    {"laquo", "\xC2\xAB""", true},
    {"larr", "\xE2\x86\x90""", false},
    {"ldquo", "\xE2\x80\x9C""", false},
    {"le", "\xE2\x89\xA4""", false},
    {"lrm", "\xE2\x80\x8E""", false},
    {"lsaquo", "\xE2\x80\xB9""", false},
    {"lsquo", "\xE2\x80\x98""", false},
    {"lt", "<", true},
    {"macr", "\xC2\xAF""", true},
    {"mdash", "\xE2\x80\x94""", false},
    {"micro", "\xC2\xB5""", true},
    {"middot", "\xC2\xB7""", true},
    {"minus", "\xE2\x88\x92""", false},
    {"nbsp", "\xC2\xA0""", true},
    {"ndash", "\xE2\x80\x93""", false},
    {"ne", "\xE2\x89\xA0""", false},
    {"not", "\xC2\xAC""", true},
    {"ntilde", "\xC3\xB1""", true},
    {"oacute", "\xC3\xB3""", true},
    {"ocirc", "\xC3\xB4""", true},
    {"oelig", "\xC5\x93""", false},
    {"ograve", "\xC3\xB2""", true},
    {"oline", "\xE2\x80\xBE""", false},
    {"ordf", "\xC2\xAA""", true},
    {"ordm", "\xC2\xBA""", true},
    {"oslash", "\xC3\xB8""", true},
    {"otilde", "\xC3\xB5""", true},
    {"ouml", "\xC3\xB6""", true},
    {"para", "\xC2\xB6""", true},
    {"permil", "\xE2\x80\xB0""", false},
    {"plusmn", "\xC2\xB1""", true},
    {"pound", "\xC2\xA3""", true},
    {"prime", "\xE2\x80\xB2""", false},
    {"quot", "\x22""", true},
    {"raquo", "\xC2\xBB""", true},
    {"rarr", "\xE2\x86\x92""", false},
    {"rdquo", "\xE2\x80\x9D""", false},
    {"reg", "\xC2\xAE""", true},
    {"rlm", "\xE2\x80\x8F""", false},
    {"rsaquo", "\xE2\x80\xBA""", false},
    {"rsquo", "\xE2\x80\x99""", false},
    {"sbquo", "\xE2\x80\x9A""", false},
    {"scaron", "\xC5\xA1""", false},
    {"sect", "\xC2\xA7""", true},
    {"shy", "\xC2\xAD""", true},
    {"spades", "\xE2\x99\xA0""", false},
    {"sup1", "\xC2\xB9""", true},
    {"sup2", "\xC2\xB2""", true},
    {"sup3", "\xC2\xB3""", true},
    {"szlig", "\xC3\x9F""", true},
    {"thinsp", "\xE2\x80\x89""", false},
    {"thorn", "\xC3\xBE""", true},
    {"tilde", "\xCB\x9C""", false},
    {"times", "\xC3\x97""", true},
    {"trade", "\xE2\x84\xA2""", false},
    {"uacute", "\xC3\xBA""", true},
    {"uarr", "\xE2\x86\x91""", false},
    {"ucirc", "\xC3\xBB""", true},
    {"ugrave", "\xC3\xB9""", true},
    {"uml", "\xC2\xA8""", true},
    {"uuml", "\xC3\xBC""", true},
    {"yacute", "\xC3\xBD""", true},
    {"yen", "\xC2\xA5""", true},
    {"yuml", "\xC3\xBF""", true},
    {"zwj", "\xE2\x80\x8D""", false},
    {"zwnj", "\xE2\x80\x8C""", false},
};

const NamedEntity* find_entity(std::string_view name) {
  for (const NamedEntity& e : kEntities) {
    if (name.size() == std::strlen(e.name) && name.compare(0, name.size(), e.name) == 0) return &e;
  }
  return nullptr;
}

// Python's html._invalid_charrefs: 0x80..0x9F as Windows-1252, plus 0x00 and 0x0D.
char32_t invalid_charref(uint32_t n, bool* found) {
  static constexpr char32_t kCp1252[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  *found = true;
  if (n == 0) return 0xFFFD;
  if (n == 0x0D) return 0x0D;
  if (n >= 0x80 && n <= 0x9F) return kCp1252[n - 0x80];
  *found = false;
  return 0;
}

// Python's html._invalid_codepoints (dropped).
bool invalid_codepoint(uint32_t n) {
  return (n >= 0x1 && n <= 0x8) || n == 0xB || (n >= 0xE && n <= 0x1F) || (n >= 0x7F && n <= 0x9F) ||
         (n >= 0xFDD0 && n <= 0xFDEF) || ((n & 0xFFFE) == 0xFFFE && n <= 0x10FFFF);
}

std::string nfc(const std::string& s) {
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU NFC unavailable: ") + u_errorName(err));
  const icu::StringPiece sp(s.data(), static_cast<int32_t>(s.size()));
  if (n->isNormalizedUTF8(sp, err) && U_SUCCESS(err)) return s;
  err = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out);
  n->normalizeUTF8(0, sp, sink, nullptr, err);
  if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU NFC failed: ") + u_errorName(err));
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

std::string html_unescape(std::string_view s) {
  if (s.find('&') == std::string_view::npos) return std::string(s);
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] != '&') {
      out.push_back(s[i++]);
      continue;
    }
    const std::size_t start = i + 1;
    if (start < s.size() && s[start] == '#') {
      // Numeric reference: &#[0-9]+;? or &#[xX][0-9a-fA-F]+;?
      const bool hex = start + 1 < s.size() && (s[start + 1] == 'x' || s[start + 1] == 'X');
      std::size_t j = start + (hex ? 2 : 1);
      const std::size_t digits_begin = j;
      while (j < s.size() && (hex ? is_hex(s[j]) : is_digit(s[j]))) ++j;
      if (j == digits_begin) {
        out.push_back(s[i++]);
        continue;
      }
      uint64_t num = 0;
      bool huge = false;
      for (std::size_t k = digits_begin; k < j; ++k) {
        const char c = s[k];
        const uint64_t d = is_digit(c) ? uint64_t(c - '0') : uint64_t((c | 0x20) - 'a' + 10);
        num = num * (hex ? 16 : 10) + d;
        if (num > 0x10FFFF) huge = true, num = 0x110000;
      }
      if (j < s.size() && s[j] == ';') ++j;
      bool found = false;
      const char32_t repl = huge ? 0 : invalid_charref(static_cast<uint32_t>(num), &found);
      if (found) utf8_append(repl, out);
      else if (huge || (num >= 0xD800 && num <= 0xDFFF)) utf8_append(0xFFFD, out);
      else if (!invalid_codepoint(static_cast<uint32_t>(num))) utf8_append(static_cast<char32_t>(num), out);
      i = j;
      continue;
    }
    // Named reference: &[^\t\n\f <&#;]{1,32};? (32 code points).
    std::size_t j = start, count = 0;
    while (j < s.size() && count < 32) {
      const char c = s[j];
      if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';') break;
      j += utf8_lead_length(static_cast<unsigned char>(c));
      ++count;
    }
    if (count == 0) {
      out.push_back(s[i++]);
      continue;
    }
    j = std::min(j, s.size());
    const bool semi = j < s.size() && s[j] == ';';
    const std::string_view name = s.substr(start, j - start);
    const std::size_t end = semi ? j + 1 : j;
    if (const NamedEntity* e = find_entity(name); e && (semi || e->legacy)) {
      out += e->value;
      i = end;
      continue;
    }
    // Longest legacy name that is a prefix (at least 2 characters, shorter than the match).
    const std::size_t whole = end - start;  // Python's len(s) counts the ';' too
    bool done = false;
    for (std::size_t x = std::min(whole - 1, name.size()); x >= 2 && !done; --x) {
      const NamedEntity* e = find_entity(name.substr(0, x));
      if (e && e->legacy) {
        out += e->value;
        out.append(s.substr(start + x, end - start - x));
        done = true;
      }
    }
    if (!done) out.append(s.substr(i, end - i));
    i = end;
  }
  return out;
}

std::string clean_whitespace(std::string_view text) {
  std::string s;
  utf8_append_replacing_invalid(text, s);
  // The two ftfy.fix_text steps we reproduce: uncurl_quotes, then NFC.
  std::string q;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t b = i;
    const char32_t c = utf8_decode_valid(s, i);
    if ((c >= 0x2018 && c <= 0x201B) || c == 0x02BC) q += '\'';
    else if (c >= 0x201C && c <= 0x201F) q += '"';
    else q.append(s, b, i - b);
  }
  s = html_unescape(html_unescape(nfc(q)));
  const std::string_view stripped = strip_python_space(s);
  std::string out;
  for (std::size_t i = 0; i < stripped.size();) {
    const std::size_t b = i;
    const char32_t c = utf8_decode_valid(stripped, i);
    if (is_unicode_white_space(c)) {
      out += ' ';
      while (i < stripped.size()) {
        std::size_t k = i;
        if (!is_unicode_white_space(utf8_decode_valid(stripped, k))) break;
        i = k;
      }
    } else {
      out.append(stripped, b, i - b);
    }
  }
  return std::string(strip_python_space(out));
}

namespace {

// libzs_spm.so's functions (src/text/spm_shim.cpp), loaded once, privately.
struct SpmLibrary {
  using IntSink = void (*)(void*, const int*, size_t);
  using TextSink = void (*)(void*, const char*, size_t);
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
  int (*piece_to_id)(void*, const char*) = nullptr;
  int (*unk_id)(void*) = nullptr;
  int (*piece_size)(void*) = nullptr;
  int (*id_to_piece)(void*, int, TextSink, void*) = nullptr;
  int (*encode)(void*, const char*, size_t, IntSink, void*, char*, size_t) = nullptr;
  int (*decode)(void*, const int*, size_t, TextSink, void*, char*, size_t) = nullptr;

  static const SpmLibrary& get() {
    static const SpmLibrary lib = open();
    return lib;
  }

 private:
  // Next to the executable first (an installed layout), then where the build put it.
  static SpmLibrary open() {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("ZEROSHARD_SPM_SHIM")) candidates.push_back(env);
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      exe[n] = '\0';
      std::string dir(exe);
      dir = dir.substr(0, dir.rfind('/'));
      candidates.push_back(dir + "/libzs_spm.so");
      candidates.push_back(dir + "/../libzs_spm.so");
    }
#ifdef ZS_SPM_SHIM
    candidates.push_back(ZS_SPM_SHIM);
#endif
    std::string tried;
    for (const auto& path : candidates) {
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (h == nullptr) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      SpmLibrary lib;
      auto sym = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
        if (fn == nullptr) throw std::runtime_error(path + ": no symbol " + name);
      };
      sym(lib.load, "zs_spm_load");
      sym(lib.free, "zs_spm_free");
      sym(lib.piece_to_id, "zs_spm_piece_to_id");
      sym(lib.unk_id, "zs_spm_unk_id");
      sym(lib.piece_size, "zs_spm_piece_size");
      sym(lib.id_to_piece, "zs_spm_id_to_piece");
      sym(lib.encode, "zs_spm_encode");
      sym(lib.decode, "zs_spm_decode");
      return lib;
    }
    throw std::runtime_error("cannot load libzs_spm.so (zeroshard's SentencePiece module; set ZEROSHARD_SPM_SHIM to "
                             "its path):" + tried);
  }
};

void append_ids(void* ctx, const int* ids, size_t n) { static_cast<std::vector<int>*>(ctx)->assign(ids, ids + n); }
void append_text(void* ctx, const char* text, size_t n) { static_cast<std::string*>(ctx)->assign(text, n); }

}  // namespace

struct SentencePieceTokenizer::Handle {
  void* p = nullptr;
  ~Handle() {
    if (p != nullptr) SpmLibrary::get().free(p);
  }
};

SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& model_path) {
  util::require_part(util::OptionalPart::kSentencePiece, "the SentencePiece model " + model_path);
  const SpmLibrary& lib = SpmLibrary::get();
  SentencePieceTokenizer t;
  t.path_ = model_path;
  t.sp_ = std::make_unique<Handle>();
  char err[512] = {0};
  t.sp_->p = lib.load(model_path.c_str(), err, sizeof(err));
  if (t.sp_->p == nullptr) throw std::runtime_error(model_path + ": cannot load the SentencePiece model: " + err);
  const int unk = lib.unk_id(t.sp_->p);
  const int eos = lib.piece_to_id(t.sp_->p, "</s>");
  if (eos == unk || eos < 0) {
    throw std::invalid_argument(model_path + ": the SentencePiece model has no \"</s>\" piece (T5/umT5 models have it)");
  }
  t.eos_id_ = eos;
  const int pad = lib.piece_to_id(t.sp_->p, "<pad>");
  t.pad_id_ = (pad >= 0 && pad != unk) ? pad : 0;
  return t;
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::string valid;
  utf8_append_replacing_invalid(text, valid);
  std::vector<int> ids;
  char err[512] = {0};
  if (!SpmLibrary::get().encode(sp_->p, valid.data(), valid.size(), append_ids, &ids, err, sizeof(err))) {
    throw std::runtime_error(path_ + ": SentencePiece encode failed: " + err);
  }
  return std::vector<int32_t>(ids.begin(), ids.end());
}

PaddedIds SentencePieceTokenizer::encode_padded(std::string_view text, int32_t seq_len, bool clean) const {
  if (seq_len < 1) throw std::invalid_argument(path_ + ": encode_padded: seq_len must be >= 1, got " + std::to_string(seq_len));
  PaddedIds p;
  p.ids = encode(clean ? std::string_view(clean_whitespace(text)) : text);
  if (static_cast<int64_t>(p.ids.size()) > seq_len - 1) {
    p.truncated = true;
    p.ids.resize(static_cast<std::size_t>(seq_len - 1));
  }
  p.ids.push_back(eos_id_);
  p.length = static_cast<int32_t>(p.ids.size());
  p.mask.assign(p.ids.size(), 1);
  p.ids.resize(static_cast<std::size_t>(seq_len), pad_id_);
  p.mask.resize(static_cast<std::size_t>(seq_len), 0);
  return p;
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  const int size = vocab_size();
  std::vector<int> v(ids.begin(), ids.end());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= size) {
      throw std::out_of_range(path_ + ": decode: id " + std::to_string(v[i]) + " at position " + std::to_string(i) +
                              " is outside the vocabulary (size " + std::to_string(size) + ")");
    }
  }
  std::string out;
  char err[512] = {0};
  if (!SpmLibrary::get().decode(sp_->p, v.data(), v.size(), append_text, &out, err, sizeof(err))) {
    throw std::runtime_error(path_ + ": SentencePiece decode failed: " + err);
  }
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return SpmLibrary::get().piece_size(sp_->p); }

std::string SentencePieceTokenizer::id_to_piece(int32_t id) const {
  if (id < 0 || id >= vocab_size()) throw std::out_of_range(path_ + ": id " + std::to_string(id) + " out of range");
  std::string out;
  SpmLibrary::get().id_to_piece(sp_->p, id, append_text, &out);
  return out;
}

}  // namespace zeroshard::text
