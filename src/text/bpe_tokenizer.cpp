// Loading (tokenizer.json, tokenizer_config.json), decoding and accessors of BpeTokenizer.
// The encoding hot path is in bpe_encode.cpp.
#include "text/bpe_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "text/bpe_internal.h"
#include "text/utf8.h"

namespace zeroshard::text {

namespace detail {

namespace {

using nlohmann::json;

// The pattern ByteLevel(use_regex = true) applies (GPT-2's).
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

[[noreturn]] void fail(const std::string& origin, const std::string& field, const std::string& what) {
  throw std::invalid_argument(origin + ": " + field + ": " + what);
}

std::string dump_short(const json& v) {
  std::string s = v.dump();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

[[noreturn]] void unsupported(const std::string& origin, const std::string& field, const json& value,
                              const std::string& supported) {
  fail(origin, field, "unsupported value " + dump_short(value) + " (supported: " + supported + ")");
}

void check_keys(const std::string& origin, const std::string& field, const json& obj,
                const std::set<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!allowed.count(it.key())) {
      fail(origin, field + "." + it.key(), "unsupported option with value " + dump_short(it.value()));
    }
  }
}

bool get_bool(const std::string& origin, const std::string& field, const json& obj, const char* key, bool dflt) {
  if (!obj.contains(key) || obj.at(key).is_null()) return dflt;
  if (!obj.at(key).is_boolean()) fail(origin, field + "." + key, "expected a boolean, got " + dump_short(obj.at(key)));
  return obj.at(key).get<bool>();
}

std::string get_string_or_empty(const std::string& origin, const std::string& field, const json& obj, const char* key) {
  if (!obj.contains(key) || obj.at(key).is_null()) return {};
  if (!obj.at(key).is_string()) fail(origin, field + "." + key, "expected a string, got " + dump_short(obj.at(key)));
  return obj.at(key).get<std::string>();
}

std::string type_of(const std::string& origin, const std::string& field, const json& obj) {
  if (!obj.is_object() || !obj.contains("type") || !obj.at("type").is_string()) {
    fail(origin, field + ".type", "expected an object with a string \"type\", got " + dump_short(obj));
  }
  return obj.at("type").get<std::string>();
}

// GPT-2's reversible byte -> printable character table.
void build_byte_alphabet(std::array<std::string, 256>& out) {
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    const char32_t cp = printable ? char32_t(b) : char32_t(256 + extra++);
    out[b].clear();
    utf8_append(cp, out[b]);
  }
}

void parse_normalizer(BpeModel& m, const json& j, const std::string& field) {
  if (j.is_null()) return;
  const std::string type = type_of(m.origin, field, j);
  if (type == "Sequence") {
    check_keys(m.origin, field, j, {"type", "normalizers"});
    const json& list = j.at("normalizers");
    for (std::size_t i = 0; i < list.size(); ++i) parse_normalizer(m, list[i], field + ".normalizers[" + std::to_string(i) + "]");
    return;
  }
  NormalizerStep step;
  if (type == "Replace") {
    check_keys(m.origin, field, j, {"type", "pattern", "content"});
    step.kind = NormalizerStep::kReplace;
    const json& pat = j.at("pattern");
    if (pat.is_object() && pat.contains("Regex") && pat.at("Regex").is_string()) {
      const std::string re = pat.at("Regex").get<std::string>();
      step.regex = compile_onig_pattern(re, m.origin + ": " + field + ".pattern.Regex");
      uint32_t min_length = 0;
      pcre2_pattern_info(step.regex.get(), PCRE2_INFO_MINLENGTH, &min_length);
      if (min_length == 0) {
        // Hugging Face's replacement at empty matches is irregular (two insertions at the
        // start of the text): refuse rather than disagree.
        fail(m.origin, field + ".pattern.Regex", "the pattern " + dump_short(pat.at("Regex")) +
                                                     " can match the empty string, which is not supported in Replace");
      }
      step.collapse_ws = re == "\\s+";
    } else if (pat.is_object() && pat.contains("String") && pat.at("String").is_string()) {
      step.literal = pat.at("String").get<std::string>();
    } else {
      unsupported(m.origin, field + ".pattern", pat, "{\"Regex\": ...}, {\"String\": ...}");
    }
    if (!j.at("content").is_string()) fail(m.origin, field + ".content", "expected a string, got " + dump_short(j.at("content")));
    step.content = j.at("content").get<std::string>();
    step.collapse_ws = step.collapse_ws && step.content == " ";
    m.normalizers.push_back(std::move(step));
    return;
  }
  check_keys(m.origin, field, j, {"type"});
  if (type == "NFC") step.kind = NormalizerStep::kNFC;
  else if (type == "NFD") step.kind = NormalizerStep::kNFD;
  else if (type == "NFKC") step.kind = NormalizerStep::kNFKC;
  else if (type == "NFKD") step.kind = NormalizerStep::kNFKD;
  else if (type == "Lowercase") step.kind = NormalizerStep::kLowercase;
  else unsupported(m.origin, field + ".type", j.at("type"), "NFC, NFD, NFKC, NFKD, Replace, Lowercase, Sequence, null");
  m.normalizers.push_back(std::move(step));
}

void parse_pre_tokenizer(BpeModel& m, const json& j, const std::string& field) {
  if (j.is_null()) return;
  const std::string type = type_of(m.origin, field, j);
  if (type == "Sequence") {
    check_keys(m.origin, field, j, {"type", "pretokenizers"});
    const json& list = j.at("pretokenizers");
    for (std::size_t i = 0; i < list.size(); ++i) {
      parse_pre_tokenizer(m, list[i], field + ".pretokenizers[" + std::to_string(i) + "]");
    }
    return;
  }
  if (m.byte_level) {
    fail(m.origin, field, "a " + type + " pre-tokenizer after ByteLevel is not supported (ByteLevel must come last)");
  }
  PreTokenizerStage stage;
  if (type == "Split") {
    check_keys(m.origin, field, j, {"type", "pattern", "behavior", "invert"});
    stage.kind = PreTokenizerStage::kSplit;
    const json& pat = j.at("pattern");
    if (pat.is_object() && pat.contains("Regex")) {
      stage.regex = compile_onig_pattern(pat.at("Regex").get<std::string>(), m.origin + ": " + field + ".pattern.Regex");
    } else if (pat.is_object() && pat.contains("String")) {
      stage.regex = compile_literal_pattern(pat.at("String").get<std::string>(), m.origin + ": " + field + ".pattern.String");
    } else {
      unsupported(m.origin, field + ".pattern", pat, "{\"Regex\": ...}, {\"String\": ...}");
    }
    const json& behavior = j.at("behavior");
    if (behavior == "Isolated") stage.removed = false;
    else if (behavior == "Removed") stage.removed = true;
    else unsupported(m.origin, field + ".behavior", behavior, "Isolated, Removed");
    // invert flips which parts count as matches: with Removed only the matches stay; with
    // Isolated every part stays either way (Hugging Face ignores the flag there).
    stage.only_matches = get_bool(m.origin, field, j, "invert", false) && stage.removed;
  } else if (type == "ByteLevel") {
    check_keys(m.origin, field, j, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    stage.kind = PreTokenizerStage::kByteLevel;
    stage.add_prefix_space = get_bool(m.origin, field, j, "add_prefix_space", true);
    if (get_bool(m.origin, field, j, "use_regex", true)) {
      stage.regex = compile_onig_pattern(kGpt2Pattern, m.origin + ": " + field + " (ByteLevel regex)");
    }
    m.byte_level = true;  // trim_offsets only affects offsets, which we do not produce
  } else {
    unsupported(m.origin, field + ".type", j.at("type"), "Split, ByteLevel, Sequence, null");
  }
  m.stages.push_back(std::move(stage));
}

void parse_post_processor(BpeModel& m, const json& j, const std::string& field) {
  if (j.is_null()) return;
  const std::string type = type_of(m.origin, field, j);
  if (type == "Sequence") {
    check_keys(m.origin, field, j, {"type", "processors"});
    const json& list = j.at("processors");
    for (std::size_t i = 0; i < list.size(); ++i) parse_post_processor(m, list[i], field + ".processors[" + std::to_string(i) + "]");
  } else if (type == "ByteLevel") {
    check_keys(m.origin, field, j, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  } else if (type == "TemplateProcessing") {
    check_keys(m.origin, field, j, {"type", "single", "pair", "special_tokens"});
    const json& single = j.at("single");
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single.size(); ++i) {
      const std::string f = field + ".single[" + std::to_string(i) + "]";
      const json& item = single[i];
      if (item.contains("Sequence")) {
        if (item.at("Sequence").at("id") != "A") unsupported(m.origin, f + ".Sequence.id", item.at("Sequence").at("id"), "A");
        seen_sequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        const json& specials = j.at("special_tokens");
        if (!specials.contains(name)) fail(m.origin, f + ".SpecialToken.id", "\"" + name + "\" is not in special_tokens");
        for (const json& id : specials.at(name).at("ids")) {
          (seen_sequence ? m.template_suffix : m.template_prefix).push_back(id.get<int32_t>());
        }
      } else {
        unsupported(m.origin, f, item, "Sequence, SpecialToken");
      }
    }
  } else if (type == "RobertaProcessing") {
    check_keys(m.origin, field, j, {"type", "sep", "cls", "trim_offsets", "add_prefix_space"});
    // Wraps what it is given: cls first, sep last (the flags only move offsets).
    auto id_of = [&](const char* key) -> int32_t {
      const json& v = j.at(key);
      if (!v.is_array() || v.size() != 2 || !v[0].is_string() || !v[1].is_number_integer() || v[1].get<int64_t>() < 0 ||
          v[1].get<int64_t>() >= static_cast<int64_t>(m.id_to_token.size())) {
        fail(m.origin, field + "." + key, "expected [\"token\", id] with an id of the vocabulary, got " + dump_short(v));
      }
      return v[1].get<int32_t>();
    };
    m.template_prefix.insert(m.template_prefix.begin(), id_of("cls"));
    m.template_suffix.push_back(id_of("sep"));
  } else {
    unsupported(m.origin, field + ".type", j.at("type"), "ByteLevel, TemplateProcessing, RobertaProcessing, Sequence, null");
  }
}

void parse_decoder(BpeModel& m, const json& j, const std::string& field) {
  if (j.is_null()) {
    m.decoder = BpeModel::Decoder::kNone;
    return;
  }
  const std::string type = type_of(m.origin, field, j);
  if (type != "ByteLevel") unsupported(m.origin, field + ".type", j.at("type"), "ByteLevel, null");
  check_keys(m.origin, field, j, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  m.decoder = BpeModel::Decoder::kByteLevel;
}

void set_id(BpeModel& m, int32_t id, const std::string& token, uint8_t kind, const std::string& field) {
  if (id < 0 || static_cast<std::size_t>(id) >= m.id_to_token.size()) {
    fail(m.origin, field, "id " + std::to_string(id) + " out of range");
  }
  if (kind == 1 && m.id_kind[id] != 0) {
    fail(m.origin, field, "id " + std::to_string(id) + " is used by both \"" + m.id_to_token[id] + "\" and \"" + token + "\"");
  }
  m.id_to_token[id] = token;
  m.id_kind[id] = kind;
}

// Sizes the id tables once (string_views into them must never move afterwards).
void size_id_tables(BpeModel& m, const nlohmann::json& j) {
  int64_t max_id = -1;
  const auto& vocab = j.at("model").at("vocab");
  if (!vocab.is_object()) fail(m.origin, "model.vocab", "expected an object token -> id");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX) {
      fail(m.origin, "model.vocab[\"" + utf8_escape_for_message(it.key()) + "\"]", "expected an id >= 0, got " + dump_short(it.value()));
    }
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }
  if (j.contains("added_tokens") && j.at("added_tokens").is_array()) {
    for (std::size_t i = 0; i < j.at("added_tokens").size(); ++i) {
      const auto& id = j.at("added_tokens")[i].at("id");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
        fail(m.origin, "added_tokens[" + std::to_string(i) + "].id", "expected an id >= 0, got " + dump_short(id));
      }
      max_id = std::max<int64_t>(max_id, id.get<int64_t>());
    }
  }
  m.id_to_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  m.model_token.assign(static_cast<std::size_t>(max_id + 1), std::string());
  m.id_kind.assign(static_cast<std::size_t>(max_id + 1), 0);
  m.id_special.assign(static_cast<std::size_t>(max_id + 1), 0);
}

