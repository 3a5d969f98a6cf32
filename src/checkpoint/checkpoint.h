// Sharded checkpoints. A checkpoint is a folder `<root>/step_<8 digits>/` holding one file
// per rank (its shard of every flat buffer: fp32 master values — frozen buffers of a bf16
// param_dtype run as their stored bf16 values, the manifest's tensor "dtype" "BF16" —, AdamW
// exp_avg and exp_avg_sq, its CPU RNG state; each file in safetensors layout) and manifest.json: for every original
// tensor its name, shape, dtype and where its pieces live (file, byte offset per state,
// element range, buffer padding), a CRC-32 and size per file, the step, the config and the
// optimizer step count. `<root>/latest` names the newest complete checkpoint and is moved
// last, so a crash at any point of a save leaves the previous checkpoint intact.
//
// Loading maps tensors, not buffers: any world size and strategy reads any checkpoint, each
// rank reading only the byte ranges of its own shards.
#pragma once

#include "zeroshard/optim.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::ckpt {

inline const char* kManifestName = "manifest.json";
inline const char* kLatestName = "latest";

struct SaveOptions {
  int64_t step = 0;             // optimizer steps completed
  nlohmann::json config;        // the run's resolved config
  int64_t keep_last = 0;        // > 0: delete older checkpoints beyond this many
  // Fault injection for tests: this rank SIGKILLs itself halfway through writing its file.
  int kill_rank_midway = -1;
  // The parameters only (train.save_model_only): no AdamW moments, no RNG state. The manifest
  // says "model_only": true; such a checkpoint loads for sampling and export, never to resume.
  bool model_only = false;
};

// Writes the checkpoint of options.step under root; returns its folder. A collective.
std::string save_checkpoint(const std::string& root, ShardedModel& model, ShardedAdamW& optim,
                            const SaveOptions& options);

// Cleans up after saves that died: removes `*.partial` folders, and moves a `step_N.replaced`
// folder back to `step_N` when the save that replaced it died before finishing.
void recover_interrupted_saves(const std::string& root);

// A checkpoint folder from what a user may pass: the folder itself (has manifest.json), a
// checkpoints root (has `latest`), or a run folder (has checkpoints/latest).
std::string resolve_checkpoint(const std::string& path);

struct Piece {
  int rank = 0;
  std::string file;
  int64_t begin = 0, end = 0;              // elements of the flattened tensor
  std::map<std::string, uint64_t> offset;  // byte offset in file of element `begin`, per state
};

struct TensorRecord {
  std::string name;
  std::vector<int64_t> shape;
  bool trainable = true;
  int64_t numel = 0;
  // The saved dtype of the "param" state: kFloat, or kBFloat16 for a frozen tensor of a bf16
  // param_dtype run (it had no fp32 master). Optimizer states are float32.
  at::ScalarType dtype = at::kFloat;
  std::vector<Piece> pieces;  // sorted by begin, covering [0, numel)
};

struct FileRecord {
  int rank = 0;
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

class Checkpoint {
 public:
  // Parses and validates manifest.json (throws naming the file and field).
  explicit Checkpoint(const std::string& dir);
  ~Checkpoint();

  const std::string& dir() const { return dir_; }
  int64_t step() const { return step_; }
  int world_size() const { return world_size_; }  // ranks of one copy of the model (one file each)
  int replicas() const { return replicas_; }      // copies that trained (hybrid sharding), else 1
  const std::string& strategy() const { return strategy_; }
  int64_t optimizer_steps() const { return optimizer_steps_; }
  // Parameters only (saved with train.save_model_only): no optimizer or RNG state to resume.
  bool model_only() const { return model_only_; }
  const nlohmann::json& config() const { return config_; }
  const nlohmann::json& manifest() const { return manifest_; }
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  const std::vector<FileRecord>& files() const { return files_; }
  const TensorRecord* find(const std::string& name) const;

  // Elements [begin, end) of `state` ("param", "exp_avg", "exp_avg_sq") of a tensor into
  // out (float32; a bf16-saved tensor is widened, exactly). Every file touched is first checked once: present, of the manifest's
  // size, and with its CRC-32.
  void read(const TensorRecord& t, const std::string& state, int64_t begin, int64_t end, at::Tensor out);
  // Checks one file (present, size, CRC); returns "" when fine, else what is wrong.
  std::string check_file(const FileRecord& f) const;

  // The parameter values, as a source for fully_shard: check() demands exactly the model's
  // tensors with the same shapes. frozen_read_elsewhere: the run reads its frozen parameters
  // from the model's files (model.frozen_storage=file), so the checkpoint's frozen tensors are
  // not asked for.
  std::shared_ptr<ParamSource> param_source(bool frozen_read_elsewhere = false);
  // AdamW state into this rank's shards (or full buffers under no_shard) and the step count.
  // A collective under no_shard (the state is replicated from the shards).
  void load_optimizer(ShardedModel& model, ShardedAdamW& optim);
  // This rank's CPU generator state from the checkpoint's file of the same rank, if any.
  void restore_rng(int rank);

 private:
  void verify_once(const std::string& file);
  struct OpenFiles;

  std::string dir_;
  nlohmann::json manifest_;
  nlohmann::json config_;
  int64_t step_ = 0;
  int world_size_ = 0;
  int replicas_ = 1;
  std::string strategy_;
  int64_t optimizer_steps_ = 0;
  bool model_only_ = false;
  std::vector<TensorRecord> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<FileRecord> files_;
  std::unique_ptr<OpenFiles> open_;
};

// A consolidated safetensors export of a checkpoint (no ranks needed), streaming tensor by
// tensor: `state` is "param" (the weights) or an optimizer state; dtype kFloat or kBFloat16.
// With max_file_bytes > 0, out_path "x/model.safetensors" becomes files
// "x/model-00001-of-0000N.safetensors" of at most that size (a larger tensor gets a file of
// its own) plus "x/model.safetensors.index.json" mapping each tensor to its file.
// Returns the files written (the index last).
// merge_lora: a LoRA run's base with its adapters folded in — every Linear weight W with an
// adapter becomes W + (alpha / r) * B @ A (computed in float64, rounded once), and the
// *.lora_a / *.lora_b tensors are left out: the model of a run without adapters, under the
// same names (for model.init_from, or the series' released layout).
std::vector<std::string> export_safetensors(const std::string& checkpoint_dir, const std::string& out_path,
                                            at::ScalarType dtype, const std::string& state = "param",
                                            uint64_t max_file_bytes = 0,
                                            bool trainable_only = false, bool merge_lora = false);

// What `zeroshard inspect` prints; returns false when a file is missing or damaged.
bool describe(const std::string& checkpoint_dir, std::string* text, bool list_tensors = true);

}  // namespace zeroshard::ckpt
