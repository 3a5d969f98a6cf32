// The typed run configuration: YAML files (with `base:` inheritance) plus --set overrides,
// every key known, typed and range-checked; an unknown key is an error naming the closest.
#pragma once

#include "models/flux/flux.h"
#include "models/llama/llama.h"
#include "models/vae/vae.h"
#include "models/wan/wan.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::train {

// The defaults are the default job (`./run.sh`, configs/llama/base.yaml).
struct TrainConfig {
  TrainConfig() {
    llama.n_layers = 4;
    llama.max_seq_len = 128;
  }
  // llama | moe (model.*, train.seq_len, text) | vae (vae.*, clips) | flux (flux.*, the VAE tower vae.*, images)
  // | wan (wan.*, the VAE tower vae.*, clips)
  std::string model_series = "llama";
  models::LlamaConfig llama;
  models::VaeConfig vae;
  models::FluxConfig flux;
  std::string flux_vae_from;           // flux.vae_from: the frozen VAE's safetensors (a vae run's export)
  std::string flux_text_encoder_from;  // flux.text_encoder_from: the frozen text encoder's (else seeded)
  models::WanConfig wan;
  std::string wan_vae_from;           // wan.vae_from: the frozen video VAE's safetensors (a vae run's export)
  std::string wan_text_encoder_from;  // wan.text_encoder_from

  int64_t steps = 200;
  int64_t micro_batch_size = 8;
  int64_t grad_accum = 1;
  int64_t global_batch_size = 0;  // sequences per step over all ranks; > 0 derives grad_accum
  int64_t seq_len = 128;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double clip_grad_norm = 1.0;
  bool activation_checkpointing = false;  // recompute each unit in backward instead of keeping its activations
  std::string param_dtype = "fp32";  // mixed_precision.param_dtype: fp32 | bf16 (gathers and compute)
  std::string reduce_dtype = "fp32";  // mixed_precision.reduce_dtype: fp32 | bf16 (gradient reduce-scatters)
  std::string bf16_matmul = "auto";   // mixed_precision.bf16_matmul: auto | native | via_fp32 (src/nn/matmul.h)
  int64_t seed = 1234;
  int64_t log_every = 10;

  // Checkpoints (<run_dir>/checkpoints/step_<N>/, see src/checkpoint/checkpoint.h).
  int64_t save_every = 0;   // optimizer steps between saves; 0 = only the final save
  int64_t keep_last = 0;    // keep this many newest checkpoints; 0 = all
  bool save_final = true;   // save after the last step
  bool save_on_signal = true;  // SIGINT/SIGTERM: save after the step before exiting
  std::string on_nonfinite = "abort";  // a NaN/Inf loss or gradient norm: "abort" or "skip" the step
  std::string resume;       // a checkpoint, checkpoints folder or run folder to continue from
  std::string init_from;    // model.init_from: a safetensors file with every parameter (LoRA: every base one)
  // LoRA fine-tuning: adapters on the Linear layers named in lora.targets (comma-separated),
  // everything else frozen. rank 0: off.
  int64_t lora_rank = 0;
  double lora_alpha = 16.0;
  std::string lora_targets = "wq,wk,wv,wo";

  std::string strategy = "optim_grads_params";
  int64_t zero_stage = -1;  // alias; -1 = not set
  double comm_timeout_s = 300;
  int64_t threads = 0;  // intra-op threads per rank; 0 = cores / local ranks
  // Hybrid sharding: shard within groups of shard_group_size consecutive ranks (0 = the ranks
  // of one host, LOCAL_WORLD_SIZE), replicate across the groups (ShardOptions::shard_group_size).
  bool prefetch = true;  // parallel.prefetch: ZeRO-3 gathers the next units while one computes
  int64_t max_live_units = 2;  // parallel.max_live_units: gathered units at once with prefetch
  int64_t persistence_threshold = 0;  // parallel.persistence_threshold: ZeRO-3 keeps buffers this small replicated
  int64_t reduce_bucket_bytes = 0;    // parallel.reduce_bucket_bytes: smaller gradients share a reduce-scatter
  bool hybrid = false;
  int64_t shard_group_size = 0;

  std::string data_source = "system_text";
  std::string data_path;
  int64_t data_synthetic_bytes = 1 << 20;
  int64_t data_seed = 1234;
  int64_t frames = 8;       // data.frames: frames per generated clip (series vae)
  int64_t image_size = 32;  // data.image_size: height = width of generated images and clips

  std::string run_dir;  // default runs/<config>-<timestamp>
  bool dump_init = false;      // write <run_dir>/init.safetensors (full initial weights)
  bool dump_batches = false;   // write <run_dir>/batches.rank<r>.bin (the tokens each rank trains on)
  bool dump_final_shards = false;  // write <run_dir>/final_shard.rank<r>.bin (fp32 master shard)
  bool progress = true;
  int64_t max_rss_mb = 0;  // > 0: a rank whose peak RSS exceeds this fails, naming the phase

  // Fault injection for tests: at step debug_fail_at_step (0 = off), rank debug_fail_rank
  // throws ("exception"), SIGKILLs itself ("sigkill"), SIGKILLs itself halfway through
  // writing its checkpoint file of that step ("sigkill_in_save"), or makes its loss NaN ("nan").
  int64_t debug_fail_at_step = 0;
  int64_t debug_fail_rank = 0;
  std::string debug_fail_kind = "exception";  // ... or "desync": an extra barrier on that rank
  bool check_desync = false;  // debug.check_desync: ranks compare each collective before running it
  std::string check_recompute = "off";  // debug.check_recompute: off | shape | bitwise

  std::string config_path;  // the file it was loaded from, if any
};

// Where each value came from: "default", a file path, or "--set".
using Provenance = std::map<std::string, std::string>;

// Loads path (may be empty: defaults only), then applies "key=value" overrides in order.
// Throws std::invalid_argument naming the file, key, value and what is allowed.
TrainConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                        Provenance* provenance = nullptr);

// Cross-field checks (strategy names, alias agreement, sequence vs model length...).
void validate(TrainConfig& c);

// Checks that need the world size: train.global_batch_size must be a multiple of
// world_size * micro_batch_size (it then sets grad_accum); a hybrid shard group (0 resolves to
// local_world_size, the ranks per host) must divide the world. Throws naming keys and values.
void apply_world_size(TrainConfig& c, int world_size, int local_world_size);

// lora.* as the options of nn::apply_lora (lora.targets split at commas).
nn::LoraOptions lora_options(const TrainConfig& c);

// Every key with its current value, in declaration order.
std::vector<std::pair<std::string, std::string>> config_items(const TrainConfig& c);

// The JSON written to <run_dir>/config.json (nested by the dotted key prefixes).
nlohmann::json config_to_json(const TrainConfig& c, int world_size);

}  // namespace zeroshard::train
