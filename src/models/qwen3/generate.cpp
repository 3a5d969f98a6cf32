// `zeroshard sample` for qwen3 / qwen3_moe checkpoints: the prompt through the run's tokenizer
// (and, with --chat, the Qwen3 chat template), generation with a KV cache under any strategy and
// world size (every rank runs the same forwards; rank 0 draws each token and broadcasts it).
#include "checkpoint/checkpoint.h"
#include "models/qwen3/model.h"
#include "models/qwen3/series_parts.h"
#include "nn/layers.h"
#include "sample/sample.h"
#include "text/bpe_tokenizer.h"
#include "text/chat_template.h"
#include "zeroshard/nn/deferred.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <limits>
#include <set>

namespace zeroshard::models::qwen3 {

std::string generate(const sample::SampleOptions& o, ckpt::Checkpoint& ck, const train::TrainConfig& cfg,
                     const RendezvousInfo& rdv) {
  sample::check_token_options(o);
  const QwenConfig config = cfg.series_config<QwenSeriesConfig>().qwen();
  const std::string tokenizer_json = tokenizer_path_of(cfg);
  if (tokenizer_json.empty()) {
    throw std::invalid_argument(ck.dir() + ": the run names no tokenizer (data.tokenizer), which sampling needs for --prompt");
  }
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(tokenizer_json);
  if (tok.vocab_size() > config.vocab_size) {
    throw std::invalid_argument(tokenizer_json + " has " + std::to_string(tok.vocab_size()) + " ids but the model's vocab_size is " +
                                std::to_string(config.vocab_size));
  }
  std::vector<int32_t> prompt;
  std::string shown;  // the text the output starts with
  if (o.chat) {
    std::vector<text::ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system, std::nullopt});
    messages.push_back({"user", o.prompt, std::nullopt});
    prompt = text::encode_qwen3_generation_prompt(tok, messages, o.enable_thinking, "--prompt");
    shown = text::render_qwen3_chat(messages, true, o.enable_thinking, "--prompt");
  } else {
    prompt = tok.encode(o.prompt);
    shown = o.prompt;
  }
  if (prompt.empty()) throw std::invalid_argument("--prompt must not be empty (the model needs a first token)");
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.tokens;
  if (total > config.max_position_embeddings) {
    throw std::invalid_argument("prompt (" + std::to_string(prompt.size()) + " tokens) + --tokens " + std::to_string(o.tokens) +
                                " = " + std::to_string(total) + " exceeds model.max_position_embeddings " +
                                std::to_string(config.max_position_embeddings) + " of " + ck.dir());
  }
  // Generation ends at the end-of-turn / end-of-text tokens the tokenizer has.
  std::set<int64_t> stop;
  if (tok.eos_id()) stop.insert(*tok.eos_id());
  for (const char* t : {"<|im_end|>", "<|endoftext|>"}) {
    if (auto id = tok.token_to_id(t)) stop.insert(*id);
  }

  auto comm = make_communicator(rdv);
  QwenForCausalLM model{nullptr};
  {
    nn::DeferredInit deferred;
    model = QwenForCausalLM(config, true);
    if (cfg.lora.rank > 0) nn::apply_lora(*model, train::lora_options(cfg));
  }
  auto sharded = fully_shard(model.ptr(), comm, sample::sampling_shard_options(cfg, o, ck));

  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  std::vector<int32_t> generated;
  KVCache cache;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  auto forward = [&](const std::vector<int64_t>& ids, KVCache* c) {
    return model->forward(Inputs(torch::tensor(ids, torch::kLong).unsqueeze(0)), c).logits;
  };
  at::Tensor logits = forward(seq, o.kv_cache ? &cache : nullptr);
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t id = sample::draw_next_token(logits, o, gen, *comm);
    seq.push_back(id);
    generated.push_back(static_cast<int32_t>(id));
    if (stop.count(id) || i + 1 == o.tokens) break;
    logits = o.kv_cache ? forward({id}, &cache) : forward(seq, nullptr);
  }
  // A plain prompt is shown as the tokenizer decodes it (the text the model saw).
  if (!o.chat) shown = tok.decode(prompt);
  return shown + tok.decode(generated);
}

}  // namespace zeroshard::models::qwen3
