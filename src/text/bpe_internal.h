// Internal tables of BpeTokenizer, shared by bpe_tokenizer.cpp (loading, decoding) and
// bpe_encode.cpp (the encoding hot path). Not part of the public API.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe_tokenizer.h"

namespace zeroshard::text::detail {

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;

// Translates an Oniguruma pattern (as tokenizer.json carries it) to PCRE2 syntax and compiles
// it with UTF | UCP and JIT. `field` names the JSON path for errors.
Pcre2Code compile_onig_pattern(const std::string& pattern, const std::string& field);
Pcre2Code compile_literal_pattern(const std::string& literal, const std::string& field);

// One normalizer of the chain (`normalizer`, Sequence flattened), applied in order.
struct NormalizerStep {
  enum Kind { kNFC, kNFD, kNFKC, kNFKD, kReplace, kLowercase } kind = kNFC;
  Pcre2Code regex;          // Replace with {"Regex": ...}
  std::string literal;      // Replace with {"String": ...} (empty: matches nothing, as in HF)
  std::string content;      // Replace's replacement
  bool collapse_ws = false;  // Replace(Regex "\\s+", " "): pure-ASCII text is checked without PCRE2
};

struct PreTokenizerStage {
  enum Kind { kSplit, kByteLevel } kind = kSplit;
  Pcre2Code regex;            // Split pattern, or the GPT-2 pattern of ByteLevel(use_regex)
  bool removed = false;       // Split behavior "Removed" (else "Isolated")
  bool only_matches = false;  // Split invert + Removed: keep the matches, drop the text between
  bool add_prefix_space = false;  // ByteLevel
};

// Open-addressing map (id_a, id_b) -> (rank, merged id).
class MergeMap {
 public:
  void reserve(std::size_t n);
  // Returns false when the pair was already present (first rank wins, as in Hugging Face).
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t merged);
  // rank or -1; `merged` receives the merged id.
  inline int32_t find(int32_t a, int32_t b, int32_t* merged) const {
    const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
    std::size_t i = hash(key) & mask_;
    for (;;) {
      const Slot& s = slots_[i];
      if (s.rank < 0) return -1;
      if (s.key == key) {
        *merged = s.merged;
        return s.rank;
      }
      i = (i + 1) & mask_;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t rank = -1;
    int32_t merged = -1;
  };
  static inline uint64_t hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// Added tokens matched on the raw text (normalized == false) or on the normalized text.
struct AddedTokenSet {
  std::vector<int32_t> by_first_byte[256];  // indices into BpeModel::added, longest first
  bool any = false;
  // The content each index matches on (the token's content, normalized for the second set).
  std::vector<std::string> patterns;
  std::vector<int32_t> token_index;  // pattern i -> BpeModel::added index
};

struct BpeModel {
  std::string origin;  // file name for error messages

  // Vocabulary: id -> token string; kind 0 = no token with this id, 1 = model, 2 = added.
  // Sized once at load: `vocab` and `added_vocab` hold views into model_token / added.
  std::vector<std::string> id_to_token;  // added token content where an added token has the id
  std::vector<std::string> model_token;  // the model vocabulary's token ("" where none)
  std::vector<uint8_t> id_kind;
  std::vector<uint8_t> id_special;
  std::unordered_map<std::string_view, int32_t> vocab;        // model vocabulary
  std::unordered_map<std::string_view, int32_t> added_vocab;  // added tokens by content
  std::vector<AddedTokenInfo> added;
  AddedTokenSet raw_added, normalized_added;

  MergeMap merges;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::string continuing_subword_prefix, end_of_word_suffix;
  std::array<int32_t, 256> byte_fallback_id{};  // <0xXX> ids or -1

  std::vector<NormalizerStep> normalizers;
  std::vector<PreTokenizerStage> stages;
  bool byte_level = false;  // a ByteLevel pre-tokenizer maps bytes to its alphabet
  // ByteLevel alphabet: byte -> its character (UTF-8) and the id of that one-character token.
  std::array<std::string, 256> byte_char;
  std::array<int32_t, 256> byte_id{};
  // The id of a byte's character + end_of_word_suffix (the last symbol of a word; == byte_id
  // without a suffix), or -1.
  std::array<int32_t, 256> byte_last_id{};
  bool fast_initial = false;  // byte_level, no prefix: byte_id / byte_last_id give initial symbols

  // Post-processor (add_special_tokens = true): ids before and after the sequence.
  std::vector<int32_t> template_prefix, template_suffix;

  enum class Decoder { kByteLevel, kNone } decoder = Decoder::kByteLevel;
  // transformers' CLIPTokenizerFast wraps the decoder: end_of_word_suffix -> " ", then Python's
  // str.strip(); then clean_up_tokenization when the config sets clean_up_tokenization_spaces.
  bool clip_decode = false;
  bool cleanup_spaces = false;
  // Per id, the bytes the decoder produces for it (ByteLevel), as offsets into decoded_arena.
  std::string decoded_arena;
  std::vector<uint32_t> decoded_offset;  // size vocab_size + 1

  std::optional<int32_t> eos_id, pad_id, bos_id;
};

// Per-instance mutable state: caches and scratch buffers (see the header's thread-safety note).
class WordCache {
 public:
  // Returns a pointer to the cached ids of `word` and their count, or nullptr.
  const int32_t* find(std::string_view word, uint64_t h, uint32_t* n) const;
  void insert(std::string_view word, uint64_t h, const int32_t* ids, uint32_t n);
  std::size_t size() const { return size_; }
  void clear();

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0, key_len = 0;
    uint32_t val_off = 0, val_len = 0;
    bool used = false;
  };
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
  std::string keys_;
  std::vector<int32_t> values_;
};

struct MergeCandidate {
  uint64_t key;  // rank << 32 | position
  int32_t merged;
};

struct BpeState {
  InvalidUtf8 invalid_mode = InvalidUtf8::kReplace;
  std::size_t replacements = 0;
  std::vector<pcre2_match_data*> match_data;  // one per stage (nullptr when unused)
  std::vector<pcre2_match_data*> norm_match_data;  // one per normalizer step (Replace with a regex)
  pcre2_match_context* match_context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  WordCache cache;
  std::string valid_buf, norm_buf;
  std::vector<std::string> stage_buf;  // ByteLevel add_prefix_space copies, one per stage
  std::vector<int32_t> symbols, ranks, merged_ids, word_ids;
  std::vector<int> heap_prev, heap_next;  // merge_heap's linked list
  std::vector<MergeCandidate> heap;

