// The config files users already have, as zeroshard settings: a DeepSpeed JSON
// (`--deepspeed ds_config.json`), an accelerate YAML (`--accelerate-config zero3.yaml`, with its
// embedded `deepspeed_config` or its `deepspeed_config_file`), and ms-swift / Megatron flag
// names (`--use_megatron_fsdp`, `--data_parallel_sharding_strategy`, `--micro_batch_size`,
// `--global_batch_size`, `--use_distributed_optimizer`).
//
// Every key in such a file is mapped to a zeroshard key, honoured as it is (a switch whose
// value is what zeroshard always does, e.g. `overlap_comm: true`), or refused with an
// std::invalid_argument naming the file, the key and why -- never ignored. `"auto"` (any key)
// means "the tool decides": zeroshard keeps its own value. docs/foreign_configs.md has the
// table of what is mapped, honoured and refused. Torch-free: returns text the caller feeds to
// train::load_config as `--set key=value` overrides (after the config file, before the user's
// own --set, so an explicit --set wins).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::train {

struct ForeignSetting {
  std::string key;     // zeroshard key ("parallel.zero_stage"); empty for a key honoured as it is
  std::string value;   // as `--set key=value` takes it; empty when automatic
  std::string source;  // "ds_config.json: zero_optimization.stage"
  std::string note;    // how it was converted, or why nothing needs to change
  bool automatic = false;  // "auto": zeroshard's value is kept
};

struct ForeignConfig {
  std::vector<ForeignSetting> settings;
  // accelerate's num_processes: not a config key but the world size the file was written for
  // (the caller compares it with --nproc or the launcher's world size).
  std::optional<int> nproc;
  std::string nproc_source;

  // "key=value" for every mapped setting, in order (automatic and honoured ones excluded).
  std::vector<std::string> overrides() const;
  // One line per setting, for `zeroshard config show`:
  //   parallel.zero_stage = 3   # zero3.yaml: deepspeed_config.zero_stage
  std::vector<std::string> describe() const;
};

// Adds `more` to `into`. The same zeroshard key from two places must agree (the sources are
// then both listed); otherwise throws naming both sources and values.
void merge(ForeignConfig& into, const ForeignConfig& more);

ForeignConfig read_deepspeed_config(const std::string& path);
ForeignConfig read_accelerate_config(const std::string& path);

// Flag name (with or without leading dashes, '-' or '_' between words) and value; a flag
// given without a value (Megatron's store_true form) is passed with value "true".
ForeignConfig megatron_flags(const std::vector<std::pair<std::string, std::string>>& flags);
// The flag names megatron_flags accepts, in their ms-swift spelling.
const std::vector<std::string>& megatron_flag_names();

}  // namespace zeroshard::train