void parse_model(BpeModel& m, const json& j) {
  const std::string field = "model";
  if (!j.is_object()) fail(m.origin, field, "expected an object");
  if (j.contains("type") && j.at("type") != "BPE") unsupported(m.origin, "model.type", j.at("type"), "BPE");
  check_keys(m.origin, field, j,
             {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
              "byte_fallback", "ignore_merges", "vocab", "merges"});
  if (j.contains("dropout") && !j.at("dropout").is_null() && j.at("dropout").get<double>() != 0.0) {
    unsupported(m.origin, "model.dropout", j.at("dropout"), "null, 0");
  }
  m.fuse_unk = get_bool(m.origin, field, j, "fuse_unk", false);
  m.byte_fallback = get_bool(m.origin, field, j, "byte_fallback", false);
  m.ignore_merges = get_bool(m.origin, field, j, "ignore_merges", false);
  m.continuing_subword_prefix = get_string_or_empty(m.origin, field, j, "continuing_subword_prefix");
  m.end_of_word_suffix = get_string_or_empty(m.origin, field, j, "end_of_word_suffix");

  const json& vocab = j.at("vocab");
  if (!vocab.is_object()) fail(m.origin, "model.vocab", "expected an object token -> id");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    set_id(m, id, it.key(), 1, "model.vocab[\"" + utf8_escape_for_message(it.key()) + "\"]");
    m.model_token[id] = it.key();
  }
}

