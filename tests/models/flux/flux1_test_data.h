// flux1's text inputs for the tests that train it (test_flux1_series.cpp and the flux1 row of
// tests/models/diffusion/test_image_series.cpp): a tiny SentencePiece model (Debian's spm_train),
// a tiny CLIP tokenizer folder in the released format (vocab.json + merges.txt, built as OpenAI's
// CLIP vocabulary is: the 256 byte symbols, the same with "</w>", the merges, the two special
// tokens) and a pooled-vector file (one [768] tensor per prompt, as a user writes it with the
// released CLIP), made once per test process.
#pragma once

#include "io/safetensors.h"
#include "support/spawn.h"
#include "support/train_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
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

// GPT-2's bytes_to_unicode as CLIP uses it: byte -> its UTF-8 symbol, in CLIP's vocabulary order.
inline std::vector<std::pair<int, std::string>> clip_byte_symbols() {
  auto utf8 = [](int cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<std::pair<int, std::string>> out;
  for (int b : bs) out.emplace_back(b, utf8(b));
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) out.emplace_back(b, utf8(256 + n++));
  }
  return out;
}

// A CLIP tokenizer folder whose merges build each of `words` left to right (its last symbol
// carrying "</w>"), with tokenizer_config.json naming CLIPTokenizer and its special tokens as
// FLUX.1-dev's tokenizer/ does (pad = <|endoftext|>).
inline void write_tiny_clip_tokenizer(const std::string& dir, const std::vector<std::string>& words) {
  nlohmann::ordered_json vocab;
  int32_t id = 0;
  const auto bytes = clip_byte_symbols();
  for (const auto& [b, sym] : bytes) vocab[sym] = id++;
  for (const auto& [b, sym] : bytes) vocab[sym + "</w>"] = id++;
  std::vector<std::string> merges;
  std::set<std::string> seen;
  for (const auto& w : words) {
    std::string left(1, w[0]);
    for (size_t i = 1; i < w.size(); ++i) {
      const std::string right = std::string(1, w[i]) + (i + 1 == w.size() ? "</w>" : "");
      const std::string merge = left + " " + right;
      left += right;
      if (seen.insert(merge).second) {
        merges.push_back(merge);
        if (!vocab.contains(left)) vocab[left] = id++;
      }
    }
  }
  vocab["<|startoftext|>"] = id++;
  vocab["<|endoftext|>"] = id++;
  std::ofstream(dir + "/vocab.json") << vocab.dump();
  std::ofstream m(dir + "/merges.txt");
  m << "#version: 0.2\n";
  for (const auto& x : merges) m << x << "\n";
  m.close();
  const nlohmann::json config = {{"tokenizer_class", "CLIPTokenizer"}, {"model_max_length", 77},
                                 {"bos_token", "<|startoftext|>"},    {"eos_token", "<|endoftext|>"},
                                 {"unk_token", "<|endoftext|>"},      {"pad_token", "<|endoftext|>"},
                                 {"do_lower_case", true},             {"errors", "replace"}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
}

struct Flux1TextInputs {
  std::string spm, clip, pooled;
};

// A tiny SentencePiece model over the words of kCaptionedImagePrompts (and a few more), and the
// pooled vectors of those prompts and of the empty (negative) prompt.
inline const Flux1TextInputs& flux1_text_inputs() {
  static const Flux1TextInputs t = [] {
    const std::string dir = make_temp_dir("flux1_series");
    Flux1TextInputs t;
    const std::vector<std::string> words = {"a",     "test",  "card",    "with",  "clock",  "red",
                                            "green", "and",   "blue",    "bars",  "fractal", "black",
                                            "colour", "for",  "television", "cat", "dog",    "the"};
    t.spm = train_tiny_spm(dir, words);
    t.clip = dir + "/clip_tokenizer";
    std::filesystem::create_directories(t.clip);
    write_tiny_clip_tokenizer(t.clip, words);
    t.pooled = dir + "/pooled.safetensors";
    std::vector<std::string> all = kCaptionedImagePrompts;
    all.push_back("");  // the negative prompt
    write_flux1_pooled(t.pooled, all);
    return t;
  }();
  return t;
}

// The --set arguments that point flux1 at them: T5's and CLIP's tokenizers (the towers' default).
inline std::string flux1_text_args() {
  return " --set flux1.tokenizer=" + flux1_text_inputs().spm + " --set flux1.clip_tokenizer=" + flux1_text_inputs().clip;
}

}  // namespace zeroshard::testing
