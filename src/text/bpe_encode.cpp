// Encoding hot path of BpeTokenizer: added-token split, normalization, pre-tokenization, BPE
// with a word cache. Steady state makes no heap allocation per word or token: every buffer
// lives in BpeState and is reused.
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "text/bpe_internal.h"
#include "text/utf8.h"

namespace zeroshard::text::detail {

namespace {

constexpr std::size_t kMaxCachedWordBytes = 256;  // longer words are rare and not cached
constexpr std::size_t kCacheMaxEntries = 1u << 20;
constexpr std::size_t kCacheMaxKeyBytes = 64u << 20;
constexpr std::size_t kHeapMergeThreshold = 192;  // symbols; above this the O(n log n) merge

inline uint64_t hash_bytes(const char* p, std::size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xC2B2AE3D27D4EB4FULL);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 31;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0x94D049BB133111EBULL;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ULL;
  h ^= h >> 32;
  return h;
}

[[noreturn]] void throw_unknown_symbol(const BpeModel& m, std::string_view word, std::string_view sym) {
  throw std::runtime_error(m.origin + ": the symbol \"" + utf8_escape_for_message(sym) + "\" of the word \"" +
                           utf8_escape_for_message(word) +
                           "\" has no token, and model.byte_fallback / model.unk_token cannot cover it (Hugging Face "
                           "would silently drop it)");
}

// Last code point of s (valid UTF-8, non-empty).
char32_t last_char(std::string_view s) {
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return utf8_decode_valid(s, i);
}

// Hugging Face AddedVocabulary::find_matches, leftmost-longest, then single_word, lstrip,
// rstrip. Calls emit(piece, id) with id = -1 for text between tokens.
template <class Emit>
void split_added(const BpeModel& m, const AddedTokenSet& set, std::string_view s, Emit&& emit) {
  if (!set.any) {
    emit(s, -1);
    return;
  }
  const std::size_t n = s.size();
  std::size_t start_offset = 0, i = 0;
  while (i < n) {
    const auto& cands = set.by_first_byte[static_cast<unsigned char>(s[i])];
    int32_t found = -1;
    for (const int32_t p : cands) {
      const std::string& pat = set.patterns[p];
      if (pat.size() <= n - i && std::memcmp(s.data() + i, pat.data(), pat.size()) == 0) {
        found = p;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    std::size_t start = i, stop = i + set.patterns[found].size();
    i = stop;  // the automaton resumes after the match whether or not it is kept
    const AddedTokenInfo& tok = m.added[set.token_index[found]];
    if (tok.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_char(s.substr(0, start)));
      std::size_t k = stop;
      const bool stop_space = stop == n || !is_word_char(utf8_decode_valid(s, k));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      std::size_t ns = start;
      while (ns > 0) {
        std::size_t b = ns - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        std::size_t k = b;
        if (!is_unicode_white_space(utf8_decode_valid(s, k))) break;
        ns = b;
      }
      start = std::max(ns, start_offset);
    }
    if (tok.rstrip) {
      while (stop < n) {
        std::size_t k = stop;
        if (!is_unicode_white_space(utf8_decode_valid(s, k))) break;
        stop = k;
      }
      i = stop;
    }
    if (start_offset < start) emit(s.substr(start_offset, start - start_offset), -1);
    emit(s.substr(start, stop - start), tok.id);
    start_offset = stop;
  }
  if (start_offset < n) emit(s.substr(start_offset), -1);
}

// Runs `re` over s and emits the pieces of an Isolated (or Removed) split; with only_matches
// (invert + Removed) the matches alone.
template <class Emit>
void regex_split(BpeState& st, std::size_t stage, const pcre2_code* re, bool removed, bool only_matches,
                 std::string_view s, const std::string& origin, Emit&& emit) {
  pcre2_match_data* md = st.match_data[stage];
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  const std::size_t n = s.size();
  std::size_t pos = 0, prev = 0;
  while (pos <= n) {
    const int rc = pcre2_match(re, subject, n, pos, PCRE2_NO_UTF_CHECK, md, st.match_context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw std::runtime_error(origin + ": pre_tokenizer regex failed on \"" + utf8_escape_for_message(s) +
                               "\": " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (b > prev && !only_matches) emit(s.substr(prev, b - prev));
    if (e > b && (!removed || only_matches)) emit(s.substr(b, e - b));
    prev = e;
    if (e == b) {  // empty match: resume one character later, as Oniguruma's find_iter does
      if (e >= n) break;
      pos = e + utf8_lead_length(static_cast<unsigned char>(s[e]));
    } else {
      pos = e;
    }
  }
  if (prev < n && !only_matches) emit(s.substr(prev));
}

void run_stage(const BpeModel& m, BpeState& st, std::size_t k, std::string_view piece, std::vector<int32_t>& out) {
  if (piece.empty()) return;
  if (k == m.stages.size()) {
    bpe_word(m, st, piece, out);
    return;
  }
  const PreTokenizerStage& stage = m.stages[k];
  if (stage.kind == PreTokenizerStage::kByteLevel && stage.add_prefix_space && piece[0] != ' ') {
    std::string& buf = st.stage_buf[k];
    buf.assign(1, ' ');
    buf.append(piece);
    piece = buf;
  }
  if (stage.regex) {
    regex_split(st, k, stage.regex.get(), stage.removed, stage.only_matches, piece, m.origin,
                [&](std::string_view sub) { run_stage(m, st, k + 1, sub, out); });
  } else {
    run_stage(m, st, k + 1, piece, out);
  }
}

// Initial symbols of a word the general way (Hugging Face BPE::merge_word): each character (a
// byte's alphabet character under ByteLevel) with the subword prefix / suffix, then byte
// fallback, then unk (fused or not).
void initial_symbols_general(const BpeModel& m, BpeState& st, std::string_view word) {
  st.symbols.clear();
  int32_t pending_unk = -1;
  std::string sym;
  const std::size_t n = word.size();
  for (std::size_t i = 0; i < n;) {
    const std::size_t len = m.byte_level ? 1 : utf8_lead_length(static_cast<unsigned char>(word[i]));
    sym.clear();
    if (i > 0) sym += m.continuing_subword_prefix;
    if (m.byte_level) {
      sym += m.byte_char[static_cast<unsigned char>(word[i])];
    } else {
      sym.append(word.data() + i, len);
    }
    if (i + len >= n) sym += m.end_of_word_suffix;
    i += len;
    const auto it = m.vocab.find(sym);
    if (it != m.vocab.end()) {
      if (pending_unk >= 0) st.symbols.push_back(pending_unk), pending_unk = -1;
      st.symbols.push_back(it->second);
      continue;
    }
    if (m.byte_fallback) {
      bool all = true;
      for (const char c : sym) all = all && m.byte_fallback_id[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // Hugging Face adds the fallback bytes without flushing a pending unk first.
        for (const char c : sym) st.symbols.push_back(m.byte_fallback_id[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (m.unk_id < 0) throw_unknown_symbol(m, word, sym);
    if (pending_unk >= 0 && !m.fuse_unk) st.symbols.push_back(pending_unk);
    pending_unk = m.unk_id;
  }
  if (pending_unk >= 0) st.symbols.push_back(pending_unk);
}

// Hugging Face's strategy for long words: a min-heap of candidate merges keyed by (rank,
// position), stale entries skipped when popped. Buffers live in BpeState (no allocation once
// they have grown).
void merge_heap(const BpeModel& m, BpeState& st, std::vector<int32_t>& syms) {
  const int n = static_cast<int>(syms.size());
  auto& prev = st.heap_prev;
  auto& next = st.heap_next;
  auto& heap = st.heap;
  prev.resize(n);
  next.resize(n);
  for (int i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  // Min-heap through std::*_heap with "greater" ordering; the key packs (rank, pos) in 64 bits.
  const auto greater = [](const MergeCandidate& x, const MergeCandidate& y) { return x.key > y.key; };
  const auto push = [&](int32_t rank, int pos, int32_t merged) {
    heap.push_back({(uint64_t(uint32_t(rank)) << 32) | uint32_t(pos), merged});
    std::push_heap(heap.begin(), heap.end(), greater);
  };
  heap.clear();
  for (int i = 0; i + 1 < n; ++i) {
    int32_t mid = -1;
    const int32_t r = m.merges.find(syms[i], syms[i + 1], &mid);
    if (r >= 0) heap.push_back({(uint64_t(uint32_t(r)) << 32) | uint32_t(i), mid});
  }
  std::make_heap(heap.begin(), heap.end(), greater);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), greater);
    const MergeCandidate c = heap.back();
    heap.pop_back();
    const int pos = static_cast<int>(uint32_t(c.key));
    const auto rank = static_cast<int32_t>(c.key >> 32);
    if (syms[pos] < 0 || next[pos] < 0) continue;  // merged away, or now the last symbol
    const int r = next[pos];
    int32_t mid = -1;
    if (m.merges.find(syms[pos], syms[r], &mid) != rank || mid != c.merged) continue;  // stale
    syms[pos] = c.merged;
    syms[r] = -1;
    next[pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = pos;
    if (prev[pos] >= 0) {
      const int l = prev[pos];
      const int32_t rr = m.merges.find(syms[l], syms[pos], &mid);
      if (rr >= 0) push(rr, l, mid);
    }
    if (next[pos] >= 0) {
      const int32_t rr = m.merges.find(syms[pos], syms[next[pos]], &mid);
      if (rr >= 0) push(rr, pos, mid);
    }
  }
  int w = 0;
  for (int i = 0; i < n; ++i)
    if (syms[i] >= 0) syms[w++] = syms[i];
  syms.resize(w);
}

// Lowest rank first, leftmost on ties; ranks of neighbours are kept in an array so a merge
// costs one scan and two lookups.
void merge_array(const BpeModel& m, BpeState& st, std::vector<int32_t>& syms) {
  std::size_t n = syms.size();
  if (n < 2) return;
  auto& ranks = st.ranks;
  auto& mids = st.merged_ids;
  ranks.resize(n);
  mids.resize(n);
  for (std::size_t i = 0; i + 1 < n; ++i) ranks[i] = m.merges.find(syms[i], syms[i + 1], &mids[i]);
  ranks[n - 1] = -1;
  while (n > 1) {
    uint32_t best_rank = std::numeric_limits<uint32_t>::max();
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const auto r = static_cast<uint32_t>(ranks[i]);  // -1 becomes the largest value
      if (r < best_rank) best_rank = r, best = i;
    }
    if (best_rank == std::numeric_limits<uint32_t>::max()) break;
    syms[best] = mids[best];
    for (std::size_t i = best + 1; i + 1 < n; ++i) {
      syms[i] = syms[i + 1];
      ranks[i] = ranks[i + 1];
      mids[i] = mids[i + 1];
    }
    --n;
    if (best > 0) ranks[best - 1] = m.merges.find(syms[best - 1], syms[best], &mids[best - 1]);
    ranks[best] = best + 1 < n ? m.merges.find(syms[best], syms[best + 1], &mids[best]) : -1;
  }
  syms.resize(n);
}

}  // namespace

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL);
}

bool lowercase_text(std::string_view in, std::string& out) {
  const std::size_t n = in.size();
  std::size_t i = 0;
  // Find the first character that changes; text without one costs this scan only.
  for (; i < n;) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b < 0x80) {
      if (b >= 'A' && b <= 'Z') break;
      ++i;
      continue;
    }
    std::size_t k = i;
    const char32_t c = utf8_decode_valid(in, k);
    if (c == 0x130 || static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))) != c) break;
    i = k;
  }
  if (i == n) return false;
  out.assign(in.data(), i);
  out.reserve(n + 8);
  while (i < n) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b < 0x80) {
      out.push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b + 32) : static_cast<char>(b));
      ++i;
      continue;
    }
    const char32_t c = utf8_decode_valid(in, i);
    if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      out += "i\xCC\x87";
    } else {
      utf8_append(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))), out);
    }
  }
  return true;
}

