#include "train/config.h"

#include "models/series.h"
#include "nn/layers.h"
#include "util/text.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>

namespace zeroshard::train {

namespace fs = std::filesystem;

TrainConfig::TrainConfig() : model(models::find_series(series).make_config()) {}
TrainConfig::TrainConfig(const TrainConfig& o)
    : series(o.series),
      init_from(o.init_from),
      frozen_storage(o.frozen_storage),
      frozen_converted(o.frozen_converted),
      frozen_copy_dir(o.frozen_copy_dir),
      model(o.model ? o.model->clone() : nullptr),
      train(o.train),
      lora(o.lora),
      mixed_precision(o.mixed_precision),
      parallel(o.parallel),
      data(o.data),
      run(o.run),
      debug(o.debug),
      config_path(o.config_path),
      needs_data(o.needs_data) {}
TrainConfig& TrainConfig::operator=(const TrainConfig& o) {
  if (this != &o) *this = TrainConfig(o);
  return *this;
}
TrainConfig::~TrainConfig() = default;

ConfigKeys config_keys(TrainConfig& c) {
  ConfigKeys k;
  const int64_t big = std::numeric_limits<int32_t>::max();
  std::vector<std::string> series_names;
  for (const auto& s : models::all_series()) series_names.push_back(s.name);
  // model.series is read before the other keys (it decides which keys exist): see load_config.
  k.add_string("model.series", &c.series, series_names, "the model series (src/models/<series>/)");
  k.add_path("model.init_from", &c.init_from,
             "a safetensors file (or index) or a torch.save state dict (.pth) with every parameter; LoRA: every base parameter");
  k.add_enum<FrozenStorage>("model.frozen_storage", &c.frozen_storage,
                            {{"memory", FrozenStorage::Memory}, {"file", FrozenStorage::File}},
                            "where frozen weights read from files live: each rank's shard in memory, or used in place "
                            "from the memory-mapped files (shared by the host's ranks; docs/frozen_storage.md)");
  k.add_string("model.frozen_converted", &c.frozen_converted, {"gather", "copy"},
               "model.frozen_storage=file: frozen weights the files hold in another dtype or layout (an fp32 file under "
               "bf16, diffusers' separate q/k/v) are converted at each gather (gather), or written once converted into "
               "model.frozen_copy_dir and read in place from there (copy)");
  k.add_path("model.frozen_copy_dir", &c.frozen_copy_dir,
             "model.frozen_converted=copy: the folder of the converted copy (reused while its sources are unchanged); "
             "default <run folder>/frozen_converted");

  TrainSection& t = c.train;
  k.add_int("train.steps", &t.steps, 1, big, "optimizer steps");
  k.add_int("train.micro_batch_size", &t.micro_batch_size, 1, 1 << 20, "samples per rank per micro-batch");
  k.add_int("train.grad_accum", &t.grad_accum, 1, 1 << 20, "micro-batches per optimizer step");
  k.add_int("train.global_batch_size", &t.global_batch_size, 0, 1 << 30,
            "samples per step over all ranks (sets train.grad_accum for the world size); 0: off");
  k.add_float("train.lr", &t.lr, 0.0, 10.0, "peak learning rate (linear warmup, cosine decay)");
  k.add_float("train.min_lr", &t.min_lr, 0.0, 10.0, "learning rate at the last step");
  k.add_int("train.warmup_steps", &t.warmup_steps, 0, big, "steps of linear warmup");
  k.add_float("train.weight_decay", &t.weight_decay, 0.0, 10.0, "AdamW decoupled weight decay");
  k.add_float("train.beta1", &t.beta1, 0.0, 0.999999, "AdamW beta1");
  k.add_float("train.beta2", &t.beta2, 0.0, 0.99999999, "AdamW beta2");
  k.add_float("train.eps", &t.eps, 1e-30, 1.0, "AdamW epsilon");
  k.add_float("train.clip_grad_norm", &t.clip_grad_norm, 0.0, 1e12, "global gradient-norm clip; 0: off");
  k.add_int("train.seed", &t.seed, 0, std::numeric_limits<int64_t>::max(), "seed of the initial weights");
  k.add_bool("train.activation_checkpointing", &t.activation_checkpointing,
             "recompute each unit in backward instead of keeping its activations");
  k.add_int("train.log_every", &t.log_every, 1, big, "steps between progress lines");
  k.add_int("train.eval_every", &t.eval_every, 0, big,
            "steps between validation losses (and after the last step), on the series' held-out data; 0: off");
  k.add_int("train.save_every", &t.save_every, 0, big, "steps between checkpoints; 0: only the final one");
  k.add_int("train.keep_last", &t.keep_last, 0, big, "checkpoints kept (newest); 0: all");
  k.add_bool("train.save_final", &t.save_final, "save after the last step");
  k.add_bool("train.save_on_signal", &t.save_on_signal, "SIGINT/SIGTERM: save after the step, then exit");
  k.add_bool("train.save_model_only", &t.save_model_only,
             "checkpoints hold the parameters only (no AdamW or RNG state): for inference; cannot be resumed");
  k.add_enum<OnNonfinite>("train.on_nonfinite", &t.on_nonfinite,
                          {{"abort", OnNonfinite::Abort}, {"skip", OnNonfinite::Skip}},
                          "a NaN/Inf loss or gradient norm: stop every rank, or skip the step on all");
  k.add_path("train.resume", &t.resume, "a checkpoint, checkpoints folder or run folder to continue from");

  k.add_int("lora.rank", &c.lora.rank, 0, 1 << 16, "LoRA rank; 0: off (full training)");
  k.add_float("lora.alpha", &c.lora.alpha, 0.0, 1e6, "LoRA alpha (the adapter is scaled by alpha / rank)");
  k.add_string("lora.targets", &c.lora.targets, {}, "comma-separated Linear layers to adapt: a last name component (wq) or the last components (ffn.0)");
  k.add_path("lora.init_from", &c.lora.init_from,
             "a PEFT adapter (folder with adapter_config.json, or its adapter_model.safetensors) to continue from");

  const std::vector<std::pair<std::string, DType>> dtypes = {{"fp32", DType::FP32}, {"bf16", DType::BF16}};
  k.add_enum<DType>("mixed_precision.param_dtype", &c.mixed_precision.param_dtype, dtypes,
                    "dtype of gathers and compute (masters and AdamW state stay fp32)");
  k.add_enum<DType>("mixed_precision.reduce_dtype", &c.mixed_precision.reduce_dtype, dtypes,
                    "dtype of the gradient reduce-scatters (accumulated in fp32)");
  k.add_enum<Bf16Matmul>("mixed_precision.bf16_matmul", &c.mixed_precision.bf16_matmul,
                         {{"auto", Bf16Matmul::Auto}, {"native", Bf16Matmul::Native}, {"via_fp32", Bf16Matmul::ViaFp32}},
                         "how bf16 products run (src/nn/matmul.h)");

  ParallelSection& p = c.parallel;
  // parse_strategy accepts the zero-stage aliases and lists the valid names.
  k.add_custom("parallel.strategy", "enum", "no_shard, optim, optim_grads, optim_grads_params, or a zero stage 0-3",
               "what is sharded: optimizer state, + gradients, + parameters",
               [&p](const std::string& v) { p.strategy = parse_strategy(v); },
               [&p] { return strategy_name(p.strategy); });
  k.add_int("parallel.zero_stage", &p.zero_stage, -1, 3,
            "alias of parallel.strategy (DeepSpeed's numbering 0-3); -1: not set");
  k.add_float("parallel.comm_timeout_s", &p.comm_timeout_s, 1.0, 86400.0, "timeout of every collective");
  k.add_int("parallel.threads", &p.threads, 0, 1024,
            "intra-op threads per rank; 0: the cores of this process's CPU mask / local ranks. Where other processes "
            "keep the cores busy, 1 is the robust choice: several threads per rank then wait on each other "
            "(docs/benchmarks.md, contention)");
  k.add_bool("parallel.prefetch", &p.prefetch, "ZeRO-3 gathers the next units while one computes");
  k.add_int("parallel.max_live_units", &p.max_live_units, 1, 1 << 20, "gathered units at once with prefetch");
  k.add_int("parallel.persistence_threshold", &p.persistence_threshold, 0, big,
            "ZeRO-3 keeps buffers of at most this many elements replicated");
  k.add_int("parallel.reduce_bucket_bytes", &p.reduce_bucket_bytes, 0, big,
            "gradients smaller than this share one reduce-scatter");
  k.add_bool("parallel.hybrid", &p.hybrid, "shard within groups of ranks, replicate across the groups");
  k.add_int("parallel.shard_group_size", &p.shard_group_size, 0, 1 << 20,
            "hybrid: ranks per shard group; 0: the ranks of one host");

  k.add_int("data.seed", &c.data.seed, 0, std::numeric_limits<int64_t>::max(), "seed of the data order and noise");

  k.add_path("run.dir", &c.run.dir, "the run folder; default runs/<config>-<timestamp>");
  k.add_bool("run.overwrite", &c.run.overwrite,
             "start over in a run.dir that holds an earlier run's results, removing them (else --resume)");
  k.add_bool("run.tensorboard", &c.run.tensorboard, "write TensorBoard event files (the metrics.jsonl scalars)");
  k.add_bool("run.save_16bit_model", &c.run.save_16bit_model,
             "each checkpoint also gets model.safetensors: every parameter consolidated, in bf16");
  k.add_float("run.peak_tflops", &c.run.peak_tflops, 0.0, 1e9,
              "peak TFLOP/s of one rank, for the MFU figure; 0: measured by a GEMM at the start");
  k.add_bool("run.dump_init", &c.run.dump_init, "write <run>/init.safetensors (the initial weights)");
  k.add_bool("run.dump_batches", &c.run.dump_batches, "write <run>/batches.rank<r>.bin (each rank's inputs)");
  k.add_bool("run.dump_final_shards", &c.run.dump_final_shards, "write <run>/final_shard.rank<r>.bin");
  k.add_int("run.profile_step", &c.run.profile_step, 0, int64_t{1} << 40,
            "> 0: profile that step's operators: its time by kind (GEMM, attention, elementwise, optimizer, "
            "autograd, exposed communication, overhead) in rank<r>.log and <run>/profile.rank<r>.json");
  k.add_bool("run.progress", &c.run.progress, "print progress on rank 0");
  k.add_int("run.max_rss_mb", &c.run.max_rss_mb, 0, big, "fail a rank whose peak RSS exceeds this; 0: off");

  DebugSection& d = c.debug;
  k.add_int("debug.fail_at_step", &d.fail_at_step, 0, big, "fault injection: the step (0: off)");
  k.add_int("debug.fail_rank", &d.fail_rank, 0, 1 << 20, "fault injection: the rank");
  k.add_bool("debug.check_desync", &d.check_desync, "ranks compare every collective before running it");
  k.add_enum<nn::RecomputeCheck>("debug.check_recompute", &d.check_recompute,
                                 {{"off", nn::RecomputeCheck::Off},
                                  {"shape", nn::RecomputeCheck::Shape},
                                  {"bitwise", nn::RecomputeCheck::Bitwise}},
                                 "verify activation-checkpointing recomputes against their forward");
  k.add_enum<FailKind>("debug.fail_kind", &d.fail_kind,
                       {{"exception", FailKind::Exception},
                        {"sigkill", FailKind::Sigkill},
                        {"sigkill_in_save", FailKind::SigkillInSave},
                        {"nan", FailKind::Nan},
                        {"desync", FailKind::Desync}},
                       "fault injection: throw, SIGKILL, SIGKILL halfway through saving, NaN loss, extra barrier");
  c.model->register_keys(k);
  return k;
}

namespace {

// level: 0 default, 1 a config file, 2 a foreign setting (DeepSpeed/accelerate/Megatron), 3 --set.
struct Item {
  std::string key, value, source;
  int level = 1;
};

void flatten(const YAML::Node& node, const std::string& prefix, const std::string& file, std::vector<Item>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, file, out);
    }
  } else if (node.IsScalar()) {
    out.push_back({prefix, node.Scalar(), file});
  } else if (node.IsSequence()) {
    // A list of scalars (e.g. vae.channel_mult: [1, 2, 2]) reaches its key as "1,2,2".
    std::string joined;
    for (const auto& item : node) {
      if (!item.IsScalar()) throw std::invalid_argument(file + ": key '" + prefix + "' must be a list of plain values");
      joined += (joined.empty() ? "" : ",") + item.Scalar();
    }
    out.push_back({prefix, joined, file});
  } else if (node.IsNull()) {
    throw std::invalid_argument(file + ": key '" + prefix + "' has no value");
  } else {
    throw std::invalid_argument(file + ": key '" + prefix + "' must be a value or a list of values");
  }
}

