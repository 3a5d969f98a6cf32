#include "data/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace zeroshard::data {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A seed for (seed, a, b): each ingredient passes through the mixer.
uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t s = seed;
  uint64_t x = splitmix64(s) ^ a;
  x = splitmix64(x) ^ b;
  return splitmix64(x);
}

constexpr uint64_t kPackingSalt = 0x7061636b696e67ULL;  // "packing"

}  // namespace

std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

int64_t TokenSample::targets() const {
  int64_t n = 0;
  for (uint8_t t : target) n += t;
  return n;
}

TokenCorpus::TokenCorpus(const std::string& prefix, const CorpusOptions& o) : prefix_(prefix), options_(o) {
  meta_ = read_corpus_meta(prefix);
  const std::string kind = meta_.value("kind", std::string());
  if (kind != "text" && kind != "chat") {
    throw std::invalid_argument(prefix + ".json: field 'kind' is '" + kind + "', expected text or chat");
  }
  kind_ = kind == "chat" ? CorpusKind::Chat : CorpusKind::Text;
  ids_ = std::make_unique<IndexedDataset>(prefix);
  const int64_t S = ids_->num_sequences(), D = ids_->num_documents();
  if (D < 1) throw std::invalid_argument(prefix + ".idx: the dataset has no documents");
  const int64_t valid_docs =
      o.valid_fraction > 0 ? std::max<int64_t>(1, std::llround(o.valid_fraction * static_cast<double>(D))) : 0;
  if (valid_docs >= D) {
    throw std::invalid_argument(prefix + ": data.valid_fraction=" + std::to_string(o.valid_fraction) + " of " +
                                std::to_string(D) + " documents leaves none for training");
  }
  split_document_ = D - valid_docs;
  const int64_t L = o.seq_len;

  if (kind_ == CorpusKind::Text) {
    token_start_.resize(static_cast<size_t>(S + 1), 0);
    for (int64_t s = 0; s < S; ++s) token_start_[static_cast<size_t>(s + 1)] = token_start_[static_cast<size_t>(s)] + ids_->sequence_length(s);
    total_tokens_ = token_start_.back();
    split_token_ = token_start_[static_cast<size_t>(ids_->document_begin(split_document_))];
    if (num_samples(Split::Train) < 1) {
      throw std::invalid_argument(prefix + ": " + std::to_string(split_token_) + " training tokens make no sample of " +
                                  "train.seq_len + 1 = " + std::to_string(L + 1) + " tokens");
    }
    if (valid_docs > 0 && num_samples(Split::Valid) < 1) {
      throw std::invalid_argument(prefix + ": the validation documents hold " + std::to_string(total_tokens_ - split_token_) +
                                  " tokens, fewer than train.seq_len + 1 = " + std::to_string(L + 1) +
                                  "; raise data.valid_fraction");
    }
    return;
  }

  masks_ = std::make_unique<IndexedDataset>(prefix + ".loss_mask");
  if (masks_->num_sequences() != S || S != D) {
    throw std::invalid_argument(prefix + ": a chat corpus needs one sequence per conversation and as many loss masks (" +
                                std::to_string(S) + " sequences, " + std::to_string(D) + " documents, " +
                                std::to_string(masks_->num_sequences()) + " masks)");
  }
  for (int64_t s = 0; s < S; ++s) {
    if (masks_->sequence_length(s) != ids_->sequence_length(s)) {
      throw std::invalid_argument(prefix + ".loss_mask.idx: conversation " + std::to_string(s) + " has " +
                                  std::to_string(masks_->sequence_length(s)) + " mask entries for " +
                                  std::to_string(ids_->sequence_length(s)) + " tokens");
    }
  }
  for (int split = 0; split < 2; ++split) {
    const int64_t first = split == 0 ? 0 : split_document_, end = split == 0 ? split_document_ : D;
    const int64_t n = end - first;
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (o.packing) {
      order = seeded_permutation(n, mix(o.seed, kPackingSalt, static_cast<uint64_t>(split)));
    } else {
      for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    }
    auto& members = members_[split];
    auto& starts = pack_start_[split];
    int64_t filled = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t conv = first + order[static_cast<size_t>(i)];
      const int64_t len = ids_->sequence_length(conv);
      too_long_[split] += len > L + 1 ? 1 : 0;
      const int64_t used = std::min(len, L + 1);
      if (starts.empty() || !o.packing || filled + used > L + 1) {
        starts.push_back(static_cast<int64_t>(members.size()));
        filled = 0;
      }
      members.push_back(conv);
      filled += used;
    }
    starts.push_back(static_cast<int64_t>(members.size()));
  }
}

