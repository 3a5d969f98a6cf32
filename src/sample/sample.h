// `zeroshard sample`: text from a trained LM checkpoint (series llama and moe), under any
// sharding strategy and world size. The model is materialized shard by shard from the
// checkpoint exactly as for training; generation runs without autograd, gathering each unit
// once per forward, and a KV cache keeps each step to one token's forward.
#pragma once

#include "zeroshard/comm.h"

#include <cstdint>
#include <string>

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
};

// A collective over the ranks of `rdv`: every rank runs the same forwards; rank 0 draws each
// token and broadcasts it. Returns the prompt followed by the generated text (on every rank).
// Throws std::invalid_argument naming the option when the request cannot be met.
std::string generate_text(const SampleOptions& options, const RendezvousInfo& rdv);

}  // namespace zeroshard::sample
