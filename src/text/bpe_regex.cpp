// PCRE2 side of BpeTokenizer: translation of the Oniguruma patterns tokenizer.json carries,
// compilation (UTF + UCP + JIT), and the per-instance match state.
#include <stdexcept>
#include <string>

#include "text/bpe_internal.h"

namespace zeroshard::text::detail {

namespace {

// Unicode White_Space, the meaning Oniguruma (and Rust's regex) give \s.
constexpr const char* kWhiteSpaceClass =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

Pcre2Code compile_onig_pattern(const std::string& pattern, const std::string& field) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceClass) : "[" + std::string(kWhiteSpaceClass) + "]";
      } else if (e == 'S') {
        if (in_class) throw std::invalid_argument(field + ": \\S inside a character class is not supported in " + pattern);
        out += "[^" + std::string(kWhiteSpaceClass) + "]";
      } else if (std::string("hHRXKwWbB").find(e) != std::string::npos) {
        throw std::invalid_argument(field + ": \\" + std::string(1, e) +
                                    " differs between Oniguruma and PCRE2 and is not supported in " + pattern);
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (c == '[') {
      if (in_class && !(i + 1 < pattern.size() && pattern[i + 1] == ':')) {
        throw std::invalid_argument(field + ": nested character classes are not supported in " + pattern);
      }
      if (!in_class) {
        in_class = true;
        out += c;
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
        continue;
      }
    } else if (c == ']' && in_class) {
      in_class = false;
    }
    out += c;
  }
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(out.data()), out.size(), PCRE2_UTF | PCRE2_UCP, &err,
                                   &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw std::invalid_argument(field + ": PCRE2 cannot compile " + pattern + " (translated " + out + "): " +
                                reinterpret_cast<const char*>(msg) + " at offset " + std::to_string(off));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support pcre2_match interprets
  return Pcre2Code(code);
}

Pcre2Code compile_literal_pattern(const std::string& literal, const std::string& field) {
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(literal.data()), literal.size(),
                                   PCRE2_UTF | PCRE2_LITERAL, &err, &off, nullptr);
  if (!code) throw std::invalid_argument(field + ": PCRE2 cannot compile the literal " + literal);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Pcre2Code(code);
}

BpeState::BpeState(const BpeModel& model) {
  match_data.assign(model.stages.size(), nullptr);
  for (std::size_t k = 0; k < model.stages.size(); ++k) {
    if (model.stages[k].regex) match_data[k] = pcre2_match_data_create_from_pattern(model.stages[k].regex.get(), nullptr);
  }
  norm_match_data.assign(model.normalizers.size(), nullptr);
  for (std::size_t k = 0; k < model.normalizers.size(); ++k) {
    if (model.normalizers[k].regex) {
      norm_match_data[k] = pcre2_match_data_create_from_pattern(model.normalizers[k].regex.get(), nullptr);
    }
  }
  jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  match_context = pcre2_match_context_create(nullptr);
  if (jit_stack && match_context) pcre2_jit_stack_assign(match_context, nullptr, jit_stack);
  stage_buf.resize(model.stages.size() + 1);
}

BpeState::~BpeState() {
  for (pcre2_match_data* md : match_data) pcre2_match_data_free(md);
  for (pcre2_match_data* md : norm_match_data) pcre2_match_data_free(md);
  pcre2_match_context_free(match_context);
  pcre2_jit_stack_free(jit_stack);
}

}  // namespace zeroshard::text::detail
