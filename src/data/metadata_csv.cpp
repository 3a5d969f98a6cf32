#include "data/metadata_csv.h"

#include "data/jsonl.h"
#include "util/optional_parts.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace fs = std::filesystem;

namespace zeroshard::data {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw std::runtime_error(path + ": read error: " + std::strerror(errno));
  return s.str();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "(none)" : s;
}

// A record as the loader sees it, whatever the metadata format.
struct Record {
  std::string location;
  std::vector<std::pair<std::string, std::string>> fields;
  std::vector<std::string> non_string;  // columns whose JSON value was not a string
};

struct Collector {
  const MediaDatasetOptions& options;
  std::vector<std::string>& errors;
  void report(const std::string& message) {
    if (!options.collect_errors) throw std::runtime_error(message);
    errors.push_back(message);
  }
};

}  // namespace

CsvTable parse_csv(const std::string& text, const std::string& name) {
  CsvTable table;
  size_t i = 0;
  const size_t n = text.size();
  if (n >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) i = 3;
  int64_t line = 1;
  bool have_header = false;
  while (i < n) {
    // One record.
    const int64_t record_line = line;
    std::vector<std::string> fields;
    std::string field;
    bool record_done = false;
    bool blank = true;  // no character seen in this record yet
    while (!record_done) {
      field.clear();
      if (i < n && text[i] == '"') {
        blank = false;
        const int64_t quote_line = line;
        ++i;
        for (;;) {
          if (i >= n) {
            throw std::runtime_error(name + ":" + std::to_string(quote_line) + ": unterminated quoted field " +
                                     std::to_string(fields.size() + 1) + " (no closing quote before the end of the file)");
          }
          const char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              field.push_back('"');
              i += 2;
              continue;
            }
            ++i;
            break;
          }
          if (c == '\n' || (c == '\r' && !(i + 1 < n && text[i + 1] == '\n'))) ++line;
          field.push_back(c);
          ++i;
        }
        if (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          throw std::runtime_error(name + ":" + std::to_string(line) + ": unexpected character '" + std::string(1, text[i]) +
                                   "' after the closing quote of field " + std::to_string(fields.size() + 1));
        }
      } else {
        while (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') field.push_back(text[i++]);
        if (!field.empty()) blank = false;
      }
      fields.push_back(field);
      if (i >= n) {
        record_done = true;
      } else if (text[i] == ',') {
        blank = false;
        ++i;
      } else {  // line end: \n, \r\n or \r
        if (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') ++i;
        ++i;
        ++line;
        record_done = true;
      }
    }
    if (blank) continue;  // an empty line
    if (!have_header) {
      std::set<std::string> seen;
      for (size_t c = 0; c < fields.size(); ++c) {
        if (fields[c].empty()) {
          throw std::runtime_error(name + ":" + std::to_string(record_line) + ": header column " + std::to_string(c + 1) +
                                   " has no name");
        }
        if (!seen.insert(fields[c]).second) {
          throw std::runtime_error(name + ":" + std::to_string(record_line) + ": duplicate column '" + fields[c] + "' in the header");
        }
      }
      table.header = std::move(fields);
      have_header = true;
      continue;
    }
    if (fields.size() != table.header.size()) {
      throw std::runtime_error(name + ":" + std::to_string(record_line) + ": " + std::to_string(fields.size()) +
                               " fields, but the header has " + std::to_string(table.header.size()) + " (" +
                               join_names(table.header) + ")");
    }
    table.rows.push_back(std::move(fields));
    table.row_lines.push_back(record_line);
  }
  if (!have_header) throw std::runtime_error(name + ": empty CSV file (no header row)");
  return table;
}

CsvTable read_csv(const std::string& path) { return parse_csv(read_text(path), path); }

