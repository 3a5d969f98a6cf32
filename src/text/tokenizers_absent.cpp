// text/bpe_tokenizer.h and text/sentencepiece_tokenizer.h in a build without PCRE2 and ICU
// (ZEROSHARD_WITH_TOKENIZERS=OFF; bpe_*.cpp and sentencepiece_tokenizer.cpp are the real ones):
// loading a tokenizer refuses, naming its file and the CMake option. No tokenizer object can
// exist, so the other members are never reached.
#include "text/bpe_tokenizer.h"
#include "text/sentencepiece_tokenizer.h"

#include "util/optional_parts.h"

namespace zeroshard::text {

namespace detail {
struct BpeModel {};
struct BpeState {};
}  // namespace detail

namespace {
[[noreturn]] void refuse(const std::string& what) {
  util::require_part(util::OptionalPart::kTokenizers, what);
  throw std::logic_error("unreachable: " + what);  // require_part throws in this build
}
const std::string kNone;
const std::vector<AddedTokenInfo> kNoTokens;
}  // namespace

BpeTokenizer BpeTokenizer::from_file(const std::string& path) { refuse("the tokenizer " + path); }
BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json, const std::string&) {
  refuse("the tokenizer " + vocab_json);
}
std::string BpeTokenizer::clip_tokenizer_json(std::string_view, std::string_view, std::string_view, std::string_view,
                                              const std::string& vocab_origin, const std::string&) {
  refuse("the tokenizer " + vocab_origin);
}
BpeTokenizer BpeTokenizer::from_json(std::string_view, std::string_view, const std::string& origin) {
  refuse("the tokenizer " + origin);
}
BpeTokenizer::BpeTokenizer(std::shared_ptr<const detail::BpeModel> model) : model_(std::move(model)) {}
BpeTokenizer::BpeTokenizer(const BpeTokenizer& other) : model_(other.model_) {}
BpeTokenizer& BpeTokenizer::operator=(const BpeTokenizer& other) {
  model_ = other.model_;
  return *this;
}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;
std::vector<int32_t> BpeTokenizer::encode(std::string_view, bool) { return {}; }
void BpeTokenizer::encode_append(std::string_view, std::vector<int32_t>&, bool) {}
std::string BpeTokenizer::normalized_text(std::string_view) const { return {}; }
std::string BpeTokenizer::decode(const std::vector<int32_t>&, bool) const { return {}; }
std::string BpeTokenizer::decode(const int32_t*, std::size_t, bool) const { return {}; }
std::string BpeTokenizer::decode_bytes(const int32_t*, std::size_t, bool) const { return {}; }
std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view) const { return std::nullopt; }
const std::string& BpeTokenizer::id_to_token(int32_t) const { return kNone; }
int32_t BpeTokenizer::vocab_size() const { return 0; }
bool BpeTokenizer::is_special(int32_t) const { return false; }
const std::vector<AddedTokenInfo>& BpeTokenizer::added_tokens() const { return kNoTokens; }
std::optional<int32_t> BpeTokenizer::eos_id() const { return std::nullopt; }
std::optional<int32_t> BpeTokenizer::pad_id() const { return std::nullopt; }
std::optional<int32_t> BpeTokenizer::bos_id() const { return std::nullopt; }
void BpeTokenizer::set_invalid_utf8(InvalidUtf8) {}
std::size_t BpeTokenizer::invalid_utf8_replacements() const { return 0; }
std::size_t BpeTokenizer::cache_entries() const { return 0; }

std::string html_unescape(std::string_view) { refuse("html_unescape (the umT5 prompt cleaning)"); }
std::string clean_whitespace(std::string_view) { refuse("clean_whitespace (the umT5 prompt cleaning)"); }

struct SentencePieceTokenizer::Handle {};
SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& model_path) {
  refuse("the SentencePiece model " + model_path + " (read with -DZEROSHARD_WITH_SENTENCEPIECE=ON as well)");
}
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;
std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view) const { return {}; }
PaddedIds SentencePieceTokenizer::encode_padded(std::string_view, int32_t, bool) const { return {}; }
std::string SentencePieceTokenizer::decode(const std::vector<int32_t>&) const { return {}; }
int32_t SentencePieceTokenizer::vocab_size() const { return 0; }
std::string SentencePieceTokenizer::id_to_piece(int32_t) const { return {}; }

}  // namespace zeroshard::text
