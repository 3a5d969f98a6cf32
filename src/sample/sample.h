// `zeroshard sample`: from a trained checkpoint, under any sharding strategy and world size, the
// series' own inference (src/models/<series>/: text from an LM, reconstructions from a VAE,
// images or clips from a diffusion pipeline). The model is rebuilt from the checkpoint's config
// through its series and materialized shard by shard from the checkpoint, as for training.
#pragma once

#include "zeroshard/comm.h"
#include "zeroshard/shard.h"

#include <cstdint>
#include <optional>
#include <string>

namespace zeroshard::ckpt {
class Checkpoint;
}
namespace zeroshard::train {
struct TrainConfig;
}

namespace zeroshard::sample {

struct SampleOptions {
  std::string checkpoint;  // a checkpoint, checkpoints folder or run folder
  std::string prompt = "\n";
  int64_t tokens = 200;        // to generate (prompt + tokens <= model.max_seq_len)
  double temperature = 0.8;    // 0: greedy (argmax)
  int64_t top_k = 40;          // 0: the whole vocabulary
  uint64_t seed = 1;
  std::string strategy = "optim_grads_params";
  bool kv_cache = true;        // false: recompute the whole sequence for every token
  // Tokenizer LMs (qwen3): the prompt as a user turn of the chat template, answered by the model.
  bool chat = false;
  std::string system;          // a system message before it (chat)
  std::optional<bool> enable_thinking;  // chat: false adds the empty <think></think> block
  // Image and video series.
  std::string out;             // the PNG to write (default: <run folder>/<series' name>.png)
  int64_t clips = 4;           // clips to reconstruct / images to generate
  int64_t first_clip = 1000000000;  // generated clip index of the first (training uses 0, 1, ...)
  int64_t chunk_frames = -1;   // VAE frames per chunk (0: whole clip; -1: the run's vae.chunk_frames)
  int64_t denoise_steps = 20;  // Euler steps from noise to image
};

// A collective over the ranks of `rdv`: resolves the checkpoint, rebuilds its model through its
// series and runs the series' sampling. Returns what rank 0 prints.
std::string run_sample(const SampleOptions& options, const RendezvousInfo& rdv);

// The checkpoint's model as a config (train::model_overrides of its saved config).
train::TrainConfig model_config_of(const ckpt::Checkpoint& ck);

// The engine options for sampling a model of `cfg` from `ck`: the series' wrap policy, the
// --strategy, parameters from the checkpoint.
ShardOptions sampling_shard_options(const train::TrainConfig& cfg, const SampleOptions& o, ckpt::Checkpoint& ck);

// The language-model series' token options: --tokens >= 1, --temperature >= 0, --top-k >= 0.
void check_token_options(const SampleOptions& o);

// The next token of a continuation, the same on every rank: rank 0 draws it from the last
// position of `logits` ([1, T, vocab]) — argmax at temperature 0, else a multinomial draw from
// `gen` over softmax(logits / temperature) restricted to the top-k — and broadcasts it.
int64_t draw_next_token(const at::Tensor& logits, const SampleOptions& o, at::Generator& gen, Communicator& comm);

// `out` if given, else <the run folder of ck>/<name> (ck itself when it is not inside a run).
std::string output_path(const ckpt::Checkpoint& ck, const std::string& out, const std::string& name);

}  // namespace zeroshard::sample
