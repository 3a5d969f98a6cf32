// `zeroshard prepare`'s loop over a dataset's records, shared by the diffusion series (image
// series and wan). A collective over the job's ranks; rank q takes records q, q + W, ...
// (record_rounds rounds each). Each round:
//  1. every rank reads its record: read(sample) loads the media and returns the tower passes it
//     needs (the Wan VAE's 1 + k chunks for a clip of 1 + 4k frames; 1 for an image), or throws
//     on a bad file (missing, truncated, undecodable, not a video);
//  2. the ranks agree in one fixed-size all-gather on who read what and on the round's passes,
//     the most any rank needs. Stop mode: a bad record ends every rank with its message (file:
//     line and why, first_error) before any tower runs; skip mode: it is listed and left out;
//  3. every rank runs its towers, encode(sample, passes, stand_in): on what it read, or, for a
//     bad record or a rank past the end, on a stand-in; always `passes` passes, so sharded
//     towers gather and free their units in step whatever the clips' lengths and sizes.
// Records are keyed by their metadata row (MediaSample::row): index.json's records are the
// metadata's rows, whatever was left out before or during the loop.
#pragma once

#include "data/metadata_csv.h"
#include "models/diffusion/cond_cache.h"
#include "zeroshard/comm.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace zeroshard::models::diffusion {

// What reading a record gave: the tower passes it needs and what its item in index.json and
// the report show (e.g. {"frames": 13, "source": "48x40", "fps": 8}).
struct RecordRead {
  int64_t passes = 1;
  nlohmann::json info = nlohmann::json::object();
};

// Reads a sample's media, as prepare and training read it; throws on a bad file.
using ReadRecord = std::function<RecordRead(const data::MediaSample&)>;

struct RecordHandlers {
  // Reads the sample's media (kept by the caller for encode).
  ReadRecord read;
  // The sample's tensors after `passes` tower passes; stand_in: nothing was read, run the
  // towers on placeholder input of `passes` passes and the result is dropped.
  std::function<NamedTensors(const data::MediaSample&, int64_t passes, bool stand_in)> encode;
};

// Runs the rounds over the dataset's samples (refusing a dataset with none, naming its metadata
// file and what was left out while reading it), adding what each rank encoded to `writer` (record = row) and
// each bad record (skip) to writer.left_out as "<location>: <why>". Stop mode (skip false)
// throws on every rank at the round's first bad record, naming `skip_key` (e.g.
// "wan.on_bad_file") as the way to leave such records out.
void prepare_records(Communicator& comm, const data::MediaDataset& dataset, const std::string& skip_key,
                     bool skip, CacheWriter& writer, const RecordHandlers& handlers);

// `train --dry-run` with the towers in the loop: every sample read as prepare reads it, on this
// process, no towers: {"items": [{"record": row, "media", ...read.info}],
// "left_out": the dataset's errors, then each record read() threw on ("<location>: <why>")},
// prepared_report's input.
nlohmann::json read_records(const data::MediaDataset& dataset, const ReadRecord& read);

// Training with the towers in the loop under <series>.on_bad_file=skip: the records every rank
// agrees read, before the first step. A collective: rank q reads samples q, q + W, ... with
// read(), then one all-gather of what each rank found. `index` is read_records' result for the
// whole dataset (the same on every rank), `samples` its items' samples in row order. A dataset
// of which nothing reads is refused on every rank, naming its metadata file and what was left
// out.
struct ReadableRecords {
  std::vector<data::MediaSample> samples;
  nlohmann::json index;
};
ReadableRecords readable_records(Communicator& comm, const data::MediaDataset& dataset, const ReadRecord& read);

// The lines a training run with the towers in the loop logs about what readable_records left
// out: "<key>: training reads N of M records (<skip_key>=skip left out K)", then one line per
// record left out and why.
std::vector<std::string> left_out_notes(const std::string& key, const std::string& skip_key,
                                        const nlohmann::json& index);

// `train --dry-run`'s text: "<series>: training reads N of M records from <where>" and
// prepared_report's lines of `index` (read_records' result, or a cache's index.json).
// towers_in_loop: training reads the dataset itself; in stop mode (skip false) it stops at a
// bad record, so a record left out throws std::invalid_argument with that text and the two ways
// around it (`<series>.on_bad_file=skip`, or a cache prepared with it).
std::string dry_run_report(const std::string& series, const std::string& where, const nlohmann::json& index,
                           bool towers_in_loop, bool skip);

// The report lines of a written cache's index.json: one per item (its metadata row, media and
// what its info says; the first `max_items`, then a count), one per group of items sharing a
// "bucket" (image series) or a "frames" count (clips), then each left-out record and why.
std::string prepared_report(const nlohmann::json& index, size_t max_items = 100);

// The sample of metadata row `row` (samples in row order, as load_media_dataset gives them).
const data::MediaSample& sample_of_row(const std::vector<data::MediaSample>& samples, int64_t row);

}  // namespace zeroshard::models::diffusion
