// Registration of the `llama` and `moe` series (src/models/llama/series.cpp).
#pragma once

#include "models/llama/llama.h"
#include "models/series.h"
#include "train/config.h"

namespace zeroshard::models {

// model.* (the Llama, and the experts under moe), train.seq_len and the text data keys.
struct LlamaSeriesConfig : train::SeriesConfigBase<LlamaSeriesConfig> {
  explicit LlamaSeriesConfig(bool moe = false);
  void register_keys(train::ConfigKeys& keys) override;
  void validate(const train::TrainConfig& c) const override;

  bool moe_series = false;
  LlamaConfig llama;
  int64_t seq_len = 128;
  std::string source = "system_text";  // data.source: system_text | synthetic | file
  std::string path;                    // data.path
  int64_t synthetic_bytes = 1 << 20;   // data.synthetic_bytes
};

Series llama_series();
Series moe_series();

}  // namespace zeroshard::models
