#include "data/token_corpus.h"

#include "data/indexed_dataset.h"
#include "io/file.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "text/utf8.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>

namespace zeroshard::data {

namespace fs = std::filesystem;

namespace {

// Notes kept in P.json and printed: every skipped record is listed up to this many, then counted.
constexpr size_t kMaxNotes = 200;

bool is_jsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".json" || ext == ".ndjson";
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return out.str();
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos; }

// One document of the walk: its number, file, first line (1-based) and text (empty when the
// walker was told the caller does not want it).
struct Doc {
  int64_t index = 0;
  size_t file = 0;
  int64_t line = 0;
  std::string text;
};

// Walks the documents of every file in order; `wanted(index)` says whether the text is needed.
// fn returns false to stop.
void walk_documents(const PrepareOptions& o, const std::function<bool(int64_t)>& wanted,
                    const std::function<bool(Doc&)>& fn) {
  int64_t index = 0;
  Doc doc;
  for (size_t f = 0; f < o.files.size(); ++f) {
    const std::string& path = o.files[f];
    const bool jsonl = is_jsonl(path) || o.kind == CorpusKind::Chat;
    if (!jsonl && o.text_split == TextSplit::File) {
      doc = Doc{index, f, 1, {}};
      if (wanted(index)) doc.text = read_whole(path);
      ++index;
      if (!fn(doc)) return;
      continue;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
    std::string line;
    int64_t number = 0;
    bool in_paragraph = false;
    auto flush = [&]() -> bool {
      if (!in_paragraph) return true;
      in_paragraph = false;
      ++index;
      return fn(doc);
    };
    while (std::getline(in, line)) {
      ++number;
      if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (jsonl || o.text_split == TextSplit::Line) {
        if (blank(line)) continue;
        doc = Doc{index, f, number, {}};
        if (wanted(index)) doc.text = line;
        ++index;
        if (!fn(doc)) return;
        continue;
      }
      // Paragraphs: runs of non-blank lines, joined by "\n".
      if (blank(line)) {
        if (!flush()) return;
        continue;
      }
      if (!in_paragraph) {
        in_paragraph = true;
        doc = Doc{index, f, number, {}};
      } else if (wanted(index)) {
        doc.text += '\n';
      }
      if (wanted(index)) doc.text += line;
    }
    if (in.bad()) throw std::runtime_error(path + ":" + std::to_string(number + 1) + ": read error");
    if (!flush()) return;
  }
}

std::string where_of(const PrepareOptions& o, const Doc& d) { return o.files[d.file] + ":" + std::to_string(d.line); }

// A note quotes the record (a parser's message shows the bytes it stopped at): ill-formed UTF-8
// in it becomes U+FFFD, so that the report stays valid JSON.
void note(PrepareReport& r, const std::string& text) {
  if (r.notes.size() >= kMaxNotes) return;
  std::string clean;
  text::utf8_append_replacing_invalid(text, clean);
  r.notes.push_back(std::move(clean));
}

}  // namespace

const char* corpus_kind_name(CorpusKind kind) { return kind == CorpusKind::Chat ? "chat" : "text"; }

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    if (!fs::exists(in)) throw std::invalid_argument("data.inputs: '" + in + "' does not exist");
    if (fs::is_directory(in)) {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(in)) {
        if (e.is_regular_file()) found.push_back(e.path().string());
      }
      if (found.empty()) throw std::invalid_argument("data.inputs: folder '" + in + "' holds no files");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      files.push_back(in);
    }
  }
  if (files.empty()) throw std::invalid_argument("data.inputs: no input files (name jsonl or text files, or folders)");
  return files;
}

void PrepareReport::add(const PrepareReport& o) {
  documents += o.documents;
  tokens += o.tokens;
  target_tokens += o.target_tokens;
  skipped += o.skipped;
  too_long += o.too_long;
  for (const auto& n : o.notes) note(*this, n);
}

nlohmann::json PrepareReport::to_json() const {
  return {{"documents", documents}, {"tokens", tokens},     {"target_tokens", target_tokens},
          {"skipped", skipped},     {"too_long", too_long}, {"notes", notes}};
}

PrepareReport PrepareReport::from_json(const nlohmann::json& j) {
  PrepareReport r;
  r.documents = j.at("documents").get<int64_t>();
  r.tokens = j.at("tokens").get<int64_t>();
  r.target_tokens = j.at("target_tokens").get<int64_t>();
  r.skipped = j.at("skipped").get<int64_t>();
  r.too_long = j.at("too_long").get<int64_t>();
  r.notes = j.at("notes").get<std::vector<std::string>>();
  return r;
}

int64_t count_documents(const PrepareOptions& o) {
  int64_t n = 0;
  walk_documents(o, [](int64_t) { return false; }, [&n](Doc&) {
    ++n;
    return true;
  });
  return n;
}

std::string part_prefix(const std::string& output, int rank, int world) {
  return output + ".part" + std::to_string(rank) + "-of-" + std::to_string(world);
}