MediaDataset load_media_dataset(const std::string& folder, const std::string& metadata_path, const MediaDatasetOptions& options) {
  MediaDataset ds;
  ds.folder = folder;
  if (!fs::is_directory(folder)) throw std::runtime_error(folder + ": dataset folder does not exist or is not a folder");
  ds.metadata_path = metadata_path;
  if (ds.metadata_path.empty()) {
    std::vector<std::string> found;
    for (const char* f : {"metadata.csv", "metadata.json", "metadata.jsonl"}) {
      if (fs::exists(fs::path(folder) / f)) found.push_back((fs::path(folder) / f).string());
    }
    if (found.size() != 1) {
      throw std::runtime_error(folder + ": expected exactly one of metadata.csv, metadata.json, metadata.jsonl, found " +
                               std::to_string(found.size()) + (found.empty() ? "" : " (" + join_names(found) + ")"));
    }
    ds.metadata_path = found[0];
  }
  const std::string& mp = ds.metadata_path;
  const std::string base = fs::path(mp).filename().string();

  // 1. Records, whatever the format.
  std::vector<Record> records;
  std::vector<std::string> columns;
  auto add_column = [&](const std::string& c) {
    if (std::find(columns.begin(), columns.end(), c) == columns.end()) columns.push_back(c);
  };
  auto from_json = [&](const nlohmann::json& obj, const std::string& location) {
    Record r;
    r.location = location;
    for (const auto& [k, v] : obj.items()) {
      add_column(k);
      if (v.is_string()) {
        r.fields.emplace_back(k, v.get<std::string>());
      } else {
        r.fields.emplace_back(k, v.dump());
        r.non_string.push_back(k);
      }
    }
    records.push_back(std::move(r));
  };
  const auto ends_with = [&](const char* suffix) {
    const size_t k = std::strlen(suffix);
    return mp.size() >= k && mp.compare(mp.size() - k, k, suffix) == 0;
  };
  if (ends_with(".jsonl")) {
    JsonlReader reader(mp);  // malformed lines throw file:line
    JsonlRecord rec;
    while (reader.next(rec)) from_json(rec.value, base + ":" + std::to_string(rec.line));
  } else if (ends_with(".json")) {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(read_text(mp));
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(mp + ": malformed JSON: " + e.what());
    }
    if (!doc.is_array()) throw std::runtime_error(mp + ": expected a JSON array of objects, got " + std::string(doc.type_name()));
    for (size_t k = 0; k < doc.size(); ++k) {
      if (!doc[k].is_object()) {
        throw std::runtime_error(mp + " item " + std::to_string(k) + ": expected a JSON object, got " + doc[k].type_name());
      }
      from_json(doc[k], base + " item " + std::to_string(k));
    }
  } else {
    const CsvTable t = read_csv(mp);
    columns = t.header;
    for (size_t r = 0; r < t.rows.size(); ++r) {
      Record rec;
      rec.location = base + ":" + std::to_string(t.row_lines[r]);
      for (size_t c = 0; c < t.header.size(); ++c) rec.fields.emplace_back(t.header[c], t.rows[r][c]);
      records.push_back(std::move(rec));
    }
  }
  ds.columns = columns;

  // 2. Which column holds the media.
  const auto has = [&](const std::string& c) { return std::find(columns.begin(), columns.end(), c) != columns.end(); };
  ds.media_column = options.media_column;
  if (ds.media_column.empty()) {
    if (has("video") && has("image")) {
      throw std::runtime_error(mp + ": has both a 'video' and an 'image' column; say which one holds the training media");
    }
    ds.media_column = has("video") ? "video" : "image";
  }
  if (!has(ds.media_column)) {
    throw std::runtime_error(mp + ": no '" + ds.media_column + "' column (columns: " + join_names(columns) + ")");
  }
  if (!has(options.prompt_column)) {
    throw std::runtime_error(mp + ": no '" + options.prompt_column + "' column (columns: " + join_names(columns) + ")");
  }

  // 3. Samples.
  Collector errors{options, ds.errors};
  std::vector<std::string> missing;
  for (size_t r = 0; r < records.size(); ++r) {
    const Record& rec = records[r];
    MediaSample s;
    s.row = static_cast<int64_t>(r);
    s.location = rec.location;
    bool have_media = false, have_prompt = false, bad = false;
    for (const auto& [k, v] : rec.fields) {
      const bool non_string = std::find(rec.non_string.begin(), rec.non_string.end(), k) != rec.non_string.end();
      if (k == ds.media_column) {
        have_media = true;
        if (non_string || v.empty()) {
          errors.report(rec.location + ": column '" + k + "': " +
                        (non_string ? "expected a path string, got " + v : std::string("empty media path")));
          bad = true;
        }
        s.media = v;
      } else if (k == options.prompt_column) {
        have_prompt = true;
        if (non_string) {
          errors.report(rec.location + ": column '" + k + "': expected a string, got " + v);
          bad = true;
        } else if (v.find_first_not_of(" \t\r\n") == std::string::npos) {
          // Every series here trains on text conditioning: a caption-less row is a data fault
          // (often a CSV row whose prompt went into another cell), not an unconditional sample.
          errors.report(rec.location + ": column '" + k + "': empty prompt");
          bad = true;
        }
        s.prompt = v;
      } else {
        s.extra.emplace_back(k, v);
      }
    }
    if (!have_media || !have_prompt) {
      errors.report(rec.location + ": no '" + (have_media ? options.prompt_column : ds.media_column) + "' field");
      continue;
    }
    if (bad) continue;
    s.media_path = fs::path(s.media).is_absolute() ? s.media : (fs::path(folder) / s.media).string();
    try {
      s.kind = media_kind(s.media_path);
    } catch (const std::invalid_argument& e) {
      errors.report(rec.location + ": column '" + ds.media_column + "': " + e.what());
      continue;
    }
    if (options.check_files && !fs::is_regular_file(s.media_path)) {
      const std::string msg = rec.location + " (row " + std::to_string(r) + "): column '" + ds.media_column + "': file '" +
                              s.media + "' does not exist (" + s.media_path + ")";
      if (options.collect_errors) {
        ds.errors.push_back(msg);
      } else {
        missing.push_back(msg);
      }
      continue;
    }
    ds.samples.push_back(std::move(s));
  }
  if (!missing.empty()) {
    std::string msg = mp + ": " + std::to_string(missing.size()) + " media file(s) missing:";
    for (size_t k = 0; k < missing.size() && k < 20; ++k) msg += "\n  " + missing[k];
    if (missing.size() > 20) msg += "\n  ... and " + std::to_string(missing.size() - 20) + " more";
    throw std::runtime_error(msg);
  }
  if (records.empty()) throw std::runtime_error(mp + ": the metadata lists no samples");
  // A build without a decoder refuses here, before any rank reads: every sample would otherwise
  // be left out as unreadable, one by one.
  for (const MediaSample& s : ds.samples) {
    util::require_part(s.kind == MediaKind::kVideo ? util::OptionalPart::kVideo : util::OptionalPart::kImages,
                       s.location + " ('" + s.media + "')");
  }
  return ds;
}

}  // namespace zeroshard::data
