// The typed run configuration: YAML files (with `base:` inheritance) plus --set overrides. Every
// key is known, typed, range-checked and has a help line; an unknown key is an error naming the
// closest one, and a key of another model series names the series it belongs to. The struct
// mirrors the key names: `train.steps` is `cfg.train.steps`; the model series' own keys live in
// its SeriesConfig (src/models/<series>/), reached with cfg.series_config<T>().
#pragma once

#include "train/config_keys.h"
#include "zeroshard/nn/hookable.h"
#include "zeroshard/shard.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace zeroshard::nn {
struct LoraOptions;
}

namespace zeroshard::train {

struct TrainConfig;

// A model series' config section(s): registered by the series (src/models/<series>/), one
// instance per run for the series model.series names.
class SeriesConfig {
 public:
  virtual ~SeriesConfig() = default;
  virtual std::unique_ptr<SeriesConfig> clone() const = 0;
  // The series' keys, bound to this object's fields. Keys that describe the model (its shape:
  // what a checkpoint must agree with) are registered inside a ConfigKeys::ModelScope.
  virtual void register_keys(ConfigKeys& keys) = 0;
  // Cross-field checks, with the rest of the run's config; throws naming the keys.
  virtual void validate(const TrainConfig& c) const { (void)c; }
};

template <class Derived>
class SeriesConfigBase : public SeriesConfig {
 public:
  std::unique_ptr<SeriesConfig> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

enum class DType { FP32, BF16 };
enum class Bf16Matmul { Auto, Native, ViaFp32 };  // mixed_precision.bf16_matmul (src/nn/matmul.h)
enum class OnNonfinite { Abort, Skip };
enum class FailKind { Exception, Sigkill, SigkillInSave, Nan, Desync };

struct TrainSection {
  int64_t steps = 200;
  int64_t micro_batch_size = 8;
  int64_t grad_accum = 1;
  int64_t global_batch_size = 0;  // sequences per step over all ranks; > 0 derives grad_accum
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip_grad_norm = 1.0;
  int64_t seed = 1234;
  bool activation_checkpointing = false;
  int64_t log_every = 10;
  int64_t eval_every = 0;  // steps between validation evaluations (and after the last); 0: off
  // Checkpoints (<run_dir>/checkpoints/step_<N>/, see src/checkpoint/checkpoint.h).
  int64_t save_every = 0;  // optimizer steps between saves; 0 = only the final save
  int64_t keep_last = 0;   // keep this many newest checkpoints; 0 = all
  bool save_final = true;
  bool save_on_signal = true;
  // Checkpoints hold the parameters only (no AdamW state, no RNG state): for handing a model
  // to inference or export; such a checkpoint cannot be resumed.
  bool save_model_only = false;
  OnNonfinite on_nonfinite = OnNonfinite::Abort;
  std::string resume;  // a checkpoint, checkpoints folder or run folder to continue from
};

struct LoraSection {
  int64_t rank = 0;  // 0: off
  double alpha = 16.0;
  std::string targets = "wq,wk,wv,wo";
  std::string init_from;  // a PEFT adapter (folder or adapter_model.safetensors) to continue from
};

struct MixedPrecisionSection {
  DType param_dtype = DType::FP32;   // gathers and compute
  DType reduce_dtype = DType::FP32;  // gradient reduce-scatters
  Bf16Matmul bf16_matmul = Bf16Matmul::Auto;
};

struct ParallelSection {
  Strategy strategy = Strategy::OptimGradsParams;
  int64_t zero_stage = -1;  // alias of strategy; -1 = not set
  double comm_timeout_s = 300;
  int64_t threads = 0;  // intra-op threads per rank; 0 = cores / local ranks
  bool prefetch = true;
  int64_t max_live_units = 2;
  int64_t persistence_threshold = 0;
  int64_t reduce_bucket_bytes = 0;
  bool hybrid = false;
  int64_t shard_group_size = 0;  // 0 = the ranks of one host (LOCAL_WORLD_SIZE)
};

struct DataSection {
  int64_t seed = 1234;  // the series' data keys (source, path, shapes) are the series'
};

struct RunSection {
  std::string dir;  // default runs/<config>-<timestamp>
  // A folder holding an earlier run's results (metrics, checkpoints, summary) is only reused
  // with --resume, or with overwrite: its results are then removed first (src/io/run_lock.h).
  bool overwrite = false;
  bool tensorboard = false;       // <run_dir>/events.out.tfevents.*: the scalars of metrics.jsonl
  bool save_16bit_model = false;  // each checkpoint also gets model.safetensors in bf16 (consolidated)
  double peak_tflops = 0;         // per rank, for MFU; 0: measured by a GEMM at the start
  bool dump_init = false;
  bool dump_batches = false;
  bool dump_final_shards = false;
  int64_t profile_step = 0;  // > 0: that step's CPU time by kind (train/op_profile.h) in the log
  bool progress = true;
  int64_t max_rss_mb = 0;
};

struct DebugSection {
  // Fault injection for tests: at step fail_at_step (0 = off), rank fail_rank fails as fail_kind.
  int64_t fail_at_step = 0;
  int64_t fail_rank = 0;
  FailKind fail_kind = FailKind::Exception;
  bool check_desync = false;
  nn::RecomputeCheck check_recompute = nn::RecomputeCheck::Off;
};

struct TrainConfig {
  TrainConfig();  // the default job (`./run.sh`): series llama with its defaults
  TrainConfig(const TrainConfig& other);
  TrainConfig& operator=(const TrainConfig& other);
  TrainConfig(TrainConfig&&) = default;
  TrainConfig& operator=(TrainConfig&&) = default;
  ~TrainConfig();

