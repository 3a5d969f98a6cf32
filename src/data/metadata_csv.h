// DiffSynth-Studio's dataset folder: media files plus a metadata file naming them with their
// captions (UnifiedDataset.load_metadata). The metadata is one of
// - metadata.csv  : a header row, then one row per sample (pandas.read_csv there; RFC 4180 here:
//                   quoted fields with "" for a quote, commas and line breaks inside quotes,
//                   an optional UTF-8 byte-order mark, LF, CRLF or CR line ends, empty lines
//                   skipped as pandas skips them);
// - metadata.json : a JSON array of objects;
// - metadata.jsonl: one JSON object per line.
// Each sample has a media column — `video` or `image` (a path relative to the folder; an
// absolute path is kept, as os.path.join does) — and `prompt`; any other columns are kept by
// name (JSON values that are not strings are kept as their JSON text).
//
// Stricter than pandas, so that nothing is silently wrong: a row with more or fewer fields
// than the header, an unterminated quote, text after a closing quote, a duplicate or empty
// column name, an empty media cell, an empty (or blank) prompt, or (check_files) a media file that does not exist is an
// error naming file:line (CSV, JSONL) or file item N (JSON) and the column. By default the
// first bad row throws — except missing files, which are all listed in one message; with
// collect_errors every bad row is recorded in `errors` and left out of `samples`.
#pragma once

#include "data/image_transforms.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::data {

// A parsed CSV file: the header and the data rows with the line each row starts on.
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int64_t> row_lines;  // 1-based physical line where each row starts (header is line 1 or later)
};
// `name` is used in error messages. Throws std::runtime_error "<name>:<line>: ...".
CsvTable parse_csv(const std::string& text, const std::string& name);
CsvTable read_csv(const std::string& path);

struct MediaSample {
  int64_t row = 0;             // 0-based index of the record in the metadata file
  std::string location;        // "metadata.csv:7" / "metadata.json item 3", for messages
  std::string media;           // the path as written in the metadata
  std::string media_path;      // resolved against the folder
  MediaKind kind = MediaKind::kImage;
  std::string prompt;
  std::vector<std::pair<std::string, std::string>> extra;  // other columns, in file order
};

struct MediaDatasetOptions {
  std::string media_column;          // "" = `video` when the metadata has it, else `image`
  std::string prompt_column = "prompt";
  bool check_files = true;           // every media file must exist
  bool collect_errors = false;
};

struct MediaDataset {
  std::string folder;
  std::string metadata_path;
  std::string media_column;
  std::vector<std::string> columns;  // in file order (JSON: in first-seen order)
  std::vector<MediaSample> samples;
  std::vector<std::string> errors;   // with collect_errors: one message per bad row
};

// metadata_path "" = the folder's metadata.csv, metadata.json or metadata.jsonl (exactly one
// must exist). A relative metadata_path is taken as given (relative to the working directory).
MediaDataset load_media_dataset(const std::string& folder, const std::string& metadata_path = "",
                                const MediaDatasetOptions& options = {});

}  // namespace zeroshard::data
