// Byte-level BPE tokenizer read from a Hugging Face `tokenizer.json` (the Qwen2 / Qwen2.5 /
// Qwen3, Llama-3 and GPT-2 families, CLIP), producing the same ids as the Hugging Face
// `tokenizers` library (Rust) for every valid UTF-8 text. CLIP's released folder without a
// tokenizer.json (vocab.json + merges.txt, e.g. FLUX.1's tokenizer/) is read through the
// tokenizer.json that transformers' CLIPConverter builds from it (from_vocab_merges), giving
// the ids of transformers' CLIPTokenizerFast.
//
// Pipeline (the order Hugging Face uses):
//  1. Invalid UTF-8 in the input is replaced by U+FFFD (maximal subparts, see text/utf8.h), or
//     rejected with std::invalid_argument when set_invalid_utf8(InvalidUtf8::kThrow).
//     Round trip: decode(encode(x)) == normalized_text(x) for every input x (ByteLevel
//     decoder, no pre-tokenizer that removes text: not CLIP, see Decoding), i.e. == x for
//     every valid UTF-8 x that the normalizer leaves unchanged (for Qwen: x in NFC), exactly as
//     with Hugging Face, whose decode returns the normalized text too. Invalid x gives x with
//     the replacements (what Python's errors='replace' or JavaScript's TextDecoder hand a
//     Hugging Face tokenizer).
//  2. Added tokens with `normalized: false` (all of Qwen's) are split out of the raw text
//     (leftmost-longest match, then lstrip / rstrip / single_word as Hugging Face applies
//     them: lstrip/rstrip absorb Unicode White_Space, single_word needs no \w character on
//     either side, \w being Alphabetic, Mark, Nd, Pc, Join_Control).
//  3. Each remaining piece is normalized (`normalizer`: NFC, NFD, NFKC, NFKD, Replace,
//     Lowercase, a Sequence of them in any order, or null). The Unicode forms go through ICU's
//     Normalizer2 on UTF-8. ICU rather than utf8proc: it is already a dependency of Debian's
//     stack here, it has a UTF-8 quick check (isNormalizedUTF8) so already-normalized text
//     costs one scan and no copy, and it is the library V8/Node use for
//     String.prototype.normalize, so the JavaScript references agree with it by construction.
//     Pure-ASCII/Latin text below U+0300 skips ICU entirely. Replace: every match of its
//     pattern ({"String": s}, or {"Regex": r} compiled as in 5.; a regex that can match the
//     empty string is refused) replaced by `content`; Replace(Regex "\s+", " ") checks
//     pure-ASCII text without PCRE2. Lowercase: each character through Rust's
//     char::to_lowercase as Hugging Face does (ICU's u_tolower, plus U+0130 -> "i" U+0307; no
//     final-sigma rule: "ΟΔΟΣ" -> "οδοσ", where JavaScript's toLowerCase gives "οδος").
//     A normalizer that leaves the text unchanged costs a scan and no copy.
//  4. Added tokens with `normalized: true` are split out of the normalized pieces.
//  5. Pre-tokenizers (`pre_tokenizer`): Split (Regex or String pattern, behavior Isolated or
//     Removed, invert true or false: invert + Removed keeps only the matches, as CLIP's split
//     does; invert + Isolated is Isolated, as in Hugging Face), ByteLevel (add_prefix_space,
//     use_regex = the GPT-2 pattern; must come last), Sequence of these. Regexes run through
//     PCRE2 (UTF + UCP, JIT). The patterns are written for Oniguruma, which Hugging Face uses;
//     the one difference that matters for these families is \s / \S, which Oniguruma defines
//     as Unicode White_Space (it includes U+0085) and PCRE2 10.42 as \p{Z} plus \t\n\v\f\r:
//     \s and \S are rewritten to the explicit White_Space set before compiling. Other
//     Oniguruma-only syntax (\h, \H, \R, \X, \K and \w/\W, \b/\B whose classes differ) is
//     rejected.
//  6. BPE (`model.type == "BPE"`): merges in either serialization ("a b" strings or [a, b]
//     pairs), rank = position; lowest rank merged first, leftmost on ties (equivalent to Hugging
//     Face's priority queue). ignore_merges, byte_fallback (<0xXX> tokens), unk_token with
//     fuse_unk, continuing_subword_prefix / end_of_word_suffix, dropout null or 0. As in Hugging
//     Face's merge_word, end_of_word_suffix is appended to the last character of each word
//     before merging (CLIP: "a</w>"); a whole word is not looked up first (only ignore_merges
//     does that, without the suffix). A character with no token, no byte fallback and no unk
//     token throws (Hugging Face silently drops it).
//  7. Post-processor (only with add_special_tokens = true): ByteLevel (no effect on ids),
//     TemplateProcessing (the `single` template), RobertaProcessing (cls id first, sep id
//     last; its flags only move offsets), Sequence of them, or null.
//
// Decoding: ids -> token strings (added tokens by content; with skip_special_tokens, tokens
// whose `special` flag is set are dropped) -> decoder: ByteLevel (each token's characters
// mapped back to bytes; a token with a character outside the byte alphabet contributes its raw
// UTF-8, as Hugging Face does) or null (tokens joined by a space). decode() replaces invalid
// UTF-8 in the result by U+FFFD as Hugging Face does; decode_bytes() returns the raw bytes
// (for streaming: a multi-byte character may be split across ids). Unknown ids throw.
// CLIP (tokenizer_config.json's tokenizer_class CLIPTokenizer[Fast], or from_vocab_merges):
// as transformers' CLIPTokenizerFast, which wraps the ByteLevel decoder, every
// end_of_word_suffix ("</w>") becomes a space (decode_bytes too), then decode() strips the
// ends as Python's str.strip() and, when tokenizer_config.json sets
// clean_up_tokenization_spaces, applies transformers' clean_up_tokenization (" ." -> ".",
// " ," -> ",", " 's" -> "'s", ...). CLIP's words lose their spacing and case, so decode() gives
// a readable text, not the input or normalized_text().
//
// Anything else in the file (other model types, normalizers, pre-tokenizers, decoders,
// truncation, padding, split behaviors, ...) throws std::invalid_argument naming the file, the
// JSON field path and the value found.
//
// Thread safety: encode() uses per-instance caches and scratch buffers, so one instance must
// not encode from two threads at once. Copies are cheap (the vocabulary and merge tables are
// shared, immutable) and get their own caches: use one copy per thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text {