TokenCorpus::~TokenCorpus() = default;

int64_t TokenCorpus::num_documents(Split s) const {
  return s == Split::Train ? split_document_ : ids_->num_documents() - split_document_;
}

int64_t TokenCorpus::num_samples(Split s) const {
  if (kind_ == CorpusKind::Text) {
    const int64_t tokens = s == Split::Train ? split_token_ : total_tokens_ - split_token_;
    return std::max<int64_t>(0, (tokens - 1) / options_.seq_len);
  }
  return static_cast<int64_t>(pack_start_[s == Split::Train ? 0 : 1].size()) - 1;
}

int64_t TokenCorpus::too_long(Split s) const { return too_long_[s == Split::Train ? 0 : 1]; }

void TokenCorpus::read_window(int64_t begin, int64_t n, int64_t* out) const {
  auto it = std::upper_bound(token_start_.begin(), token_start_.end(), begin);
  int64_t s = static_cast<int64_t>(it - token_start_.begin()) - 1;
  int64_t offset = begin - token_start_[static_cast<size_t>(s)];
  while (n > 0) {
    const int64_t take = std::min<int64_t>(n, ids_->sequence_length(s) - offset);
    if (take > 0) {
      ids_->read(s, offset, take, out);
      out += take;
      n -= take;
    }
    ++s;
    offset = 0;
  }
}