void index_vocab(BpeModel& m) {
  m.vocab.reserve(m.id_to_token.size());
  for (std::size_t id = 0; id < m.id_to_token.size(); ++id) {
    if (!m.model_token[id].empty()) m.vocab.emplace(m.model_token[id], static_cast<int32_t>(id));
  }
}

void parse_merges(BpeModel& m, const json& merges) {
  if (!merges.is_array()) fail(m.origin, "model.merges", "expected an array");
  m.merges.reserve(merges.size());
  const std::size_t plen = m.continuing_subword_prefix.size();
  std::string merged;
  for (std::size_t r = 0; r < merges.size(); ++r) {
    const json& e = merges[r];
    const std::string field = "model.merges[" + std::to_string(r) + "]";
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        fail(m.origin, field, "expected \"a b\" (two tokens separated by one space), got " + dump_short(e));
      }
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(m.origin, field, "expected \"a b\" or [\"a\", \"b\"], got " + dump_short(e));
    }
    const auto ia = m.vocab.find(a), ib = m.vocab.find(b);
    if (ia == m.vocab.end()) fail(m.origin, field, "token \"" + utf8_escape_for_message(a) + "\" is not in model.vocab");
    if (ib == m.vocab.end()) fail(m.origin, field, "token \"" + utf8_escape_for_message(b) + "\" is not in model.vocab");
    merged = a;
    if (plen > 0 && b.compare(0, plen, m.continuing_subword_prefix) == 0) {
      merged.append(b, plen, std::string::npos);
    } else {
      merged += b;
    }
    const auto im = m.vocab.find(merged);
    if (im == m.vocab.end()) {
      fail(m.origin, field, "merged token \"" + utf8_escape_for_message(merged) + "\" is not in model.vocab");
    }
    m.merges.insert(ia->second, ib->second, static_cast<int32_t>(r), im->second);
  }
}