enum class InvalidUtf8 { kReplace, kThrow };

struct AddedTokenInfo {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

namespace detail {
struct BpeModel;
struct BpeState;
}  // namespace detail

class BpeTokenizer {
 public:
  // Reads `path` (a tokenizer.json) and, when a tokenizer_config.json sits in the same folder,
  // the special tokens it names (eos_token, pad_token, bos_token, unk_token). `path` may be a
  // folder: its tokenizer.json, or without one its vocab.json + merges.txt (from_vocab_merges).
  static BpeTokenizer from_file(const std::string& path);
  // CLIP's released files (CLIPTokenizer's vocab.json + merges.txt, with tokenizer_config.json
  // and special_tokens_map.json read from vocab.json's folder when present): the tokenizer.json
  // transformers' CLIPConverter builds, made in memory (clip_tokenizer_json), then read as
  // from_json reads it. merges.txt is read as CLIPTokenizer reads it: the first line
  // ("#version: 0.2") skipped, "a b" per line, only the first 49152 - 256 - 2 lines after it.
  // Added tokens: tokenizer_config.json's added_tokens_decoder (with its flags), else the
  // special tokens (bos/eos/unk/pad: special_tokens_map.json over tokenizer_config.json over
  // CLIPTokenizer's defaults <|startoftext|>, <|endoftext|>). A tokenizer_class other than
  // CLIPTokenizer[Fast], or without one a vocabulary lacking <|startoftext|>, is refused.
  // Errors name the file (merges.txt with its line number).
  static BpeTokenizer from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
  // That tokenizer.json (serialized) from the files' contents; the configs may be empty.
  static std::string clip_tokenizer_json(std::string_view vocab_json, std::string_view merges_txt,
                                         std::string_view config_json = {},
                                         std::string_view special_tokens_map_json = {},
                                         const std::string& vocab_origin = "vocab.json",
                                         const std::string& merges_origin = "merges.txt");
  // `config_json` may be empty (no tokenizer_config.json). `origin` names the source in errors.
  static BpeTokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                                const std::string& origin = "tokenizer.json");

  BpeTokenizer(const BpeTokenizer& other);
  BpeTokenizer& operator=(const BpeTokenizer& other);
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;
  ~BpeTokenizer();

  std::vector<int32_t> encode(std::string_view utf8, bool add_special_tokens = false);
  // Appends the ids of `utf8` to `out` (no reallocation of a reused vector).
  void encode_append(std::string_view utf8, std::vector<int32_t>& out, bool add_special_tokens = false);

  // The text as the model sees it: invalid UTF-8 replaced, the text between added tokens
  // normalized, added tokens verbatim. decode(encode(x)) returns this.
  std::string normalized_text(std::string_view utf8) const;

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  std::string decode(const int32_t* ids, std::size_t n, bool skip_special_tokens = false) const;
  std::string decode_bytes(const int32_t* ids, std::size_t n, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // added tokens first, as HF
  const std::string& id_to_token(int32_t id) const;                   // throws std::out_of_range
  // One past the largest id of the vocabulary and the added tokens (151,669 for Qwen3; the
  // model's embedding table may be larger).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;  // an added token flagged special
  const std::vector<AddedTokenInfo>& added_tokens() const;

  // From tokenizer_config.json beside tokenizer.json, when present and set.
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> bos_id() const;

  void set_invalid_utf8(InvalidUtf8 mode);
  // Number of U+FFFD substitutions made by encode() since construction.
  std::size_t invalid_utf8_replacements() const;

  // Word-cache statistics (for tests and benchmarks).
  std::size_t cache_entries() const;

 private:
  explicit BpeTokenizer(std::shared_ptr<const detail::BpeModel> model);
  std::shared_ptr<const detail::BpeModel> model_;
  std::unique_ptr<detail::BpeState> state_;
};

}  // namespace zeroshard::text