void read_file(const std::string& path, std::vector<Item>& items, std::set<std::string>& chain) {
  const std::string canon = fs::weakly_canonical(path).string();
  if (!chain.insert(canon).second) throw std::invalid_argument(path + ": 'base' inheritance forms a cycle");
  if (!fs::exists(path)) throw std::invalid_argument("config file '" + path + "' does not exist");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument("config file '" + path + "' is not valid YAML: " + e.what());
  }
  if (!root.IsMap()) throw std::invalid_argument("config file '" + path + "' must be a mapping of keys");
  if (root["base"]) {
    fs::path base = root["base"].as<std::string>();
    if (base.is_relative()) base = fs::path(path).parent_path() / base;
    read_file(base.string(), items, chain);
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key == "base") continue;
    flatten(kv.second, key, path, items);
  }
}

// A key this run's series does not know: the series that have it, or the closest known key.
[[noreturn]] void unknown_key(const ConfigKeys& keys, const TrainConfig& c, const std::string& name,
                              const std::string& value, const std::string& where) {
  std::string owners;
  for (const auto& s : models::all_series()) {
    if (s.name == c.series) continue;
    TrainConfig other;
    other.series = s.name;
    other.model = s.make_config();
    if (config_keys(other).find(name) != nullptr) owners += (owners.empty() ? "" : ", ") + s.name;
  }
  if (!owners.empty()) {
    throw std::invalid_argument(where + ": " + name + "=" + value + " applies to model.series: " + owners + ", not " +
                                c.series);
  }
  keys.get(name, where);  // throws "unknown config key ...; did you mean ..."
  throw std::logic_error("unreachable");
}

}  // namespace

TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides, Provenance* provenance) {
  std::vector<ConfigOverride> sourced;
  for (const auto& o : overrides) sourced.push_back({o, "--set", false});
  return load_config_sourced(path, sourced, provenance);
}

TrainConfig load_model_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::vector<ConfigOverride> sourced;
  for (const auto& o : overrides) sourced.push_back({o, "--set", false});
  return load_config_sourced(path, sourced, nullptr, /*needs_data=*/false);
}

TrainConfig load_config_sourced(const std::string& path, const std::vector<ConfigOverride>& overrides,
                                Provenance* provenance, bool needs_data) {
  std::vector<Item> items;
  if (!path.empty()) {
    std::set<std::string> chain;
    read_file(path, items, chain);
  }
  for (const auto& o : overrides) {
    const auto eq = o.text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument(o.source + " '" + o.text + "': expected key=value, e.g. --set train.steps=100");
    }
    items.push_back({o.text.substr(0, eq), o.text.substr(eq + 1), o.source, o.foreign ? 2 : 3});
  }
  // model.series decides which keys exist: the last value given wins.
  TrainConfig c;
  for (const auto& it : items) {
    if (it.key != "model.series") continue;
    try {
      models::find_series(it.value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument((it.source == "--set" ? "--set" : it.source) + ": model.series: " + e.what());
    }
    c.series = it.value;
  }
  c.model = models::find_series(c.series).make_config();
  if (!path.empty()) c.config_path = path;

  Provenance local;
  if (provenance == nullptr) provenance = &local;
  ConfigKeys keys = config_keys(c);
  std::map<std::string, int> levels;  // key -> the level of its value's source
  for (const auto& k : keys.all()) {
    (*provenance)[k.name] = "default";
    levels[k.name] = 0;
  }
  for (const auto& it : items) {
    const std::string where = it.source;
    const ConfigKey* key = keys.find(it.key);
    if (key == nullptr) unknown_key(keys, c, it.key, it.value, where);
    try {
      // A path written in a config file is relative to that file's folder; one given by --set, to
      // the working directory (docs/configs.md).
      key->set(it.level == 1 ? resolve_config_paths(*key, it.value, it.source) : it.value);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + (where == "--set" ? " " : ": ") + it.key + ": " + e.what() + " (expected " +
                                  key->allowed + ")");
    }
    (*provenance)[it.key] = it.source;
    levels[it.key] = it.level;
  }
  // parallel.strategy and its alias parallel.zero_stage: the later source wins (--set over a
  // foreign file over a config file over the default); the same level giving both,
  // differently, is an error.
  ParallelSection& p = c.parallel;
  if (p.zero_stage >= 0) {
    auto level = [&levels](const std::string& key) { return levels[key]; };
    const Strategy from_stage = strategy_from_zero_stage(static_cast<int>(p.zero_stage));
    const std::string& sp = (*provenance)["parallel.strategy"];
    const std::string& zp = (*provenance)["parallel.zero_stage"];
    const std::string sk = "parallel.strategy", zk = "parallel.zero_stage";
    if (from_stage != p.strategy) {
      if (level(sk) == level(zk)) {
        throw std::invalid_argument("parallel.zero_stage=" + std::to_string(p.zero_stage) + " (" +
                                    strategy_name(from_stage) + ", from " + zp + ") contradicts parallel.strategy=" +
                                    strategy_name(p.strategy) + " (from " + sp + "); set only one of them");
      }
      if (level(sk) > level(zk)) p.zero_stage = static_cast<int64_t>(p.strategy);
    }
  }
  c.needs_data = needs_data;
  validate(c);
  return c;
}

