// Series `qwen3` (dense: Qwen3, and Qwen2/2.5 with model_type qwen2) and `qwen3_moe` (Qwen3-MoE)
// as released: the model keys are the Hugging Face config.json fields under `model.*`, or
// `model.from_hf: DIR` reads them (and the weights) from a Hugging Face folder. Data: corpora
// prepared by `zeroshard prepare` (data/token_corpus.h) — text for pretraining, `messages`
// conversations for chat fine-tuning — mixed by weight (data/token_sampler.h), with an optional
// held-out validation split evaluated every train.eval_every steps.
#pragma once

#include "models/qwen3/config.h"
#include "models/series.h"
#include "train/config.h"

#include <string>
#include <vector>

namespace zeroshard::models::qwen3 {

struct QwenSeriesConfig : train::SeriesConfigBase<QwenSeriesConfig> {
  explicit QwenSeriesConfig(bool moe = false);
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  // The model the keys describe (with the folder's other config.json fields when from_hf).
  QwenConfig qwen() const;
  // data.datasets, or data.output when that is empty: (weight, prefix) pairs.
  std::vector<std::pair<double, std::string>> datasets() const;
  // The tokenizer.json: data.tokenizer (a file, or a folder holding tokenizer.json). Throws
  // naming the key when none is set.
  std::string tokenizer_json() const;

  bool moe_series = false;
  QwenConfig model;             // the model.* fields (qkv_bias/o_bias come from attention_bias)
  bool attention_bias = false;  // config.json attention_bias (Qwen3 types)
  std::string from_hf;          // model.from_hf
  std::string aux_loss_scope = "all_layers";  // model.router_aux_loss_scope
  int64_t seq_len = 128;        // train.seq_len

  // data.*
  std::string kind = "text";         // what `prepare` makes: text | chat
  std::string tokenizer;             // tokenizer.json or its folder
  std::string inputs;                // prepare: files / folders, comma-separated
  std::string output;                // prepare: the dataset prefix it writes
  std::string datasets_text;         // training: "P" or "w1,P1,w2,P2,..."
  std::string text_key = "text";
  std::string text_split = "file";   // plain text files: file | paragraph | line
  std::string eos_token;             // text documents end with it; default <|endoftext|> or the eos_token
  std::string on_bad_record = "error";
  double valid_fraction = 0.0;
  int64_t eval_samples = 32;
  bool packing = false;

 private:
  void apply_hf_folder(const std::string& dir);
};

Series qwen3_series();
Series qwen3_moe_series();

}  // namespace zeroshard::models::qwen3