  explicit BpeState(const BpeModel& model);
  ~BpeState();
  BpeState(const BpeState&) = delete;
  BpeState& operator=(const BpeState&) = delete;
};

// Encodes into `out` (appending). Defined in bpe_encode.cpp.
void encode_text(const BpeModel& m, BpeState& st, std::string_view text, std::vector<int32_t>& out);

// BpeTokenizer::normalized_text (bpe_encode.cpp).
std::string normalized_text(const BpeModel& m, std::string_view text);

// BPE of one pre-tokenized word, appending ids. Exposed for the unit test that compares the
// two merge strategies.
void bpe_word(const BpeModel& m, BpeState& st, std::string_view word, std::vector<int32_t>& out);
void bpe_merge_reference(const BpeModel& m, std::vector<int32_t>& symbols);  // simple O(n^2) loop

// Unicode helpers from ICU (bpe_encode.cpp; White_Space is text/utf8.h's is_unicode_white_space).
bool is_word_char(char32_t c);  // Rust regex \w: Alphabetic, Mark, Nd, Pc, Join_Control
// Normalizes `in` (valid UTF-8) through m.normalizers; returns false (and leaves `out`
// untouched) when the chain leaves `in` unchanged. `st` supplies the regex match buffers; null
// (loading, normalized_text) allocates them per call.
bool normalize_text(const BpeModel& m, BpeState* st, std::string_view in, std::string& out);
// Hugging Face's Lowercase: each character through Rust's char::to_lowercase (the
// unconditional full mapping: UnicodeData's simple mapping, and U+0130 -> "i\u0307"; no
// final-sigma context, unlike str::to_lowercase and JavaScript's toLowerCase).
bool lowercase_text(std::string_view in, std::string& out);

}  // namespace zeroshard::text::detail