PrepareReport prepare_part(const PrepareOptions& o, text::BpeTokenizer& tok, int64_t begin, int64_t end,
                           const std::string& part) {
  const bool chat = o.kind == CorpusKind::Chat;
  if (!chat && o.eos_id < 0) throw std::invalid_argument("prepare: no end-of-document token id");
  const TokenDType dtype = optimal_token_dtype(tok.vocab_size());
  IndexedDatasetWriter ids(part, dtype);
  std::unique_ptr<IndexedDatasetWriter> masks;
  if (chat) masks = std::make_unique<IndexedDatasetWriter>(part + ".loss_mask", TokenDType::kUInt8);
  PrepareReport r;
  std::vector<int64_t> tokens, mask_values;
  std::vector<int32_t> encoded;
  auto bad = [&](const std::string& what) {
    if (!o.skip_bad_records) {
      throw std::invalid_argument(what + " (set data.on_bad_record: skip to skip and count such records)");
    }
    ++r.skipped;
    note(r, "skipped " + what);
  };
  walk_documents(o, [begin, end](int64_t i) { return i >= begin && i < end; }, [&](Doc& d) {
    if (d.index < begin) return true;
    if (d.index >= end) return false;
    const std::string where = where_of(o, d);
    const bool jsonl = chat || is_jsonl(o.files[d.file]);
    nlohmann::json record;
    if (jsonl) {
      try {
        record = nlohmann::json::parse(d.text);
      } catch (const nlohmann::json::parse_error& e) {
        bad(where + ": malformed JSON: " + e.what());
        return true;
      }
      if (!record.is_object()) {
        bad(where + ": expected a JSON object, got " + std::string(record.type_name()));
        return true;
      }
    }
    if (!chat) {
      std::string text;
      if (jsonl) {
        if (!record.contains(o.text_key) || !record[o.text_key].is_string()) {
          bad(where + ": no string field '" + o.text_key + "' (data.text_key)");
          return true;
        }
        text = record[o.text_key].get<std::string>();
      } else {
        text = std::move(d.text);
      }
      encoded.clear();
      tok.encode_append(text, encoded);
      tokens.assign(encoded.begin(), encoded.end());
      tokens.push_back(o.eos_id);
      ids.add_document(tokens);
      ++r.documents;
      r.tokens += static_cast<int64_t>(tokens.size());
      return true;
    }
    text::ChatEncoding enc;
    try {
      if (!record.contains("messages")) throw std::invalid_argument(where + ": no \"messages\" array");
      enc = text::encode_qwen3_chat(tok, text::chat_messages_from_json(record["messages"], where), where);
    } catch (const std::invalid_argument& e) {
      bad(e.what());
      return true;
    }
    tokens.assign(enc.ids.begin(), enc.ids.end());
    mask_values.assign(enc.loss_mask.begin(), enc.loss_mask.end());
    ids.add_document(tokens);
    masks->add_document(mask_values);
    ++r.documents;
    r.tokens += static_cast<int64_t>(tokens.size());
    for (uint8_t m : enc.loss_mask) r.target_tokens += m;
    if (o.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > o.max_tokens) {
      ++r.too_long;
      note(r, where + ": conversation of " + std::to_string(tokens.size()) + " tokens is longer than train.seq_len + 1 = " +
                  std::to_string(o.max_tokens) + " (training truncates it)");
    }
    return true;
  });
  ids.finalize();
  if (masks) masks->finalize();
  return r;
}

namespace {

void append_dataset(const std::string& from, IndexedDatasetWriter& to) {
  const IndexedDataset part(from);
  for (int64_t d = 0; d < part.num_documents(); ++d) {
    std::vector<int64_t> tokens;
    std::vector<int32_t> lengths;
    for (int64_t s = part.document_begin(d); s < part.document_begin(d + 1); ++s) {
      const auto t = part.get(s);
      tokens.insert(tokens.end(), t.begin(), t.end());
      lengths.push_back(static_cast<int32_t>(t.size()));
    }
    to.add_document(tokens, lengths);
  }
}

}  // namespace

void remove_dataset(const std::string& prefix) {
  std::error_code ec;
  fs::remove(prefix + ".bin", ec);
  fs::remove(prefix + ".idx", ec);
}

void merge_parts(const PrepareOptions& o, int world, const PrepareReport& total, int64_t tokenizer_vocab) {
  const bool chat = o.kind == CorpusKind::Chat;
  {
    const TokenDType dtype = optimal_token_dtype(tokenizer_vocab);
    IndexedDatasetWriter ids(o.output, dtype);
    for (int r = 0; r < world; ++r) append_dataset(part_prefix(o.output, r, world), ids);
    ids.finalize();
  }
  if (chat) {
    IndexedDatasetWriter masks(o.output + ".loss_mask", TokenDType::kUInt8);
    for (int r = 0; r < world; ++r) append_dataset(part_prefix(o.output, r, world) + ".loss_mask", masks);
    masks.finalize();
  }
  for (int r = 0; r < world; ++r) {
    remove_dataset(part_prefix(o.output, r, world));
    if (chat) remove_dataset(part_prefix(o.output, r, world) + ".loss_mask");
  }
  nlohmann::json meta = total.to_json();
  meta["format"] = "zeroshard token corpus 1";
  meta["kind"] = corpus_kind_name(o.kind);
  meta["tokenizer"] = o.tokenizer_path;
  meta["tokenizer_vocab_size"] = tokenizer_vocab;
  meta["eos_id"] = o.eos_id;
  meta["sources"] = o.files;
  meta["text_key"] = o.text_key;
  io::write_file_atomic(o.output + ".json", meta.dump(2) + "\n");
}

nlohmann::json read_corpus_meta(const std::string& prefix) {
  const std::string path = prefix + ".json";
  if (!fs::exists(path)) {
    throw std::invalid_argument(path + " does not exist: '" + prefix + "' is not a dataset written by `zeroshard prepare`");
  }
  try {
    return nlohmann::json::parse(read_whole(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(path + ": not valid JSON (" + e.what() + ")");
  }
}

}  // namespace zeroshard::data