void parse_added_tokens(BpeModel& m, const json& list) {
  if (list.is_null()) return;
  std::unordered_map<std::string, int32_t> assigned;
  int32_t max_added = -1;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    check_keys(m.origin, field, t, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    AddedTokenInfo a;
    a.id = t.at("id").get<int32_t>();
    a.content = t.at("content").get<std::string>();
    a.single_word = get_bool(m.origin, field, t, "single_word", false);
    a.lstrip = get_bool(m.origin, field, t, "lstrip", false);
    a.rstrip = get_bool(m.origin, field, t, "rstrip", false);
    a.special = get_bool(m.origin, field, t, "special", false);
    a.normalized = get_bool(m.origin, field, t, "normalized", !a.special);
    if (!utf8_is_valid(a.content)) fail(m.origin, field + ".content", "not valid UTF-8");
    // Hugging Face ignores this id: it re-adds the tokens in file order, reusing the id of a
    // token already known and otherwise taking the next free id, and only warns when that
    // differs from the file. Reject such files rather than disagree with it.
    int32_t hf_id;
    if (auto it = assigned.find(a.content); it != assigned.end()) {
      hf_id = it->second;
    } else if (auto iv = m.vocab.find(a.content); iv != m.vocab.end()) {
      hf_id = iv->second;
    } else {
      const auto vocab_count = static_cast<int32_t>(m.vocab.size());
      hf_id = (max_added < 0) ? vocab_count : (max_added >= vocab_count || vocab_count == 0) ? max_added + 1 : vocab_count;
    }
    if (hf_id != a.id) {
      fail(m.origin, field + ".id", "is " + std::to_string(a.id) + " but Hugging Face tokenizers would give \"" +
                                        utf8_escape_for_message(a.content) + "\" the id " + std::to_string(hf_id));
    }
    assigned.emplace(a.content, hf_id);
    max_added = std::max(max_added, hf_id);
    set_id(m, a.id, a.content, 2, field + ".id");
    m.added.push_back(std::move(a));
  }
  // Special tokens first, then the others, as Hugging Face builds its automaton.
  std::stable_partition(m.added.begin(), m.added.end(), [](const AddedTokenInfo& a) { return a.special; });
  for (const AddedTokenInfo& a : m.added) {
    m.added_vocab[a.content] = a.id;
    if (a.special) m.id_special[a.id] = 1;
  }
}

void build_added_set(BpeModel& m, AddedTokenSet& set, bool normalized) {
  for (std::size_t i = 0; i < m.added.size(); ++i) {
    const AddedTokenInfo& a = m.added[i];
    if (a.normalized != normalized || a.content.empty()) continue;
    std::string pat = a.content;
    if (normalized) {
      std::string out;
      if (normalize_text(m, nullptr, pat, out)) pat = out;
    }
    if (pat.empty()) continue;
    set.patterns.push_back(pat);
    set.token_index.push_back(static_cast<int32_t>(i));
  }
  for (std::size_t p = 0; p < set.patterns.size(); ++p) {
    set.by_first_byte[static_cast<unsigned char>(set.patterns[p][0])].push_back(static_cast<int32_t>(p));
    set.any = true;
  }
  for (auto& list : set.by_first_byte) {
    std::stable_sort(list.begin(), list.end(),
                     [&](int32_t x, int32_t y) { return set.patterns[x].size() > set.patterns[y].size(); });
  }
}

void build_decoder_table(BpeModel& m) {
  std::vector<int> char_to_byte(512, -1);  // the alphabet's characters are all below U+0144
  for (int b = 0; b < 256; ++b) {
    std::size_t k = 0;
    char_to_byte[utf8_decode_valid(m.byte_char[b], k)] = b;
  }
  m.decoded_offset.assign(m.id_to_token.size() + 1, 0);
  std::string bytes;
  for (std::size_t id = 0; id < m.id_to_token.size(); ++id) {
    m.decoded_offset[id] = static_cast<uint32_t>(m.decoded_arena.size());
    const std::string& tok = m.id_to_token[id];
    bytes.clear();
    bool all = utf8_is_valid(tok);
    for (std::size_t i = 0; all && i < tok.size();) {
      const char32_t c = utf8_decode_valid(tok, i);
      if (c >= char_to_byte.size() || char_to_byte[c] < 0) all = false;
      else bytes.push_back(static_cast<char>(char_to_byte[c]));
    }
    m.decoded_arena += all ? bytes : tok;
  }
  m.decoded_offset[m.id_to_token.size()] = static_cast<uint32_t>(m.decoded_arena.size());
}