void validate(TrainConfig& c) {
  ParallelSection& p = c.parallel;
  // The alias sets the strategy (load_config rejects contradicting both).
  if (p.zero_stage >= 0) p.strategy = strategy_from_zero_stage(static_cast<int>(p.zero_stage));
  const models::Series& series = models::find_series(c.series);
  const TrainConfig defaults;
  if (c.lora.rank > 0 && !series.supports_lora) {
    throw std::invalid_argument("lora.rank=" + std::to_string(c.lora.rank) + ": model.series " + c.series +
                                " has no LoRA adapters");
  }
  if (c.lora.rank == 0 && (c.lora.alpha != defaults.lora.alpha || c.lora.targets != defaults.lora.targets)) {
    throw std::invalid_argument("lora.alpha and lora.targets apply only with lora.rank > 0 (LoRA is off)");
  }
  if (c.lora.rank == 0 && !c.lora.init_from.empty()) {
    throw std::invalid_argument("lora.init_from=" + c.lora.init_from +
                                " continues from a LoRA adapter, but LoRA is off; set lora.rank (and lora.alpha, "
                                "lora.targets) as the adapter's adapter_config.json has them");
  }
  if (!c.lora.init_from.empty() && !c.train.resume.empty()) {
    throw std::invalid_argument("lora.init_from and train.resume both set: a resumed run takes its adapters from the "
                                "checkpoint; set only one");
  }
  if (!c.lora.init_from.empty() && !fs::exists(c.lora.init_from)) {
    throw std::invalid_argument("lora.init_from: '" + c.lora.init_from + "' does not exist");
  }
  if (c.lora.rank > 0 && c.lora.targets.empty()) {
    throw std::invalid_argument("lora.targets is empty: name the Linear layers to adapt, e.g. wq,wv");
  }
  if (!c.init_from.empty() && !c.train.resume.empty()) {
    throw std::invalid_argument("model.init_from and train.resume both set: a resumed run takes its weights from the "
                                "checkpoint; set only one");
  }
  if (!c.init_from.empty() && !fs::exists(c.init_from)) {
    throw std::invalid_argument("model.init_from: file '" + c.init_from + "' does not exist");
  }
  if (c.debug.check_recompute != nn::RecomputeCheck::Off && !c.train.activation_checkpointing) {
    const ConfigKeys keys = config_keys(c);
    throw std::invalid_argument("debug.check_recompute=" + keys.get("debug.check_recompute", "").get() +
                                " checks activation checkpointing, which is off; set train.activation_checkpointing: true");
  }
  if (p.max_live_units != defaults.parallel.max_live_units && !p.prefetch) {
    throw std::invalid_argument("parallel.max_live_units=" + std::to_string(p.max_live_units) +
                                " bounds what prefetch gathers ahead, which is off; set parallel.prefetch: true");
  }
  if (p.shard_group_size != 0 && !p.hybrid) {
    throw std::invalid_argument("parallel.shard_group_size=" + std::to_string(p.shard_group_size) +
                                " only applies to hybrid sharding; set parallel.hybrid: true as well");
  }
  if (c.train.min_lr > c.train.lr) {
    throw std::invalid_argument("train.min_lr (" + float_text(c.train.min_lr) + ") exceeds train.lr (" +
                                float_text(c.train.lr) + ")");
  }
  c.model->validate(c);
}