void TokenCorpus::sample(Split s, int64_t i, TokenSample& out) const {
  const int64_t L = options_.seq_len, n = L + 1;
  if (i < 0 || i >= num_samples(s)) {
    throw std::out_of_range(prefix_ + ": sample " + std::to_string(i) + " outside the " + std::to_string(num_samples(s)) +
                            (s == Split::Train ? " training" : " validation") + " samples");
  }
  out.ids.assign(static_cast<size_t>(n), options_.pad_id);
  out.target.assign(static_cast<size_t>(n), 0);
  out.segment.assign(static_cast<size_t>(n), 0);
  out.position.assign(static_cast<size_t>(n), 0);
  out.truncated = 0;
  if (kind_ == CorpusKind::Text) {
    const int64_t begin = (s == Split::Train ? 0 : split_token_) + i * L;
    read_window(begin, n, out.ids.data());
    for (int64_t t = 0; t < n; ++t) {
      out.target[static_cast<size_t>(t)] = t > 0 ? 1 : 0;
      out.segment[static_cast<size_t>(t)] = 1;
      out.position[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    }
    return;
  }
  const int split = s == Split::Train ? 0 : 1;
  int64_t filled = 0;
  std::vector<int64_t> mask;
  for (int64_t m = pack_start_[split][static_cast<size_t>(i)]; m < pack_start_[split][static_cast<size_t>(i + 1)]; ++m) {
    const int64_t conv = members_[split][static_cast<size_t>(m)];
    const int64_t len = ids_->sequence_length(conv), take = std::min(len, n - filled);
    if (take < len) ++out.truncated;
    ids_->read(conv, 0, take, out.ids.data() + filled);
    mask.resize(static_cast<size_t>(take));
    masks_->read(conv, 0, take, mask.data());
    const int32_t segment = static_cast<int32_t>(m - pack_start_[split][static_cast<size_t>(i)] + 1);
    for (int64_t t = 0; t < take; ++t) {
      const auto k = static_cast<size_t>(filled + t);
      out.target[k] = t > 0 && mask[static_cast<size_t>(t)] != 0 ? 1 : 0;
      out.segment[k] = segment;
      out.position[k] = static_cast<int32_t>(t);
    }
    filled += take;
  }
}

BlendedSampler::BlendedSampler(std::vector<double> weights, std::vector<int64_t> sizes, uint64_t seed, bool shuffle)
    : weights_(std::move(weights)), sizes_(std::move(sizes)), seed_(seed), shuffle_(shuffle) {
  if (weights_.empty() || weights_.size() != sizes_.size()) {
    throw std::invalid_argument("BlendedSampler: one weight per corpus needed");
  }
  double total = 0;
  for (size_t d = 0; d < weights_.size(); ++d) {
    if (!(weights_[d] > 0) || sizes_[d] < 1) {
      throw std::invalid_argument("BlendedSampler: corpus " + std::to_string(d) + " has weight " +
                                  std::to_string(weights_[d]) + " and " + std::to_string(sizes_[d]) + " samples");
    }
    total += weights_[d];
  }
  for (double& w : weights_) w /= total;
  taken_.assign(weights_.size(), 0);
}

const std::vector<int64_t>& BlendedSampler::permutation(int corpus, int64_t epoch) {
  const auto key = std::make_pair(corpus, epoch);
  auto it = permutations_.find(key);
  if (it != permutations_.end()) return it->second;
  // Keep at most the previous epoch of this corpus besides the new one.
  for (auto e = permutations_.begin(); e != permutations_.end();) {
    e = e->first.first == corpus && e->first.second < epoch - 1 ? permutations_.erase(e) : std::next(e);
  }
  return permutations_[key] = seeded_permutation(sizes_[static_cast<size_t>(corpus)],
                                                 mix(seed_, static_cast<uint64_t>(corpus), static_cast<uint64_t>(epoch)));
}

BlendedSampler::Pick BlendedSampler::at(int64_t i) {
  if (i < 0) throw std::out_of_range("BlendedSampler: negative sample index");
  if (i < next_) {
    next_ = 0;
    std::fill(taken_.begin(), taken_.end(), 0);
  }
  while (next_ <= i) {
    int best = 0;
    double best_error = -std::numeric_limits<double>::infinity();
    for (size_t d = 0; d < weights_.size(); ++d) {
      const double error = weights_[d] * static_cast<double>(next_ + 1) - static_cast<double>(taken_[d]);
      if (error > best_error) {
        best_error = error;
        best = static_cast<int>(d);
      }
    }
    const int64_t k = taken_[static_cast<size_t>(best)]++;
    const int64_t n = sizes_[static_cast<size_t>(best)];
    last_.corpus = best;
    last_.epoch = k / n;
    last_.sample = shuffle_ ? permutation(best, last_.epoch)[static_cast<size_t>(k % n)] : k % n;
    ++next_;
  }
  return last_;
}

std::vector<std::pair<double, std::string>> parse_weighted_prefixes(const std::string& text, const std::string& key) {
  std::vector<std::string> items;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) items.push_back(item.substr(b, e - b + 1));
  }
  std::vector<std::pair<double, std::string>> out;
  if (items.size() == 1) return {{1.0, items[0]}};
  if (items.empty() || items.size() % 2 != 0) {
    throw std::invalid_argument(key + ": expected one dataset prefix, or pairs 'weight, prefix, weight, prefix, ...', got '" +
                                text + "'");
  }
  for (size_t i = 0; i < items.size(); i += 2) {
    double w = 0;
    try {
      size_t used = 0;
      w = std::stod(items[i], &used);
      if (used != items[i].size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      throw std::invalid_argument(key + ": '" + items[i] + "' (before '" + items[i + 1] + "') is not a weight");
    }
    if (!(w > 0) || !std::isfinite(w)) throw std::invalid_argument(key + ": weight of '" + items[i + 1] + "' must be > 0");
    out.emplace_back(w, items[i + 1]);
  }
  return out;
}

}  // namespace zeroshard::data