namespace {

inline bool ascii_space(unsigned char b) { return b == ' ' || (b >= '\t' && b <= '\r'); }

// Replace(Regex "\s+", " ") on pure-ASCII text: \s is then [\t-\r ].
bool collapse_ascii_whitespace(std::string_view in, std::string& out) {
  const std::size_t n = in.size();
  std::size_t i = 0;
  for (; i < n; ++i) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b != ' ' && ascii_space(b)) break;
    if (b == ' ' && i + 1 < n && ascii_space(static_cast<unsigned char>(in[i + 1]))) break;
  }
  if (i == n) return false;
  out.assign(in.data(), i);
  while (i < n) {
    if (ascii_space(static_cast<unsigned char>(in[i]))) {
      out.push_back(' ');
      while (i < n && ascii_space(static_cast<unsigned char>(in[i]))) ++i;
    } else {
      out.push_back(in[i++]);
    }
  }
  return true;
}

// Hugging Face's Replace: every match of the pattern replaced by `content`, leftmost first,
// not overlapping (loading refuses regexes that can match the empty string). Builds `out` only
// from the first match that is not already `content`.
bool replace_text(const NormalizerStep& step, BpeState* st, std::size_t k, std::string_view in, std::string& out,
                  const std::string& origin) {
  const std::size_t n = in.size();
  bool building = false;
  std::size_t copied = 0;  // in[0, copied) is in `out` (once building)
  auto on_match = [&](std::size_t b, std::size_t e) {
    if (!building) {
      if (in.substr(b, e - b) == step.content) return;
      out.assign(in.data(), b);
      building = true;
    } else {
      out.append(in.data() + copied, b - copied);
    }
    out += step.content;
    copied = e;
  };
  if (!step.regex) {
    if (step.literal.empty()) return false;
    for (std::size_t pos = in.find(step.literal); pos != std::string_view::npos;
         pos = in.find(step.literal, pos + step.literal.size())) {
      on_match(pos, pos + step.literal.size());
    }
  } else {
    pcre2_match_data* md = st ? st->norm_match_data[k] : nullptr;
    pcre2_match_data* own = nullptr;
    if (!md) md = own = pcre2_match_data_create_from_pattern(step.regex.get(), nullptr);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(in.data());
    std::size_t pos = 0;
    while (pos < n) {
      const int rc = pcre2_match(step.regex.get(), subject, n, pos, PCRE2_NO_UTF_CHECK, md, st ? st->match_context : nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(own);
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        throw std::runtime_error(origin + ": normalizer Replace regex failed on \"" + utf8_escape_for_message(in) +
                                 "\": " + reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const std::size_t b = ov[0], e = ov[1];
      if (e <= b) break;  // cannot happen (no empty matches), but never loop
      on_match(b, e);
      pos = e;
    }
    pcre2_match_data_free(own);
  }
  if (!building) return false;
  out.append(in.data() + copied, n - copied);
  return true;
}

unsigned char max_byte_of(std::string_view s) {
  unsigned char m = 0;
  for (const char c : s) m = std::max(m, static_cast<unsigned char>(c));
  return m;
}

}  // namespace

bool normalize_text(const BpeModel& m, BpeState* st, std::string_view in, std::string& out) {
  std::string_view cur = in;
  std::string tmp, result;
  bool changed = false;
  unsigned char max_byte = max_byte_of(in);
  for (std::size_t k = 0; k < m.normalizers.size(); ++k) {
    const NormalizerStep& step = m.normalizers[k];
    result.clear();
    bool step_changed = false;
    if (step.kind == NormalizerStep::kLowercase) {
      step_changed = lowercase_text(cur, result);
    } else if (step.kind == NormalizerStep::kReplace) {
      step_changed = step.collapse_ws && max_byte < 0x80 ? collapse_ascii_whitespace(cur, result)
                                                         : replace_text(step, st, k, cur, result, m.origin);
    } else {
      if (max_byte < 0x80) continue;  // ASCII is invariant under all four forms
      if (step.kind == NormalizerStep::kNFC && max_byte < 0xCC) continue;  // all code points < U+0300
      UErrorCode err = U_ZERO_ERROR;
      const icu::Normalizer2* norm = nullptr;
      switch (step.kind) {
        case NormalizerStep::kNFD: norm = icu::Normalizer2::getNFDInstance(err); break;
        case NormalizerStep::kNFKC: norm = icu::Normalizer2::getNFKCInstance(err); break;
        case NormalizerStep::kNFKD: norm = icu::Normalizer2::getNFKDInstance(err); break;
        default: norm = icu::Normalizer2::getNFCInstance(err); break;
      }
      if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalizer unavailable: ") + u_errorName(err));
      const icu::StringPiece sp(cur.data(), static_cast<int32_t>(cur.size()));
      if (norm->isNormalizedUTF8(sp, err) && U_SUCCESS(err)) continue;
      err = U_ZERO_ERROR;
      icu::StringByteSink<std::string> sink(&result, static_cast<int32_t>(cur.size() + 16));
      norm->normalizeUTF8(0, sp, sink, nullptr, err);
      if (U_FAILURE(err)) throw std::runtime_error(std::string("ICU normalization failed: ") + u_errorName(err));
      step_changed = true;
    }
    if (!step_changed) continue;
    tmp.swap(result);
    cur = tmp;
    changed = true;
    max_byte = max_byte_of(cur);
  }
  if (changed) out = std::move(tmp);
  return changed;
}

void bpe_merge_reference(const BpeModel& m, std::vector<int32_t>& syms) {
  for (;;) {
    int32_t best_rank = -1, best_mid = -1;
    std::size_t best = 0;
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      int32_t mid = -1;
      const int32_t r = m.merges.find(syms[i], syms[i + 1], &mid);
      if (r >= 0 && (best_rank < 0 || r < best_rank)) best_rank = r, best = i, best_mid = mid;
    }
    if (best_rank < 0) return;
    syms[best] = best_mid;
    syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

void bpe_word(const BpeModel& m, BpeState& st, std::string_view word, std::vector<int32_t>& out) {
  const bool cacheable = word.size() < kMaxCachedWordBytes;
  uint64_t h = 0;
  if (cacheable) {
    h = hash_bytes(word.data(), word.size());
    uint32_t cnt;
    if (const int32_t* ids = st.cache.find(word, h, &cnt)) {
      out.insert(out.end(), ids, ids + cnt);
      return;
    }
  }
  auto& syms = st.symbols;
  bool done = false;
  if (m.ignore_merges) {
    std::string& key = st.stage_buf.back();
    if (m.byte_level) {
      key.clear();
      for (const char c : word) key += m.byte_char[static_cast<unsigned char>(c)];
    } else {
      key.assign(word);
    }
    const auto it = m.vocab.find(key);
    if (it != m.vocab.end()) {
      syms.assign(1, it->second);
      done = true;
    }
  }
  if (!done) {
    bool fast = m.fast_initial;
    if (fast) {
      const std::size_t n = word.size();
      syms.resize(n);
      for (std::size_t i = 0; i < n; ++i) {
        const auto b = static_cast<unsigned char>(word[i]);
        const int32_t id = i + 1 < n ? m.byte_id[b] : m.byte_last_id[b];
        if (id < 0) {
          fast = false;
          break;
        }
        syms[i] = id;
      }
    }
    if (!fast) initial_symbols_general(m, st, word);
    if (syms.size() > kHeapMergeThreshold) {
      merge_heap(m, st, syms);
    } else {
      merge_array(m, st, syms);
    }
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    if (st.cache.size() >= kCacheMaxEntries) st.cache.clear();
    st.cache.insert(word, h, syms.data(), static_cast<uint32_t>(syms.size()));
  }
}

void encode_text(const BpeModel& m, BpeState& st, std::string_view text, std::vector<int32_t>& out) {
  const std::size_t bad = utf8_first_invalid(text);
  if (bad != text.size()) {
    if (st.invalid_mode == InvalidUtf8::kThrow) {
      throw std::invalid_argument(m.origin + ": encode input is not valid UTF-8 at byte " + std::to_string(bad) +
                                  " (near \"" + utf8_escape_for_message(text.substr(bad, 8)) + "\")");
    }
    st.valid_buf.clear();
    st.replacements += utf8_append_replacing_invalid(text, st.valid_buf);
    text = st.valid_buf;
  }
  auto pretokenize = [&](std::string_view piece) { run_stage(m, st, 0, piece, out); };
  split_added(m, m.raw_added, text, [&](std::string_view piece, int32_t id) {
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    std::string_view norm = piece;
    if (!m.normalizers.empty() && normalize_text(m, &st, piece, st.norm_buf)) norm = st.norm_buf;
    split_added(m, m.normalized_added, norm, [&](std::string_view sub, int32_t sid) {
      if (sid >= 0) {
        out.push_back(sid);
      } else {
        pretokenize(sub);
      }
    });
  });
}

std::string normalized_text(const BpeModel& m, std::string_view text) {
  std::string valid, out, norm;
  if (!utf8_is_valid(text)) {
    utf8_append_replacing_invalid(text, valid);
    text = valid;
  }
  split_added(m, m.raw_added, text, [&](std::string_view piece, int32_t id) {
    if (id >= 0 || m.normalizers.empty() || !normalize_text(m, nullptr, piece, norm)) {
      out.append(piece);
    } else {
      out.append(norm);
    }
  });
  return out;
}

// ---- MergeMap ------------------------------------------------------------------------------

void MergeMap::reserve(std::size_t n) {
  std::size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  size_ = 0;
}

bool MergeMap::insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<std::size_t>(16, old.size()));
    for (const Slot& s : old)
      if (s.rank >= 0) insert(int32_t(s.key >> 32), int32_t(uint32_t(s.key)), s.rank, s.merged);
  }
  const uint64_t key = (uint64_t(uint32_t(a)) << 32) | uint32_t(b);
  std::size_t i = hash(key) & mask_;
  for (;;) {
    Slot& s = slots_[i];
    if (s.rank < 0) {
      s.key = key, s.rank = rank, s.merged = merged;
      ++size_;
      return true;
    }
    if (s.key == key) return false;
    i = (i + 1) & mask_;
  }
}

