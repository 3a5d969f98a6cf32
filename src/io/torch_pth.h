// State dicts written by `torch.save` (the zip format since PyTorch 1.6: `<archive>/data.pkl`, a
// pickle whose tensors name their storages `<archive>/data/<key>`, each an uncompressed zip
// entry), as some released checkpoints ship (Wan 2.1's Wan2.1_VAE.pth and
// models_t5_umt5-xxl-enc-bf16.pth).
//
// The pickle is read with libtorch's own unpickler, but the storages are not loaded: the file is
// memory-mapped and every tensor is a view on its zip entry, so a rank reading its shard's byte
// ranges touches only those pages (libtorch's torch::pickle_load reads the whole file into memory
// on every rank: ~11 GB for the umT5 file). libtorch's unpickler knows the opcodes torch.save
// writes for a state dict of two or more entries; a single-entry dict (or a final batch of one
// after 1,000s) uses SETITEM, which it refuses -- reported naming the file.
#pragma once

#include "io/safetensors.h"
#include "zeroshard/param_source.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::io {

// True when `path` names a torch.save file (.pth / .pt / .bin that is a zip archive).
bool is_torch_save_file(const std::string& path);

// A parameter source over a torch.save'd state dict (a dict from names to tensors, any float
// dtype; a legacy non-zip torch.save file is refused naming it). check() requires exactly the
// model's parameters with the same shapes, as safetensors_param_source does.
std::shared_ptr<ParamSource> torch_pth_param_source(const std::string& path);

// Either source, by the file's content: torch.save zip archives by torch_pth_param_source, the
// rest (.safetensors, *.safetensors.index.json) by safetensors_param_source.
std::shared_ptr<ParamSource> checkpoint_param_source(const std::string& path);

// Writes a state dict as torch.save does (archive "archive": the storages data/0, data/1, ... one
// per tensor, 64-byte aligned and uncompressed, then data.pkl and version), so that torch.load and
// torch_pth_param_source read it; the tensors are written as values(g) produces them, one group
// at a time (write_sharded_safetensors' groups; any float dtype, converted to the entry's), so
// memory holds one group. The pickle comes last, from tensors that hold no bytes. Written
// atomically (path.tmp, fsync, rename); returns the file's size.
uint64_t write_torch_save(const std::string& path, const std::vector<std::vector<TensorEntry>>& groups,
                          const std::function<std::vector<at::Tensor>(size_t group)>& values);

}  // namespace zeroshard::io
