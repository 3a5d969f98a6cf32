// flux1's text inputs for the tests that train it (test_flux1_series.cpp and the flux1 row of
// tests/models/diffusion/test_image_series.cpp): a tiny SentencePiece model (Debian's spm_train)
// and a pooled-vector file (one [768] tensor per prompt, as a user writes it with the released
// CLIP), made once per test process.
#pragma once

#include "io/safetensors.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <string>
#include <vector>

namespace zeroshard::testing {

// Writes one [768] vector per prompt, each tensor named by its prompt (what docs/flux1.md's
// recipe writes from CLIP-L's pooler_output); the values differ per prompt.
inline void write_flux1_pooled(const std::string& path, const std::vector<std::string>& prompts) {
  std::vector<io::TensorEntry> entries;
  for (const auto& p : prompts) {
    io::TensorEntry e;
    e.name = p;
    e.dtype = at::kBFloat16;  // the released CLIP runs in bf16 in DiffSynth: any float dtype is read
    e.shape = {768};
    entries.push_back(e);
  }
  io::SafetensorsWriter w(path, entries);
  for (size_t i = 0; i < prompts.size(); ++i) {
    w.write(prompts[i], at::sin(at::arange(768, at::kFloat) * (0.01 * static_cast<double>(i + 1))));
  }
  w.finish();
}

struct Flux1TextInputs {
  std::string spm, pooled;
};

// A tiny SentencePiece model over the words of kCaptionedImagePrompts (and a few more), and the
// pooled vectors of those prompts and of the empty (negative) prompt.
inline const Flux1TextInputs& flux1_text_inputs() {
  static const Flux1TextInputs t = [] {
    const std::string dir = make_temp_dir("flux1_series");
    Flux1TextInputs t;
    t.spm = train_tiny_spm(dir, {"a", "test", "card", "with", "clock", "red", "green", "and", "blue", "bars",
                                 "fractal", "black", "colour", "for", "television", "cat", "dog", "the"});
    t.pooled = dir + "/pooled.safetensors";
    std::vector<std::string> all = kCaptionedImagePrompts;
    all.push_back("");  // the negative prompt
    write_flux1_pooled(t.pooled, all);
    return t;
  }();
  return t;
}

// The --set arguments that point flux1 at them.
inline std::string flux1_text_args() {
  return " --set flux1.tokenizer=" + flux1_text_inputs().spm + " --set flux1.pooled_file=" + flux1_text_inputs().pooled;
}

}  // namespace zeroshard::testing