// ---- WordCache -----------------------------------------------------------------------------

const int32_t* WordCache::find(std::string_view word, uint64_t h, uint32_t* n) const {
  if (slots_.empty()) return nullptr;
  std::size_t i = h & mask_;
  for (;;) {
    const Slot& s = slots_[i];
    if (!s.used) return nullptr;
    if (s.hash == h && s.key_len == word.size() && std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
      *n = s.val_len;
      return values_.data() + s.val_off;
    }
    i = (i + 1) & mask_;
  }
}

void WordCache::insert(std::string_view word, uint64_t h, const int32_t* ids, uint32_t n) {
  if (keys_.size() + word.size() > kCacheMaxKeyBytes) clear();
  if ((size_ + 1) * 2 > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    const std::size_t cap = std::max<std::size_t>(4096, old.size() * 2);
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    for (const Slot& s : old) {
      if (!s.used) continue;
      std::size_t i = s.hash & mask_;
      while (slots_[i].used) i = (i + 1) & mask_;
      slots_[i] = s;
    }
  }
  std::size_t i = h & mask_;
  while (slots_[i].used) i = (i + 1) & mask_;
  Slot& s = slots_[i];
  s.used = true;
  s.hash = h;
  s.key_off = static_cast<uint32_t>(keys_.size());
  s.key_len = static_cast<uint32_t>(word.size());
  s.val_off = static_cast<uint32_t>(values_.size());
  s.val_len = n;
  keys_.append(word);
  values_.insert(values_.end(), ids, ids + n);
  ++size_;
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  size_ = 0;
  keys_.clear();
  values_.clear();
}

}  // namespace zeroshard::text::detail