nn::LoraOptions lora_options(const TrainConfig& cfg) {
  nn::LoraOptions o;
  o.rank = cfg.lora.rank;
  o.alpha = cfg.lora.alpha;
  for (const std::string& t : util::split_trimmed(cfg.lora.targets)) {
    if (!t.empty()) o.targets.push_back(t);
  }
  return o;
}

at::ScalarType scalar_type(DType d) { return d == DType::BF16 ? at::kBFloat16 : at::kFloat; }

ShardOptions shard_options(const TrainConfig& c) {
  ShardOptions o;
  o.strategy = c.parallel.strategy;
  if (const auto& is_unit = models::find_series(c.series).is_unit) {
    o.wrap_policy = [is_unit](const std::string& name, const torch::nn::Module&) { return is_unit(name); };
  }
  o.shard_group_size = c.parallel.hybrid ? static_cast<int>(c.parallel.shard_group_size) : 0;
  o.activation_checkpointing = c.train.activation_checkpointing;
  o.recompute_check = c.debug.check_recompute;
  o.prefetch = c.parallel.prefetch;
  o.max_live_units = static_cast<int>(c.parallel.max_live_units);
  o.persistence_threshold = c.parallel.persistence_threshold;
  o.reduce_bucket_bytes = c.parallel.reduce_bucket_bytes;
  o.param_dtype = scalar_type(c.mixed_precision.param_dtype);
  o.reduce_dtype = scalar_type(c.mixed_precision.reduce_dtype);
  o.frozen_storage = c.frozen_storage;
  // The run folder's default is the trainer's to fill (it knows the folder).
  if (c.frozen_storage == FrozenStorage::File && c.frozen_converted == "copy") o.converted_copy_dir = c.frozen_copy_dir;
  return o;
}

