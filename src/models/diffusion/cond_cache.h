// The conditioning cache of the diffusion series: what a pipeline's frozen towers make of each
// record of a dataset folder (VAE latents, text states, masks, pooled vectors: the series names
// them), written once by `zeroshard prepare` and read by training instead of running the towers
// (DiffSynth-Studio's "split training").
//
// Layout (one folder):
//   index.json  {"format": the series' format string, "dataset": folder, "items": [{"shard": file,
//               "record": metadata record, "media": path as written in the metadata, "prompt": ...},
//               ...], "left_out": [messages], plus the series' shape keys (integers) that a
//               training run's config must match}
//   part-<rank>-<k>.safetensors  "<name>.<record>" float32 tensors of the records rank <rank>
//               encoded, <= 64 records per file.
// The items are the readable records in metadata order. Writing is a collective: rank q of W
// encodes records q, q + W, ... (record_rounds rounds each): a rank past the end runs one pass
// on record 0 and drops it, so sharded towers gather and free their units in step.
#pragma once

#include "zeroshard/comm.h"

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::io {
class SafetensorsFile;
}

namespace zeroshard::models::diffusion {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Rounds of tower passes every rank runs for `records` records on `world` ranks: ceil(N / W).
// Rank q's record of round r is r * W + q (>= records: a dummy pass).
int64_t record_rounds(int64_t records, int world);

class CacheWriter {
 public:
  // Refuses a `dir` that exists and is neither empty nor a cache (finish replaces it).
  CacheWriter(std::string dir, int rank);
  // The same refusal alone (Series::check_prepare, before any rank starts).
  static void check_folder(const std::string& dir);
  // A record this rank encoded: its tensors (stored float32 as "<name>.<record>") and what the
  // item's entry in index.json shows of it (frames, sizes, prompt tokens: the series says).
  void add(int64_t record, NamedTensors tensors, nlohmann::json info = nlohmann::json::object());
  // A record this rank could not read (prepare's on_bad_file=skip): listed in index.json after
  // meta's "left_out", in record order.
  void left_out(int64_t record, std::string message);
  // Collective over `comm`: each rank writes its files to <dir>.partial; rank 0 then writes
  // index.json ({"format": format, "items", "left_out"} merged into `meta`), the items in record
  // order, each {"shard", "record"} merged with its info and describe(record), and publishes the folder as
  // <dir> (replacing an older cache there). No item at all, or any rank failing to write, is an
  // error on every rank and leaves neither folder. Returns the number of items on rank 0, -1
  // elsewhere.
  int64_t finish(Communicator& comm, const std::string& format, nlohmann::json meta,
                 const std::function<nlohmann::json(int64_t record)>& describe);

 private:
  std::string dir_;
  int rank_;
  std::vector<std::pair<int64_t, NamedTensors>> done_;
  std::vector<nlohmann::json> info_;
  std::vector<std::pair<int64_t, std::string>> left_out_;
};

class CacheReader {
 public:
  // Opens <dir>/index.json: the format must be `format` and every (key, value) of `expect` must
  // equal the index's (errors name `key_prefix` + key, e.g. "z_image.height").
  CacheReader(std::string dir, const std::string& format, const std::vector<std::pair<std::string, int64_t>>& expect,
              const std::string& key_prefix);
  ~CacheReader();
  int64_t size() const { return static_cast<int64_t>(items_.size()); }
  const nlohmann::json& item(int64_t i) const { return items_.at(static_cast<size_t>(i)); }
  // Tensor `name` of item i as float32.
  at::Tensor read(int64_t i, const std::string& name) const;

 private:
  std::string dir_;
  std::vector<nlohmann::json> items_;
  mutable std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files_;
};

// Series::unprepared of the diffusion series: "<key>: <cache> is not prepared yet (...)" when
// training would read the cache `cache` (key `key`), `prepare` can write it (the dataset is named)
// and <cache>/index.json does not exist; else empty.
std::string unprepared_cache(const std::string& key, const std::string& cache, const std::string& dataset);

// The training order of a dataset of N items: sample n is item perm_e[n mod N], e = n / N, with
// perm_e a permutation drawn from (seed, salt + e). Pure in (seed, n): every rank, world size and
// resumed run agrees.
class EpochOrder {
 public:
  EpochOrder(uint64_t seed, std::string salt, int64_t items);
  int64_t item_of(int64_t n) const;
  int64_t size() const { return items_; }

 private:
  uint64_t seed_;
  std::string salt_;
  int64_t items_;
  mutable std::map<int64_t, at::Tensor> perms_;
};

// {"towers_s": the mean over the ranks of `seconds`} (a pipeline's time in its frozen towers
// since the last call), then seconds = 0. A collective over comm.
nlohmann::json towers_seconds_metric(Communicator& comm, double& seconds);

nlohmann::json read_json_file(const std::string& path);
// Written to <path>.tmp, then renamed into place.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace zeroshard::models::diffusion
