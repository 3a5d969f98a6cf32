// `zeroshard prepare` for qwen3 / qwen3_moe: the data.inputs through the run's tokenizer into the
// indexed dataset data.output (data/token_corpus.h), each rank tokenizing its block of documents.
#include "comm/agree.h"
#include "data/token_corpus.h"
#include "models/qwen3/series_parts.h"
#include "text/bpe_tokenizer.h"
#include "util/text.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

namespace zeroshard::models::qwen3 {

namespace fs = std::filesystem;

namespace {

data::TextSplit text_split(const std::string& s) {
  return s == "line" ? data::TextSplit::Line : s == "paragraph" ? data::TextSplit::Paragraph : data::TextSplit::File;
}

int32_t document_end_id(const QwenSeriesConfig& s, const text::BpeTokenizer& tok, const std::string& tokenizer_json) {
  if (!s.eos_token.empty()) {
    const auto id = tok.token_to_id(s.eos_token);
    if (!id) throw std::invalid_argument("data.eos_token: " + tokenizer_json + " has no token '" + s.eos_token + "'");
    return *id;
  }
  // Qwen's pretraining documents end with <|endoftext|> (its base models' eos); chat models'
  // tokenizer_config names <|im_end|> as eos_token, which ends a turn, not a document.
  if (const auto id = tok.token_to_id("<|endoftext|>")) return *id;
  if (tok.eos_id()) return *tok.eos_id();
  throw std::invalid_argument(tokenizer_json + " has no <|endoftext|> and no eos_token (tokenizer_config.json): set "
                              "data.eos_token to the token that ends a document");
}

// What prepare reads before its ranks talk; check_prepare reads it before any rank starts.
struct PrepareInputs {
  data::PrepareOptions options;
  text::BpeTokenizer tokenizer;
};

PrepareInputs prepare_inputs(const train::TrainConfig& cfg) {
  const auto& s = cfg.series_config<QwenSeriesConfig>();
  if (s.output.empty()) throw std::invalid_argument("data.output is not set: the dataset prefix `prepare` writes");
  data::PrepareOptions o;
  o.kind = s.kind == "chat" ? data::CorpusKind::Chat : data::CorpusKind::Text;
  o.files = data::expand_inputs(util::split_trimmed(s.inputs));
  o.output = s.output;
  o.text_key = s.text_key;
  o.text_split = text_split(s.text_split);
  o.skip_bad_records = s.on_bad_record == "skip";
  o.max_tokens = o.kind == data::CorpusKind::Chat ? s.seq_len + 1 : 0;
  o.tokenizer_path = s.tokenizer_json();
  text::BpeTokenizer tok = text::BpeTokenizer::from_file(o.tokenizer_path);
  const int64_t vocab = s.qwen().vocab_size;
  if (tok.vocab_size() > vocab) {
    throw std::invalid_argument("data.tokenizer " + o.tokenizer_path + " has " + std::to_string(tok.vocab_size()) +
                                " ids but model.vocab_size is " + std::to_string(vocab) +
                                ": the tokenizer and the model config do not match");
  }
  o.eos_id = document_end_id(s, tok, o.tokenizer_path);
  return {std::move(o), std::move(tok)};
}

}  // namespace

void check_prepare(const train::TrainConfig& cfg) { prepare_inputs(cfg); }

std::string prepare(const train::TrainConfig& cfg, const RendezvousInfo& rdv) {
  const auto& s = cfg.series_config<QwenSeriesConfig>();
  PrepareInputs in = prepare_inputs(cfg);
  const data::PrepareOptions& o = in.options;
  text::BpeTokenizer& tok = in.tokenizer;
  if (!fs::path(o.output).parent_path().empty()) fs::create_directories(fs::path(o.output).parent_path());

  auto comm = make_communicator(rdv);
  const int rank = comm->rank(), world = comm->world_size();
  const int64_t documents = data::count_documents(o);
  if (documents == 0) {
    throw std::invalid_argument("data.inputs: " + s.inputs + ": no " +
                                (o.kind == data::CorpusKind::Chat ? "conversation" : "document") + " to prepare (empty)");
  }
  const int64_t begin = documents * rank / world, end = documents * (rank + 1) / world;
  const std::string part = data::part_prefix(o.output, rank, world);
  std::string error;
  try {
    const data::PrepareReport r = data::prepare_part(o, tok, begin, end, part);
    std::ofstream(part + ".report.json") << r.to_json().dump() << "\n";
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "prepare: rank " + std::to_string(rank) + " failed without a message";
  }
  // Every rank learns whether any failed (a rank that threw alone would leave the others waiting),
  // and gets the first failing rank's message: whichever rank the launcher reports names the bad
  // record (file:line), not just "another rank failed".
  // A failed prepare leaves nothing behind: each rank removes its part.
  const auto remove_part = [&part] {
    data::remove_dataset(part);
    data::remove_dataset(part + ".loss_mask");
    std::error_code ec;
    fs::remove(part + ".report.json", ec);
  };
  if (const std::string message = first_error(*comm, error); !message.empty()) {
    remove_part();
    throw std::invalid_argument(message);
  }
  std::string text;
  data::PrepareReport total;
  if (rank == 0) {
    for (int r = 0; r < world; ++r) {
      const std::string report = data::part_prefix(o.output, r, world) + ".report.json";
      std::ifstream in(report);
      total.add(data::PrepareReport::from_json(nlohmann::json::parse(in)));
    }
    if (total.documents == 0) {
      error = "data.inputs: " + s.inputs + ": all " + std::to_string(total.skipped) + " records are bad, nothing to prepare";
      for (const auto& n : total.notes) error += "\n  " + n;
    }
  }
  if (const std::string message = first_error(*comm, error); !message.empty()) {
    remove_part();
    throw std::invalid_argument(message);
  }
  if (rank == 0) {
    for (int r = 0; r < world; ++r) fs::remove(data::part_prefix(o.output, r, world) + ".report.json");
    data::merge_parts(o, world, total, tok.vocab_size());
    text = "prepared " + o.output + " (" + data::corpus_kind_name(o.kind) + ", " + o.tokenizer_path + "): " +
           std::to_string(total.documents) + " " + (o.kind == data::CorpusKind::Chat ? "conversations" : "documents") +
           ", " + std::to_string(total.tokens) + " tokens";
    if (o.kind == data::CorpusKind::Chat) text += " (" + std::to_string(total.target_tokens) + " assistant tokens)";
    text += " from " + std::to_string(o.files.size()) + " files on " + std::to_string(world) + " ranks";
    if (total.skipped > 0) text += "; " + std::to_string(total.skipped) + " bad records skipped";
    if (total.too_long > 0) {
      text += "; " + std::to_string(total.too_long) + " conversations longer than train.seq_len + 1 = " +
              std::to_string(o.max_tokens) + " tokens (training truncates them)";
    }
    for (const auto& n : total.notes) text += "\n  " + n;
    if (static_cast<int64_t>(total.notes.size()) < total.skipped + total.too_long) {
      text += "\n  ... (" + std::to_string(total.skipped + total.too_long - static_cast<int64_t>(total.notes.size())) +
              " more)";
    }
  }
  comm->barrier();
  return text;
}

}  // namespace zeroshard::models::qwen3