std::optional<int32_t> config_token(const BpeModel& m, const json& cfg, const char* key, const std::string& origin) {
  if (!cfg.contains(key) || cfg.at(key).is_null()) return std::nullopt;
  const json& v = cfg.at(key);
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object() && v.contains("content")) content = v.at("content").get<std::string>();
  else fail(origin, key, "expected a string or {\"content\": ...}, got " + dump_short(v));
  if (auto it = m.added_vocab.find(content); it != m.added_vocab.end()) return it->second;
  if (auto it = m.vocab.find(content); it != m.vocab.end()) return it->second;
  fail(origin, key, "token \"" + content + "\" is not in the vocabulary of " + m.origin);
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  for (std::size_t hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out.append(s, pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}


// transformers' PreTrainedTokenizerBase.clean_up_tokenization.
void clean_up_tokenization(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_all(s, from, to);
}

std::shared_ptr<BpeModel> build_model(const json& j, std::string_view config_json, const std::string& origin,
                                      bool clip_files) {
  auto m = std::make_shared<BpeModel>();
  m->origin = origin;
  try {
    check_keys(origin, "(top level)", j,
               {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "post_processor",
                "decoder", "model"});
    if (j.contains("truncation") && !j.at("truncation").is_null()) unsupported(origin, "truncation", j.at("truncation"), "null");
    if (j.contains("padding") && !j.at("padding").is_null()) unsupported(origin, "padding", j.at("padding"), "null");
    if (!j.contains("model")) fail(origin, "model", "missing");
    build_byte_alphabet(m->byte_char);
    size_id_tables(*m, j);
    parse_model(*m, j.at("model"));
    index_vocab(*m);
    parse_merges(*m, j.at("model").at("merges"));
    if (j.contains("normalizer")) parse_normalizer(*m, j.at("normalizer"), "normalizer");
    if (j.contains("pre_tokenizer")) parse_pre_tokenizer(*m, j.at("pre_tokenizer"), "pre_tokenizer");
    if (j.contains("post_processor")) parse_post_processor(*m, j.at("post_processor"), "post_processor");
    parse_decoder(*m, j.contains("decoder") ? j.at("decoder") : json(nullptr), "decoder");
    if (j.contains("added_tokens")) parse_added_tokens(*m, j.at("added_tokens"));
  } catch (const json::exception& e) {
    throw std::invalid_argument(origin + ": unexpected structure: " + e.what());
  }
  const std::string unk = get_string_or_empty(origin, "model", j.at("model"), "unk_token");
  if (!unk.empty()) {
    const auto it = m->vocab.find(unk);
    if (it == m->vocab.end()) fail(origin, "model.unk_token", "\"" + unk + "\" is not in model.vocab");
    m->unk_id = it->second;
  }
  m->byte_fallback_id.fill(-1);
  if (m->byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (auto it = m->vocab.find(name); it != m->vocab.end()) m->byte_fallback_id[b] = it->second;
    }
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = m->vocab.find(m->byte_char[b]);
    m->byte_id[b] = it == m->vocab.end() ? -1 : it->second;
    const auto il = m->vocab.find(m->byte_char[b] + m->end_of_word_suffix);
    m->byte_last_id[b] = il == m->vocab.end() ? -1 : il->second;
  }
  m->fast_initial = m->byte_level && m->continuing_subword_prefix.empty();
  build_added_set(*m, m->raw_added, false);
  build_added_set(*m, m->normalized_added, true);
  build_decoder_table(*m);
  bool clip_class = clip_files;
  if (!config_json.empty()) {
    json cfg;
    const std::string corigin = origin + " (tokenizer_config.json)";
    try {
      cfg = json::parse(config_json.begin(), config_json.end());
    } catch (const json::parse_error& e) {
      throw std::invalid_argument(corigin + ": not valid JSON: " + e.what());
    }
    m->eos_id = config_token(*m, cfg, "eos_token", corigin);
    m->pad_id = config_token(*m, cfg, "pad_token", corigin);
    m->bos_id = config_token(*m, cfg, "bos_token", corigin);
    if (cfg.contains("tokenizer_class") && cfg.at("tokenizer_class").is_string()) {
      const std::string cls = cfg.at("tokenizer_class").get<std::string>();
      clip_class = clip_class || cls == "CLIPTokenizer" || cls == "CLIPTokenizerFast";
    }
    m->cleanup_spaces = cfg.contains("clean_up_tokenization_spaces") && cfg.at("clean_up_tokenization_spaces").is_boolean() &&
                        cfg.at("clean_up_tokenization_spaces").get<bool>();
  }
  m->clip_decode = clip_class && !m->end_of_word_suffix.empty();
  if (!m->clip_decode) m->cleanup_spaces = false;  // only the CLIP wrapper is reproduced
  return m;
}

std::string slurp(const std::string& p, bool required) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    if (required) throw std::runtime_error(p + ": cannot open tokenizer file");
    return {};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_named(std::string_view text, const std::string& origin) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(origin + ": not valid JSON: " + e.what());
  }
}

