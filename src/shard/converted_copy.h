// The converted copy of FrozenStorage::File (ShardOptions::converted_copy_dir): the frozen
// parameters a source can only read with a conversion (an fp32 file under bf16 compute,
// diffusers' separate q/k/v concatenated into our fused projection, halves swapped) are written
// once, in the compute dtype and our layout, into one safetensors file per unit in a folder
// beside the run; from then on they are used in place from there like every other frozen
// parameter, with no conversion and no buffer at each gather.
//
//   <dir>/<unit>.safetensors   the unit's converted parameters under our names; its metadata
//                              records the compute dtype and the path, size and modification
//                              time of every file each parameter was converted from
//
// A later run (a resume, another run given the same folder) reuses a file whose record matches
// what it would write, and rewrites one that does not (its sources changed, another dtype).
// The values are bitwise what the conversion at each gather computes: the fp32 values the source
// reads, rounded once to the compute dtype. The ranks share the writing (unit k by rank k mod W),
// then every rank checks every file and writes the ones it still cannot read (a host whose folder
// is not the writer's), so a folder on each host's own disk works as well as a shared one. A
// rank that fails to write makes every rank fail with the file named, never a hang.
#pragma once

#include "zeroshard/comm.h"
#include "zeroshard/param_source.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::shard {

// One unit's frozen parameters read from files (the engine's `mapped` buffer).
struct CopyUnit {
  std::string name;  // the unit's qualified name
  std::vector<ParamInfo> params;
};

struct ConvertedCopy {
  // Serves the copied parameters from the copy (ParamLocation: the copy, whole, in place; its
  // also_reads are the files it was converted from, checked for changes as before) and every
  // other parameter from the source it was made from.
  std::shared_ptr<ParamSource> source;
  int64_t params = 0, bytes = 0;    // copied parameters, their bytes in the compute dtype
  int units_written = 0, units_reused = 0;
  double write_seconds = 0;         // this rank's writing
  std::string note;                 // one line for the run's log; empty when nothing is converted
};

// Collective over comm (every rank calls it with the same units). Parameters that `source` can
// use in place under `compute_dtype` are left where they are.
ConvertedCopy make_converted_copy(std::shared_ptr<ParamSource> source, const std::vector<CopyUnit>& units,
                                  const std::string& dir, at::ScalarType compute_dtype, Communicator& comm);

}  // namespace zeroshard::shard
