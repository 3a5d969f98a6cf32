// The safetensors format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the raw
// little-endian tensor bytes (offsets relative to the data section, no holes, no overlaps).
#pragma once

#include "io/file.h"
#include "zeroshard/shard.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::io {

struct TensorEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
  int64_t numel() const;
};

std::string safetensors_dtype(at::ScalarType t);
// "[2, 3]": how error messages and `inspect` print a shape.
std::string shape_text(const std::vector<int64_t>& shape);

// Streams tensors into a file whose header is known up front; written atomically (see
// AtomicFileWriter), so a crash never leaves a partial file at path.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorEntry> entries,
                    std::map<std::string, std::string> metadata = {});
  // Tensors must come in the order of `entries`, with matching shape (any dtype: converted).
  void write(const std::string& name, const at::Tensor& t);
  // Fails unless every declared tensor was written; fsyncs and renames into place.
  void finish();
  const std::vector<TensorEntry>& entries() const { return entries_; }
  uint64_t data_start() const { return data_start_; }
  uint64_t bytes() const { return file_.bytes_written(); }
  uint32_t crc32() const { return file_.crc32(); }

 private:
  std::vector<TensorEntry> entries_;
  AtomicFileWriter file_;
  uint64_t data_start_ = 0;
  size_t next_ = 0;
};

// An open safetensors file with a validated header. Reads any element range of a tensor,
// converted to float32, touching only those bytes.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws naming the file and tensor
  const std::string& path() const { return file_.path(); }
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const TensorEntry* find(const std::string& name) const;  // null when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t data_start() const { return data_start_; }
  // Elements [begin, end) of the flattened tensor into out (float32, end - begin elements).
  void read_range(const TensorEntry& e, int64_t begin, int64_t end, at::Tensor out) const;
  at::Tensor read(const std::string& name) const;  // the whole tensor, in its own dtype
  // Where elements [first, first + n) of `e` lie in this file (ParamSource::locate): whole when
  // they are all of a parameter of n elements.
  ParamLocation location(const TensorEntry& e, int64_t first = 0) const;

 private:
  ReadOnlyFile file_;
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_start_ = 0;
};

// The tensors of one released weights location, by name: a safetensors file, a
// `*.safetensors.index.json` ({"weight_map": {tensor: file}}, files relative to the index), or a
// folder holding one of model.safetensors.index.json, model.safetensors,
// diffusion_pytorch_model.safetensors.index.json, diffusion_pytorch_model.safetensors (the
// Hugging Face and diffusers layouts, tried in that order). Throws naming the path.
class SafetensorsSet {
 public:
  explicit SafetensorsSet(const std::string& path);
  // The file or index actually opened (a folder's resolved file), for messages.
  const std::string& path() const { return path_; }
  struct Where {
    const SafetensorsFile* file;
    const TensorEntry* entry;
  };
  const std::map<std::string, Where>& tensors() const { return where_; }
  const Where* find(const std::string& name) const;  // null when absent

 private:
  void open_index(const std::string& index_path);
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Where> where_;
};

// Hugging Face's sharded layout: <dir>/<stem>-0000i-of-0000N.safetensors plus
// <dir>/<stem>.safetensors.index.json ({"metadata": {"total_size"}, "weight_map"}), as
// transformers ("model") and diffusers ("diffusion_pytorch_model") save a model. Each file holds
// at most max_file_bytes (0: 5 GB, their default) unless one group alone is larger; a group's
// tensors stay in one file. values(g) returns group g's tensors in the order of groups[g] (any
// float dtype: converted to the entry's), so memory is one group at a time. Every file is
// written atomically. Returns the files written, the index last.
std::vector<std::string> write_sharded_safetensors(const std::string& dir, const std::string& stem,
                                                   const std::vector<std::vector<TensorEntry>>& groups,
                                                   const std::function<std::vector<at::Tensor>(size_t group)>& values,
                                                   uint64_t max_file_bytes = 0,
                                                   const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// The same groups in one file at `path`, no index (a release's single file: BFL's
// flux1-dev.safetensors), written atomically.
void write_safetensors_file(const std::string& path, const std::vector<std::vector<TensorEntry>>& groups,
                            const std::function<std::vector<at::Tensor>(size_t group)>& values,
                            const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Initializes a model from a safetensors file, or from the files listed by a
// `*.safetensors.index.json` (model.init_from): each rank reads only the byte ranges of its
// shards. check() requires exactly the model's parameters with the same shapes (any float
// dtype).
std::shared_ptr<ParamSource> safetensors_param_source(const std::string& path);

// Writes every parameter of a sharded model to one file, gathered one unit at a time and
// streamed by rank 0 (no rank holds more than one unit). A collective.
void write_full_parameters(ShardedModel& model, const std::string& path, at::ScalarType dtype = at::kFloat);

}  // namespace zeroshard::io