// A special token as transformers' CLIPTokenizer holds it: bos/eos/unk are wrapped in
// AddedToken(lstrip=False, rstrip=False), whose `normalized` defaults to true.
json special_entry(const json& v, const std::string& origin, const std::string& field) {
  json e = {{"content", ""}, {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", true}, {"special", true}};
  if (v.is_string()) {
    e["content"] = v.get<std::string>();
    return e;
  }
  if (!v.is_object() || !v.contains("content") || !v.at("content").is_string()) {
    fail(origin, field, "expected a string or {\"content\": ...}, got " + dump_short(v));
  }
  for (const char* k : {"content", "single_word", "lstrip", "rstrip", "normalized", "special"}) {
    if (v.contains(k) && !v.at(k).is_null()) e[k] = v.at(k);
  }
  e["special"] = true;
  return e;
}

// transformers' CLIPConverter (convert_slow_tokenizer.py) applied to CLIPTokenizer's files.
json clip_converted(std::string_view vocab_text, std::string_view merges_text, std::string_view config_text,
                    std::string_view special_map_text, const std::string& vocab_origin, const std::string& merges_origin,
                    const std::string& config_origin, bool class_known) {
  json vocab = parse_named(vocab_text, vocab_origin);
  if (!vocab.is_object()) fail(vocab_origin, "(top level)", "expected an object token -> id");
  if (!class_known && !vocab.contains("<|startoftext|>")) {
    throw std::invalid_argument(vocab_origin + ": has no \"<|startoftext|>\" and no tokenizer_config.json names "
                                "tokenizer_class CLIPTokenizer: only CLIP's vocab.json + merges.txt are supported "
                                "(other tokenizers need their tokenizer.json)");
  }
  int64_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX) {
      fail(vocab_origin, "\"" + utf8_escape_for_message(it.key()) + "\"", "expected an id >= 0, got " + dump_short(it.value()));
    }
    max_id = std::max<int64_t>(max_id, it.value().get<int64_t>());
  }

  // merges.txt as CLIPTokenizer reads it: read().strip().split("\n")[1 : 49152 - 256 - 2 + 1],
  // each line split on whitespace. The first line ("#version: 0.2") is skipped whatever it
  // holds, and merges past the first 48,894 lines are ignored, as there.
  constexpr std::size_t kClipMaxMerges = 49152 - 256 - 2;
  json merges = json::array();
  {
    auto is_ws = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    std::size_t begin = 0, end = merges_text.size();
    while (begin < end && is_ws(merges_text[begin])) ++begin;
    while (end > begin && is_ws(merges_text[end - 1])) --end;
    std::size_t lineno = 1 + static_cast<std::size_t>(std::count(merges_text.begin(), merges_text.begin() + begin, '\n'));
    std::set<std::pair<std::string, std::string>> seen;
    std::size_t index = 0;  // line index after the strip; 0 is the header
    for (std::size_t pos = begin; pos < end && index <= kClipMaxMerges; ++index, ++lineno) {
      std::size_t nl = merges_text.find('\n', pos);
      if (nl == std::string_view::npos || nl > end) nl = end;
      const std::string_view line = merges_text.substr(pos, nl - pos);
      pos = nl + 1;
      if (index == 0) continue;
      std::vector<std::string> fields;
      for (std::size_t i = 0; i < line.size();) {
        while (i < line.size() && is_ws(line[i])) ++i;
        const std::size_t f = i;
        while (i < line.size() && !is_ws(line[i])) ++i;
        if (i > f) fields.emplace_back(line.substr(f, i - f));
      }
      if (fields.empty()) continue;  // a blank line (transformers would fail on it)
      const std::string where = merges_origin + ":" + std::to_string(lineno);
      if (fields.size() != 2) {
        throw std::invalid_argument(where + ": expected two tokens separated by a space, got \"" +
                                    utf8_escape_for_message(line, 120) + "\"");
      }
      for (int k = 0; k < 3; ++k) {
        const std::string tok = k < 2 ? fields[k] : fields[0] + fields[1];
        if (!vocab.contains(tok)) {
          throw std::invalid_argument(where + ": " + (k < 2 ? "token \"" : "merged token \"") + utf8_escape_for_message(tok) +
                                      "\" is not in " + vocab_origin);
        }
      }
      // bpe_ranks is a dict: a repeated pair keeps its first place in the converter's list.
      if (seen.emplace(fields[0], fields[1]).second) merges.push_back(json::array({fields[0], fields[1]}));
    }
  }

  const json cfg = config_text.empty() ? json::object() : parse_named(config_text, config_origin);
  if (!cfg.is_object()) fail(config_origin, "(top level)", "expected an object");
  const json smap = special_map_text.empty() ? json::object() : parse_named(special_map_text, "special_tokens_map.json");
  // The special tokens CLIPTokenizer would be given: special_tokens_map.json over
  // tokenizer_config.json over its defaults.
  auto special_value = [&](const char* key, const char* dflt) -> json {
    if (smap.is_object() && smap.contains(key)) return smap.at(key);
    if (cfg.contains(key)) return cfg.at(key);
    return json(dflt);
  };
  std::map<std::string, json> specials;  // bos, eos, unk (null: none)
  for (const auto& [key, dflt] : std::vector<std::pair<const char*, const char*>>{
           {"bos_token", "<|startoftext|>"}, {"eos_token", "<|endoftext|>"}, {"unk_token", "<|endoftext|>"},
           {"pad_token", "<|endoftext|>"}}) {
    const json v = special_value(key, dflt);
    specials[key] = v.is_null() ? json(nullptr) : special_entry(v, config_origin, key);
  }

  // added_tokens: tokenizer_config.json's added_tokens_decoder when present (what transformers
  // re-adds to the converted tokenizer), else the special tokens above; each keeps its
  // vocab.json id, a token not in vocab.json takes the next free id.
  json added = json::array();
  std::map<std::string, int64_t> added_ids;
  if (cfg.contains("added_tokens_decoder") && cfg.at("added_tokens_decoder").is_object()) {
    std::map<int64_t, json> by_id;
    for (auto it = cfg.at("added_tokens_decoder").begin(); it != cfg.at("added_tokens_decoder").end(); ++it) {
      const std::string field = "added_tokens_decoder[\"" + it.key() + "\"]";
      int64_t id = -1;
      try {
        std::size_t used = 0;
        id = std::stoll(it.key(), &used);
        if (used != it.key().size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id > INT32_MAX) fail(config_origin, field, "expected a token id as the key");
      json e = special_entry(it.value(), config_origin, field);
      e["special"] = it.value().contains("special") && it.value().at("special").is_boolean() ? it.value().at("special").get<bool>() : true;
      by_id[id] = e;
    }
    for (auto& [id, e] : by_id) {
      e["id"] = id;
      added_ids[e.at("content").get<std::string>()] = id;
      added.push_back(e);
    }
  } else {
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      json e = specials.at(key);
      if (e.is_null()) continue;
      const std::string content = e.at("content").get<std::string>();
      if (added_ids.count(content)) continue;
      const int64_t id = vocab.contains(content) ? vocab.at(content).get<int64_t>() : ++max_id;
      e["id"] = id;
      added_ids[content] = id;
      added.push_back(e);
    }
    std::stable_sort(added.begin(), added.end(), [](const json& x, const json& y) { return x.at("id") < y.at("id"); });
  }
  auto token_and_id = [&](const char* key) -> json {
    const json& e = specials.at(key);
    if (e.is_null()) fail(config_origin, key, "CLIP's post-processor needs it, got null");
    const std::string content = e.at("content").get<std::string>();
    if (auto it = added_ids.find(content); it != added_ids.end()) return json::array({content, it->second});
    if (vocab.contains(content)) return json::array({content, vocab.at(content)});
    fail(config_origin, key, "token \"" + utf8_escape_for_message(content) + "\" is not in " + vocab_origin);
  };
  json unk = specials.at("unk_token").is_null() ? json(nullptr) : specials.at("unk_token").at("content");

  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = std::move(added);
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "NFC"}},
                       {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}},
                       {{"type", "Lowercase"}}}}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", "'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+"}}},
         {"behavior", "Removed"},
         {"invert", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}};
  j["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", token_and_id("eos_token")},
                         {"cls", token_and_id("bos_token")},
                         {"trim_offsets", false},
                         {"add_prefix_space", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", unk},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", "</w>"},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return j;
}

