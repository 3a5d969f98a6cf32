// FrozenStorage::File: a frozen buffer's parameters read where they lie in the files its
// ParamSource reads (ParamSource::locate), instead of a shard in memory. Internal to the engine;
// FlatParam holds one when its buffer is file-backed.
//
// Each parameter is either
//   in place   stored whole in the compute dtype (a bf16 file under bf16 compute, an fp32 file
//              under fp32): the module's parameter is a view of the read-only mapping, for the
//              whole run; the kernel is told to read it ahead when its unit is about to run
//              (the engine's prefetch order) and that it may go first when the unit is done;
//   converted  anything else (an fp32 file under bf16, pieces concatenated, halves swapped): read
//              through the source into the unit's buffer when the unit is gathered, rounded to
//              the compute dtype once, as the Memory storage rounds it when it stores the shard
//              (or written so once, into a converted copy read in place: shard/converted_copy.h).
// Every file a parameter's values come from (ParamLocation::file and also_reads) is checked for
// changes before each use.
// Either way the values are bitwise those FrozenStorage::Memory computes with. Nothing is sharded
// or all-gathered: every rank reads the same files, and the ranks of a host share their pages.
#pragma once

#include "io/mapped_file.h"
#include "zeroshard/param_source.h"

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::shard {

struct ParamSlot;

// The files one engine maps: one mapping per file, shared by its units.
class MappedFiles {
 public:
  std::shared_ptr<io::MappedFile> get(const std::string& path);

 private:
  std::map<std::string, std::shared_ptr<io::MappedFile>> files_;
};

class FileBacked {
 public:
  // slots: the buffer's parameters with their offsets; each must be in a file (locate). Maps
  // the files; reads nothing yet.
  FileBacked(const std::vector<ParamSlot>& slots, std::shared_ptr<ParamSource> source, MappedFiles& files,
             at::ScalarType compute_dtype);

  // Whether a parameter of `numel` elements at `loc` is used in place under `compute_dtype`:
  // whole, in that dtype, aligned for it, inside a file of `file_size` bytes (else converted).
  static bool in_place(const ParamLocation& loc, int64_t numel, at::ScalarType compute_dtype, uint64_t file_size);

  // Converted parameters are read through a float32 scratch of at most this many elements.
  static constexpr int64_t kConvertChunk = int64_t{1} << 20;  // 4 MiB

  // Elements of the buffer the converted parameters need (0 when every one is in place).
  int64_t converted_numel() const { return converted_numel_; }
  // Bytes of parameters used in place (mapped, not allocated).
  int64_t mapped_bytes() const { return mapped_bytes_; }

  // Makes every parameter a view: of the mapping (in place), or of `buffer` (converted, its
  // converted_numel() elements; their values come with load()).
  void bind(std::vector<ParamSlot>& slots, const at::Tensor& buffer) const;
  // Before the unit runs: every file unchanged (throws naming it otherwise), the in-place bytes
  // asked ahead, the converted parameters read into `buffer`.
  void load(const std::vector<ParamSlot>& slots, const at::Tensor& buffer) const;
  // After the unit ran: its in-place pages may be reclaimed before others.
  void done() const;
  // Elements [begin, end) of the buffer's flat layout (padding: zeros) in the compute dtype: the
  // values a FrozenStorage::Memory shard of the same range holds.
  at::Tensor read_flat(const std::vector<ParamSlot>& slots, int64_t begin, int64_t end) const;

 private:
  struct Place {
    std::shared_ptr<io::MappedFile> file;
    bool in_place = false;
    uint64_t offset = 0, bytes = 0;  // in the file (in place)
    int64_t converted_offset = -1;   // in the buffer (converted)
  };
  // One parameter's values, whole, in the compute dtype (read, or a view of the mapping).
  at::Tensor values(const ParamSlot& slot, const Place& place) const;
  // A converted parameter read through the source into dst (its numel elements, compute dtype),
  // kConvertChunk elements at a time.
  void convert(const ParamSlot& slot, const at::Tensor& dst) const;

  std::shared_ptr<ParamSource> source_;
  at::ScalarType compute_dtype_;
  std::vector<Place> places_;
  std::vector<std::shared_ptr<io::MappedFile>> files_;  // each once
  int64_t converted_numel_ = 0, mapped_bytes_ = 0;
};

}  // namespace zeroshard::shard
