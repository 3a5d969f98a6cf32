// The safetensors format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then the raw
// little-endian tensor bytes (offsets relative to the data section).
#pragma once

#include "zeroshard/shard.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::io {

struct TensorEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets
};

std::string safetensors_dtype(at::ScalarType t);

// Streams tensors into a file whose header is known up front; written under a temporary
// name and renamed into place by finish(), so a crash never leaves a partial file at path.
class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<TensorEntry> entries,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  // Tensors must come in the order of `entries`, with matching shape and dtype.
  void write(const std::string& name, const at::Tensor& t);
  void finish();

 private:
  std::string path_, tmp_path_;
  std::vector<TensorEntry> entries_;
  size_t next_ = 0;
  std::ofstream out_;
  bool finished_ = false;
};

// Writes every parameter of a sharded model, gathered one unit at a time, to one file
// (written by rank 0). A collective: every rank must call it.
void write_full_parameters(ShardedModel& model, const std::string& path);

// Reads the header; throws naming the file when it is malformed or offsets are inconsistent.
std::vector<TensorEntry> read_safetensors_header(const std::string& path, uint64_t* data_start = nullptr);
at::Tensor read_safetensors_tensor(const std::string& path, const std::string& name);

}  // namespace zeroshard::io
