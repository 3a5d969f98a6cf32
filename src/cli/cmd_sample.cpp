// `zeroshard sample`: the series' own inference from a checkpoint, under any strategy and W.
#include "cli/command.h"
#include "cli/launch_or_run.h"
#include "sample/sample.h"
#include "util/threads.h"

#include <algorithm>
#include <cstdio>

namespace zeroshard::cli {

Command add_sample(CLI::App& app) {
  struct Args {
    sample::SampleOptions o;
    int nproc = 1;
    bool no_cache = false;
    std::string thinking;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "sample",
      "From a trained checkpoint under any strategy: the series' inference (text from an LM, images or clips from a "
      "diffusion pipeline, reconstructions from a VAE); rank 0 prints what it wrote");
  sample::SampleOptions& o = a->o;
  sub->add_option("checkpoint", o.checkpoint, "A checkpoint folder, checkpoints folder or run folder")->required();
  sub->add_option("--prompt", o.prompt, "Text to continue / the caption to draw (default: held-out captions)");
  sub->add_option("--tokens", o.tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--temperature", o.temperature, "0: greedy; otherwise softmax(logits / T)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o.top_k, "Sample among the k most likely tokens (0: all)")->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", o.seed, "Seed of the sampler");
  sub->add_option("--strategy", o.strategy,
                  "Sharding of the weights while sampling: no_shard, optim, optim_grads, optim_grads_params");
  sub->add_option("--nproc", a->nproc, "Ranks to shard the model over")->check(CLI::Range(1, 1024));
  sub->add_flag("--no-cache", a->no_cache, "Recompute the whole sequence for every token (no KV cache)");
  sub->add_flag("--chat", o.chat, "Tokenizer LMs: the prompt is a user turn of the chat template; generation stops at "
                                  "the end of the answer");
  sub->add_option("--system", o.system, "With --chat: a system message before the prompt");
  sub->add_option("--thinking", a->thinking, "With --chat: on (default) or off (the empty think block of Qwen3's "
                                             "enable_thinking=False)")
      ->check(CLI::IsMember({"on", "off"}));
  sub->add_option("--out", o.out, "The file to write (default: in the run folder)");
  sub->add_option("--clips", o.clips, "Images / clips to generate or reconstruct")->check(CLI::Range(1, 1024));
  sub->add_option("--first-clip", o.first_clip, "Generated scene index of the first held-out one");
  sub->add_option("--steps", o.denoise_steps, "Denoising steps from noise to image")->check(CLI::Range(1, 10000));
  sub->add_option("--chunk-frames", o.chunk_frames,
                  "VAE frames per chunk (0: whole clip; default: the run's vae.chunk_frames)");
  return {sub, [a] {
            a->o.kv_cache = !a->no_cache;
            if (!a->thinking.empty()) a->o.enable_thinking = a->thinking == "on";
            parse_strategy(a->o.strategy);  // fails before any rank starts
            return launch_or_run(a->nproc, {}, [a](const RendezvousInfo& rdv) {
              util::set_compute_threads(util::default_compute_threads(rdv.local_world_size));
              const std::string text = sample::run_sample(a->o, rdv);
              if (rdv.rank == 0) std::printf("%s\n", text.c_str());
              return 0;
            });
          }};
}

}  // namespace zeroshard::cli