void apply_world_size(TrainConfig& c, int world_size, int local_world_size) {
  ParallelSection& p = c.parallel;
  if (p.hybrid) {
    if (p.shard_group_size == 0) p.shard_group_size = local_world_size;
    if (world_size % p.shard_group_size != 0) {
      throw std::invalid_argument("parallel.shard_group_size=" + std::to_string(p.shard_group_size) +
                                  " does not divide the world size " + std::to_string(world_size) +
                                  ": hybrid sharding holds one copy of the model per group of that many ranks");
    }
  }
  TrainSection& t = c.train;
  if (t.global_batch_size <= 0) return;
  const int64_t per_micro = static_cast<int64_t>(world_size) * t.micro_batch_size;
  if (t.global_batch_size % per_micro != 0) {
    throw std::invalid_argument("train.global_batch_size=" + std::to_string(t.global_batch_size) +
                                " is not a multiple of world size " + std::to_string(world_size) +
                                " x train.micro_batch_size " + std::to_string(t.micro_batch_size) + " = " +
                                std::to_string(per_micro));
  }
  const int64_t accum = t.global_batch_size / per_micro;
  if (t.grad_accum != 1 && t.grad_accum != accum) {
    throw std::invalid_argument("train.grad_accum=" + std::to_string(t.grad_accum) +
                                " contradicts train.global_batch_size=" + std::to_string(t.global_batch_size) +
                                " (which needs " + std::to_string(accum) + " at world size " +
                                std::to_string(world_size) + "); set only one of them");
  }
  t.grad_accum = accum;
}

