// `zeroshard sample`: from a trained checkpoint, under any sharding strategy and world size —
// text from an LM (series llama and moe), reconstructions of held-out clips from a video VAE,
// images from captions from a flux pipeline.
// The model is materialized shard by shard from the checkpoint exactly as for training and
// runs without autograd; LMs keep each generation step to one token's forward (KV cache).
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
  // Video VAE runs.
  std::string out;             // the PNG to write (default: <run folder>/reconstruction.png)
  int64_t clips = 4;           // clips to reconstruct
  int64_t first_clip = 1000000000;  // generated clip index of the first (training uses 0, 1, ...)
  int64_t chunk_frames = -1;   // frames per chunk (0: whole clip; -1: the run's vae.chunk_frames)
  // flux runs (clips / first_clip / out as for vae: images, first held-out scene, the PNG).
  int64_t denoise_steps = 20;  // Euler steps from noise to image
};

// The model series of a checkpoint ("llama", "moe", "vae"), from its manifest.
std::string checkpoint_series(const std::string& checkpoint);

// A collective over the ranks of `rdv`: every rank runs the same forwards; rank 0 draws each
// token and broadcasts it. Returns the prompt followed by the generated text (on every rank).
// Throws std::invalid_argument naming the option when the request cannot be met.
std::string generate_text(const SampleOptions& options, const RendezvousInfo& rdv);

// A collective, as generate_text: encodes and decodes `clips` generated clips chunk by chunk
// and writes one PNG — per clip a row of the original frames above a row of the
// reconstruction. Returns a one-line summary (path, mean squared error, PSNR).
std::string reconstruct_clips(const SampleOptions& options, const RendezvousInfo& rdv);

// A collective, as generate_text: `clips` images from captions (--prompt for all, else the
// held-out scenes' captions, their true images drawn above), Euler sampling of the flow, and
// the frozen VAE's decoder; one PNG (default <run>/samples.png). Returns the captions.
std::string generate_images(const SampleOptions& options, const RendezvousInfo& rdv);

}  // namespace zeroshard::sample
