// Where the engine's parameter values come from while fully_shard builds the shards
// (ShardOptions::param_source): seeded init, a safetensors file (io::safetensors_param_source),
// a checkpoint written at any world size (ckpt::Checkpoint::param_source), or a combination.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

// A parameter as the engine lays it out: name (the first qualified name of a tied parameter),
// full shape, and its place in its unit's flat buffer.
struct ParamInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // into the flat buffer, in elements
  int64_t numel = 0;
};

// Where a source reads a parameter from (ParamSource::locate): the engine's file-backed frozen
// storage (ShardOptions::frozen_storage) maps `file` and uses the bytes where they lie.
struct ParamLocation {
  std::string file;    // empty: the values are computed (seeded init), not read from a file
  bool whole = false;  // the parameter lies at `offset` as one row-major run of `dtype` elements
  uint64_t offset = 0;
  at::ScalarType dtype = at::kFloat;
  // The other files a conversion reads pieces from (a concatenation across shard files, a tied
  // copy compared as it is read): the storage checks them for changes as it checks `file`.
  std::vector<std::string> also_reads;
  bool in_file() const { return !file.empty(); }
};

// Where parameter values come from while fully_shard builds the shards. Each rank asks only
// for the elements it keeps, one parameter range at a time, so a model built inside
// nn::DeferredInit never exists whole on one rank (seeded init, a safetensors file, a
// checkpoint written at any world size).
class ParamSource {
 public:
  virtual ~ParamSource() = default;
  // Called once with every parameter before any read: throw naming the parameter (and the
  // file) when one is missing, has another shape, or when the source holds extra tensors.
  virtual void check(const std::vector<ParamInfo>& params) { (void)params; }
  // Writes elements [begin, end) of the row-major flattening of `param` into `out`, a
  // contiguous float32 tensor of end - begin elements.
  virtual void read(const ParamInfo& param, int64_t begin, int64_t end, at::Tensor out) = 0;
  // What the source found worth telling the user (tensors of a released file it leaves unread on
  // purpose, and why): logged by the trainer, printed by prepare and sample.
  virtual std::vector<std::string> notes() const { return {}; }
  // Where `param` is read from (after check()): a file with the whole parameter at a byte offset,
  // a file it is read from with a conversion (pieces concatenated, halves swapped), or nothing
  // (computed). The default: computed.
  virtual ParamLocation locate(const ParamInfo& param) const {
    (void)param;
    return {};
  }
};

// Computes each whole parameter with fn(name, tensor) (e.g. seeded init), keeps the requested
// range: memory is one parameter at a time.
std::shared_ptr<ParamSource> param_source_from_init(std::function<void(const std::string&, at::Tensor&)> fn);
// Parameters for which take_from_second(name) holds come from `second` (fresh LoRA adapters
// from the seeded init, say), the rest from `first` (the base model's file). Each source
// checks only its own parameters.
std::shared_ptr<ParamSource> combine_param_sources(std::shared_ptr<ParamSource> first,
                                                   std::shared_ptr<ParamSource> second,
                                                   std::function<bool(const std::string&)> take_from_second);
// Serves parameters named "<prefix>rest" from `inner`, which knows them as "rest" (a frozen
// tower's own safetensors file inside a pipeline). Combine it with combine_param_sources.
std::shared_ptr<ParamSource> prefixed_param_source(std::shared_ptr<ParamSource> inner, const std::string& prefix);

}  // namespace zeroshard