std::vector<std::pair<std::string, std::string>> config_items(const TrainConfig& c) {
  TrainConfig copy = c;
  const ConfigKeys keys = config_keys(copy);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& k : keys.all()) out.emplace_back(k.name, k.get());
  return out;
}

nlohmann::json config_to_json(const TrainConfig& c, int world_size) {
  TrainConfig copy = c;
  const ConfigKeys keys = config_keys(copy);
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : keys.all()) {
    const auto dot = k.name.find('.');
    const std::string section = k.name.substr(0, dot), field = k.name.substr(dot + 1);
    const std::string v = k.get();
    if (k.type == "int") j[section][field] = std::stoll(v);
    else if (k.type == "float") j[section][field] = std::stod(v);
    else if (k.type == "bool") j[section][field] = (v == "true");
    else j[section][field] = v;
  }
  j["world_size"] = world_size;
  return j;
}

namespace {

// The value of dotted `key` in a config.json, as --set text; false when absent.
bool saved_value(const nlohmann::json& saved, const std::string& key, std::string* text) {
  const auto dot = key.find('.');
  const std::string section = key.substr(0, dot), field = key.substr(dot + 1);
  if (!saved.contains(section) || !saved[section].is_object() || !saved[section].contains(field)) return false;
  const nlohmann::json& v = saved[section][field];
  // Lists were saved as their comma-joined text; numbers and booleans as JSON.
  *text = v.is_string() ? v.get<std::string>() : v.dump();
  return true;
}

}  // namespace

std::vector<std::string> model_overrides(const nlohmann::json& saved) {
  std::string series_name;
  if (!saved_value(saved, "model.series", &series_name)) {
    throw std::invalid_argument("the saved config has no model.series");
  }
  std::vector<std::string> out = {"model.series=" + series_name};
  // The series' own keys (the model, its data shapes), the adapters, the data seed.
  auto config = models::find_series(series_name).make_config();
  ConfigKeys keys;
  config->register_keys(keys);
  std::vector<std::string> names;
  for (const auto& k : keys.all()) names.push_back(k.name);
  for (const char* k : {"lora.rank", "lora.alpha", "lora.targets", "data.seed"}) names.push_back(k);
  for (const auto& name : names) {
    std::string v;
    // Where the first values came from (model.init_from, model.from_hf) is not the model.
    const bool source = util::ends_with(name, "_from") || name.find(".from_") != std::string::npos;
    if (!source && saved_value(saved, name, &v)) out.push_back(name + "=" + v);
  }
  return out;
}

std::vector<std::string> model_differences(const TrainConfig& c, const nlohmann::json& saved) {
  std::vector<std::string> diffs;
  std::string saved_series;
  if (saved_value(saved, "model.series", &saved_series) && saved_series != c.series) {
    diffs.push_back("model.series: checkpoint " + saved_series + ", this run " + c.series);
    return diffs;
  }
  TrainConfig copy = c;
  const nlohmann::json now = config_to_json(c, 0);
  const ConfigKeys keys = config_keys(copy);
  for (const auto& k : keys.all()) {
    if (!k.describes_model) continue;
    const auto dot = k.name.find('.');
    const std::string section = k.name.substr(0, dot), field = k.name.substr(dot + 1);
    if (!saved.contains(section) || !saved[section].contains(field)) continue;  // older checkpoints
    if (saved[section][field] != now[section][field]) {
      diffs.push_back(k.name + ": checkpoint " + saved[section][field].dump() + ", this run " + now[section][field].dump());
    }
  }
  return diffs;
}

}  // namespace zeroshard::train