  std::string series = "llama";  // model.series (src/models/series_list.cpp)
  std::string init_from;         // model.init_from: safetensors with every parameter (LoRA: every base one)
  FrozenStorage frozen_storage = FrozenStorage::Memory;  // model.frozen_storage (docs/frozen_storage.md)
  std::string frozen_converted = "gather";  // model.frozen_converted: gather | copy
  std::string frozen_copy_dir;              // model.frozen_copy_dir (empty: <run folder>/frozen_converted)
  std::unique_ptr<SeriesConfig> model;  // the series' own keys
  TrainSection train;
  LoraSection lora;
  MixedPrecisionSection mixed_precision;
  ParallelSection parallel;
  DataSection data;
  RunSection run;
  DebugSection debug;
  std::string config_path;  // the file it was loaded from, if any
  // False for a config that describes a model only (load_model_config): the series' checks that
  // need its data (a dataset or cache to read) are skipped.
  bool needs_data = true;

  // The series' config as its type; throws naming the series when it is another.
  template <class T>
  const T& series_config() const {
    const T* t = dynamic_cast<const T*>(model.get());
    if (t == nullptr) throw std::logic_error("model.series " + series + " has another config type");
    return *t;
  }
  template <class T>
  T& series_config() {
    return const_cast<T&>(static_cast<const TrainConfig*>(this)->series_config<T>());
  }
};

// Every key of this config (the core sections', then the series'), bound to its fields.
ConfigKeys config_keys(TrainConfig& c);

// Where each value came from: "default", a file path, "--set", or a foreign setting's source
// ("ds_config.json: zero_optimization.stage").
using Provenance = std::map<std::string, std::string>;

// A "key=value" override and where it came from. Foreign ones (DeepSpeed / accelerate files,
// Megatron flags: src/train/foreign_config.h) rank between the config file and --set.
struct ConfigOverride {
  std::string text;             // key=value
  std::string source = "--set";
  bool foreign = false;
};

// Loads path (may be empty: defaults only), then applies "key=value" overrides in order.
// Throws std::invalid_argument naming the file, key, value and what is allowed.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                        Provenance* provenance = nullptr);
// The same with each override's source (its own name: `load_config(path, {})` stays unambiguous).
TrainConfig load_config_sourced(const std::string& path, const std::vector<ConfigOverride>& overrides,
                                Provenance* provenance = nullptr, bool needs_data = true);

// The same for a command that builds the model without its data (`zeroshard seed-weights`):
// needs_data is false, so a config without a dataset or cache loads.
TrainConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides);

// Cross-field checks (alias agreement, series checks, files that must exist...).
void validate(TrainConfig& c);

// Checks that need the world size: train.global_batch_size must be a multiple of
// world_size * micro_batch_size (it then sets grad_accum); a hybrid shard group (0 resolves to
// local_world_size) must divide the world. Throws naming keys and values.
void apply_world_size(TrainConfig& c, int world_size, int local_world_size);

// lora.* as the options of nn::apply_lora (lora.targets split at commas).
nn::LoraOptions lora_options(const TrainConfig& c);

// The engine options of this config (strategy, wrap policy of the series, prefetch, mixed
// precision, checkpointing...) — one function for training and sampling. No param_source.
ShardOptions shard_options(const TrainConfig& c);

at::ScalarType scalar_type(DType d);

// Every key with its current value, in registration order.
std::vector<std::pair<std::string, std::string>> config_items(const TrainConfig& c);

// The JSON written to <run_dir>/config.json (nested by the dotted key prefixes).
nlohmann::json config_to_json(const TrainConfig& c, int world_size);

// From a run's saved config (as config_to_json wrote it): "key=value" overrides that rebuild its
// model and data shapes — model.series, every key of that series except the files its first
// values came from (`*_from`), lora.* and data.seed. For `sample` and exports.
std::vector<std::string> model_overrides(const nlohmann::json& saved);

// The keys describing the model (ConfigKey::describes_model) whose value in `saved` differs
// from `c`, as "key: saved X, this run Y" lines (empty when they agree). For train.resume.
std::vector<std::string> model_differences(const TrainConfig& c, const nlohmann::json& saved);

}  // namespace zeroshard::train
