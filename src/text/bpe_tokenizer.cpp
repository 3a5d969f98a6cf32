// Loading (tokenizer.json, tokenizer_config.json), decoding and accessors of BpeTokenizer.
// The encoding hot path is in bpe_encode.cpp.
#include "text/bpe_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <fstream>
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
  check_keys(m.origin, field, j, {"type"});
  if (type == "NFC") m.normalizers.push_back(Normalization::kNFC);
  else if (type == "NFD") m.normalizers.push_back(Normalization::kNFD);
  else if (type == "NFKC") m.normalizers.push_back(Normalization::kNFKC);
  else if (type == "NFKD") m.normalizers.push_back(Normalization::kNFKD);
  else unsupported(m.origin, field + ".type", j.at("type"), "NFC, NFD, NFKC, NFKD, Sequence, null");
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
    if (get_bool(m.origin, field, j, "invert", false)) unsupported(m.origin, field + ".invert", j.at("invert"), "false");
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
  } else {
    unsupported(m.origin, field + ".type", j.at("type"), "ByteLevel, TemplateProcessing, Sequence, null");
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
      if (normalize_text(m.normalizers, pat, out)) pat = out;
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

}  // namespace

}  // namespace detail

using detail::BpeModel;
using detail::BpeState;

BpeTokenizer BpeTokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                                     const std::string& origin) {
  using nlohmann::json;
  json j;
  try {
    j = json::parse(tokenizer_json.begin(), tokenizer_json.end());
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(origin + ": not valid JSON: " + e.what());
  }
  auto m = std::make_shared<BpeModel>();
  m->origin = origin;
  try {
    detail::check_keys(origin, "(top level)", j,
                       {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
                        "post_processor", "decoder", "model"});
    if (j.contains("truncation") && !j.at("truncation").is_null()) detail::unsupported(origin, "truncation", j.at("truncation"), "null");
    if (j.contains("padding") && !j.at("padding").is_null()) detail::unsupported(origin, "padding", j.at("padding"), "null");
    if (!j.contains("model")) detail::fail(origin, "model", "missing");
    detail::build_byte_alphabet(m->byte_char);
    detail::size_id_tables(*m, j);
    detail::parse_model(*m, j.at("model"));
    detail::index_vocab(*m);
    detail::parse_merges(*m, j.at("model").at("merges"));
    if (j.contains("normalizer")) detail::parse_normalizer(*m, j.at("normalizer"), "normalizer");
    if (j.contains("pre_tokenizer")) detail::parse_pre_tokenizer(*m, j.at("pre_tokenizer"), "pre_tokenizer");
    if (j.contains("post_processor")) detail::parse_post_processor(*m, j.at("post_processor"), "post_processor");
    detail::parse_decoder(*m, j.contains("decoder") ? j.at("decoder") : json(nullptr), "decoder");
    if (j.contains("added_tokens")) detail::parse_added_tokens(*m, j.at("added_tokens"));
  } catch (const json::exception& e) {
    throw std::invalid_argument(origin + ": unexpected structure: " + e.what());
  }
  const std::string unk = detail::get_string_or_empty(origin, "model", j.at("model"), "unk_token");
  if (!unk.empty()) {
    const auto it = m->vocab.find(unk);
    if (it == m->vocab.end()) detail::fail(origin, "model.unk_token", "\"" + unk + "\" is not in model.vocab");
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
  }
  m->fast_initial = m->byte_level && m->continuing_subword_prefix.empty() && m->end_of_word_suffix.empty();
  detail::build_added_set(*m, m->raw_added, false);
  detail::build_added_set(*m, m->normalized_added, true);
  detail::build_decoder_table(*m);
  if (!config_json.empty()) {
    json cfg;
    const std::string corigin = origin + " (tokenizer_config.json)";
    try {
      cfg = json::parse(config_json.begin(), config_json.end());
    } catch (const json::parse_error& e) {
      throw std::invalid_argument(corigin + ": not valid JSON: " + e.what());
    }
    m->eos_id = detail::config_token(*m, cfg, "eos_token", corigin);
    m->pad_id = detail::config_token(*m, cfg, "pad_token", corigin);
    m->bos_id = detail::config_token(*m, cfg, "bos_token", corigin);
  }
  return BpeTokenizer(std::move(m));
}

BpeTokenizer BpeTokenizer::from_file(const std::string& path) {
  auto slurp = [](const std::string& p, bool required) -> std::string {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      if (required) throw std::runtime_error(p + ": cannot open tokenizer file");
      return {};
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string text = slurp(path, true);
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash);
  const std::string config = slurp(dir + "/tokenizer_config.json", false);
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
  return out;
}

std::string BpeTokenizer::decode(const int32_t* ids, std::size_t n, bool skip_special_tokens) const {
  std::string raw = decode_bytes(ids, n, skip_special_tokens);
  if (utf8_is_valid(raw)) return raw;
  std::string out;
  utf8_append_replacing_invalid(raw, out);
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