// Which converter a folder's vocab.json + merges.txt need: only CLIPTokenizer's is supported.
// Returns whether tokenizer_config.json names it (else the vocabulary must look like CLIP's).
bool config_says_clip(std::string_view config_text, const std::string& folder) {
  if (config_text.empty()) return false;
  json cfg;
  try {
    cfg = json::parse(config_text.begin(), config_text.end());
  } catch (const json::parse_error&) {
    return false;  // reported with the file's name when the tokenizer is built
  }
  if (!cfg.is_object() || !cfg.contains("tokenizer_class") || !cfg.at("tokenizer_class").is_string()) return false;
  const std::string cls = cfg.at("tokenizer_class").get<std::string>();
  if (cls != "CLIPTokenizer" && cls != "CLIPTokenizerFast") {
    throw std::invalid_argument(folder + "/tokenizer_config.json: tokenizer_class \"" + cls +
                                "\" with vocab.json + merges.txt and no tokenizer.json is not supported (supported: "
                                "CLIPTokenizer, CLIPTokenizerFast; or a folder with tokenizer.json)");
  }
  return true;
}

}  // namespace

}  // namespace detail

using detail::BpeModel;
using detail::BpeState;

BpeTokenizer BpeTokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                                     const std::string& origin) {
  const nlohmann::json j = detail::parse_named(tokenizer_json, origin);
  return BpeTokenizer(detail::build_model(j, config_json, origin, false));
}

std::string BpeTokenizer::clip_tokenizer_json(std::string_view vocab_json, std::string_view merges_txt,
                                              std::string_view config_json, std::string_view special_tokens_map_json,
                                              const std::string& vocab_origin, const std::string& merges_origin) {
  return detail::clip_converted(vocab_json, merges_txt, config_json, special_tokens_map_json, vocab_origin, merges_origin,
                                "tokenizer_config.json", true)
      .dump();
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  const std::size_t slash = vocab_json.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : vocab_json.substr(0, slash);
  const std::string config = detail::slurp(dir + "/tokenizer_config.json", false);
  const std::string smap = detail::slurp(dir + "/special_tokens_map.json", false);
  const bool class_known = detail::config_says_clip(config, dir);
  const std::string vocab_text = detail::slurp(vocab_json, true);
  const std::string merges_text = detail::slurp(merges_txt, true);
  const nlohmann::json j = detail::clip_converted(vocab_text, merges_text, config, smap, vocab_json, merges_txt,
                                                  dir + "/tokenizer_config.json", class_known);
  const std::string origin = vocab_json + " + " + merges_txt + " (as transformers' CLIPConverter)";
  return BpeTokenizer(detail::build_model(j, config, origin, true));
}

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const std::string dir = path.size() > 1 && path.back() == '/' ? path.substr(0, path.size() - 1) : path;
    if (fs::exists(dir + "/tokenizer.json", ec)) return from_file(dir + "/tokenizer.json");
    if (fs::exists(dir + "/vocab.json", ec) && fs::exists(dir + "/merges.txt", ec)) {
      return from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt");
    }
    throw std::runtime_error(dir + ": no tokenizer.json, and no vocab.json + merges.txt (CLIPTokenizer) in this folder");
  }
  const std::string text = detail::slurp(path, true);
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  const std::string config = detail::slurp(dir + "/tokenizer_config.json", false);
  return from_json(text, config, path);
}

