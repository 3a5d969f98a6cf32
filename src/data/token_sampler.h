// Training and validation samples of prepared token corpora (data/token_corpus.h) for language
// models, and their mixing by weight.
//
// A sample is L + 1 tokens (L = train.seq_len): the model reads [0, L) and predicts [1, L + 1).
//  - text corpora: the documents (each followed by its end-of-document token) form one token
//    stream; sample k is the window [k L, k L + L + 1) (consecutive windows share one token, as
//    Megatron's GPTDataset). Every token is a target.
//  - chat corpora: one conversation per sample, or with packing several whole conversations in
//    one sample (greedy, in a seeded order fixed once per corpus), each its own segment: RoPE
//    positions restart at 0 and attention stays inside the segment. A conversation longer than
//    L + 1 tokens is truncated (counted, logged). Targets are the assistant tokens (loss mask);
//    a segment's first token is never a target (it would be predicted from another
//    conversation). The rest of the sample is padding: no target, segment 0.
//
// Validation split: the last valid_fraction of a corpus' documents (Megatron splits by document
// ranges too), so no validation token is ever in a training window.
//
// Mixing (BlendedSampler): global sample i goes to the corpus whose share lags its weight most
// (argmax_d w_d (i + 1) - taken_d, ties to the lower d, Megatron's BlendedDataset), which hands
// out its next sample: corpus d's k-th sample is element k mod N_d of epoch k / N_d's seeded
// permutation of its N_d samples. Everything is a pure function of (seed, i): independent of the
// world size, and a resumed run continues at exactly the sample where it stopped.
#pragma once

#include "data/indexed_dataset.h"
#include "data/token_corpus.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::data {

enum class Split { Train, Valid };

struct TokenSample {
  std::vector<int64_t> ids;       // L + 1
  std::vector<uint8_t> target;    // L + 1: ids[i] is a training target (index 0 never is)
  std::vector<int32_t> segment;   // L + 1: 1, 2, ... per conversation (text: 1); 0 padding
  std::vector<int32_t> position;  // L + 1: RoPE position within the segment
  int32_t truncated = 0;          // conversations cut at L + 1 tokens
  int64_t targets() const;
};

struct CorpusOptions {
  int64_t seq_len = 128;
  double valid_fraction = 0.0;
  bool packing = false;  // chat only
  int64_t pad_id = 0;    // chat padding (never a target)
  uint64_t seed = 1234;  // the packing order
};

// One prepared corpus (prefix P), split into training and validation samples.
class TokenCorpus {
 public:
  TokenCorpus(const std::string& prefix, const CorpusOptions& options);
  ~TokenCorpus();
  TokenCorpus(const TokenCorpus&) = delete;
  TokenCorpus& operator=(const TokenCorpus&) = delete;

  const std::string& prefix() const { return prefix_; }
  CorpusKind kind() const { return kind_; }
  const nlohmann::json& meta() const { return meta_; }
  int64_t num_samples(Split s) const;
  int64_t num_documents(Split s) const;
  // Chat: conversations of the split longer than L + 1 tokens (truncated when sampled).
  int64_t too_long(Split s) const;
  // Sample i of the split in corpus order (BlendedSampler shuffles).
  void sample(Split s, int64_t i, TokenSample& out) const;

 private:
  void read_window(int64_t begin, int64_t n, int64_t* out) const;
  std::string prefix_;
  CorpusOptions options_;
  CorpusKind kind_ = CorpusKind::Text;
  nlohmann::json meta_;
  std::unique_ptr<IndexedDataset> ids_, masks_;
  int64_t split_document_ = 0;        // first validation document
  std::vector<int64_t> token_start_;  // text: tokens before sequence s (S + 1 entries)
  int64_t split_token_ = 0, total_tokens_ = 0;
  // chat: per split, samples as runs of conversation numbers (packs)
  std::vector<int64_t> members_[2], pack_start_[2];
  int64_t too_long_[2] = {0, 0};
};

class BlendedSampler {
 public:
  // sizes: samples per epoch of each corpus (> 0); weights > 0 (normalized here). shuffle
  // false: every epoch in corpus order (validation).
  BlendedSampler(std::vector<double> weights, std::vector<int64_t> sizes, uint64_t seed, bool shuffle);
  struct Pick {
    int corpus = 0;
    int64_t sample = 0;  // within the corpus' split
    int64_t epoch = 0;   // of that corpus
  };
  // Global sample i. Cheap for increasing i (replays the blend from the last position; a smaller
  // i starts over from 0).
  Pick at(int64_t i);

 private:
  const std::vector<int64_t>& permutation(int corpus, int64_t epoch);
  std::vector<double> weights_;
  std::vector<int64_t> sizes_;
  uint64_t seed_;
  bool shuffle_;
  int64_t next_ = 0;
  std::vector<int64_t> taken_;
  Pick last_;
  std::map<std::pair<int, int64_t>, std::vector<int64_t>> permutations_;
};

// A seeded permutation of 0 .. n-1 (Fisher-Yates over splitmix64): the same on every platform.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

// "w1,P1,w2,P2" or "P" (weight 1), Megatron's --data-path: the weights and prefixes. Throws
// naming `key` and what is wrong.
std::vector<std::pair<double, std::string>> parse_weighted_prefixes(const std::string& text, const std::string& key);

}  // namespace zeroshard::data