BpeTokenizer::BpeTokenizer(std::shared_ptr<const BpeModel> model)
    : model_(std::move(model)), state_(std::make_unique<BpeState>(*model_)) {}
BpeTokenizer::BpeTokenizer(const BpeTokenizer& other)
    : model_(other.model_), state_(std::make_unique<BpeState>(*model_)) {
  state_->invalid_mode = other.state_->invalid_mode;
}
BpeTokenizer& BpeTokenizer::operator=(const BpeTokenizer& other) {
  if (this != &other) {
    model_ = other.model_;
    state_ = std::make_unique<BpeState>(*model_);
    state_->invalid_mode = other.state_->invalid_mode;
  }
  return *this;
}
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;
BpeTokenizer::~BpeTokenizer() = default;

std::vector<int32_t> BpeTokenizer::encode(std::string_view utf8, bool add_special_tokens) {
  std::vector<int32_t> out;
  out.reserve(utf8.size() / 3 + 4);
  encode_append(utf8, out, add_special_tokens);
  return out;
}

void BpeTokenizer::encode_append(std::string_view utf8, std::vector<int32_t>& out, bool add_special_tokens) {
  if (add_special_tokens) out.insert(out.end(), model_->template_prefix.begin(), model_->template_prefix.end());
  detail::encode_text(*model_, *state_, utf8, out);
  if (add_special_tokens) out.insert(out.end(), model_->template_suffix.begin(), model_->template_suffix.end());
}

std::string BpeTokenizer::normalized_text(std::string_view utf8) const { return detail::normalized_text(*model_, utf8); }

std::string BpeTokenizer::decode_bytes(const int32_t* ids, std::size_t n, bool skip_special_tokens) const {
  const BpeModel& m = *model_;
  std::string out;
  bool first = true;
  for (std::size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= m.id_kind.size() || m.id_kind[id] == 0) {
      throw std::out_of_range(m.origin + ": decode: id " + std::to_string(id) + " (position " + std::to_string(i) +
                              ") is not in the vocabulary (size " + std::to_string(m.id_kind.size()) + ")");
    }
    if (skip_special_tokens && m.id_special[id]) continue;
    if (m.decoder == BpeModel::Decoder::kByteLevel) {
      out.append(m.decoded_arena, m.decoded_offset[id], m.decoded_offset[id + 1] - m.decoded_offset[id]);
    } else {
      if (!first) out += ' ';
      out += m.id_to_token[id];
    }
    first = false;
  }
  if (m.clip_decode) detail::replace_all(out, m.end_of_word_suffix, " ");
  return out;
}

std::string BpeTokenizer::decode(const int32_t* ids, std::size_t n, bool skip_special_tokens) const {
  std::string raw = decode_bytes(ids, n, skip_special_tokens);
  std::string out;
  if (utf8_is_valid(raw)) {
    out = std::move(raw);
  } else {
    utf8_append_replacing_invalid(raw, out);
  }
  if (model_->clip_decode) {
    out = std::string(strip_python_space(out));
    if (model_->cleanup_spaces) detail::clean_up_tokenization(out);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return decode(ids.data(), ids.size(), skip_special_tokens);
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  if (auto it = model_->added_vocab.find(token); it != model_->added_vocab.end()) return it->second;
  if (auto it = model_->vocab.find(token); it != model_->vocab.end()) return it->second;
  return std::nullopt;
}

const std::string& BpeTokenizer::id_to_token(int32_t id) const {
  const BpeModel& m = *model_;
  if (id < 0 || static_cast<std::size_t>(id) >= m.id_kind.size() || m.id_kind[id] == 0) {
    throw std::out_of_range(m.origin + ": id " + std::to_string(id) + " is not in the vocabulary");
  }
  return m.id_to_token[id];
}

int32_t BpeTokenizer::vocab_size() const { return static_cast<int32_t>(model_->id_to_token.size()); }
bool BpeTokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < model_->id_special.size() && model_->id_special[id];
}
const std::vector<AddedTokenInfo>& BpeTokenizer::added_tokens() const { return model_->added; }
std::optional<int32_t> BpeTokenizer::eos_id() const { return model_->eos_id; }
std::optional<int32_t> BpeTokenizer::pad_id() const { return model_->pad_id; }
std::optional<int32_t> BpeTokenizer::bos_id() const { return model_->bos_id; }
void BpeTokenizer::set_invalid_utf8(InvalidUtf8 mode) { state_->invalid_mode = mode; }
std::size_t BpeTokenizer::invalid_utf8_replacements() const { return state_->replacements; }
std::size_t BpeTokenizer::cache_entries() const { return state_->cache.size(); }

}  // namespace zeroshard::text
