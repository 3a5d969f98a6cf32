// Tokenized corpora for language models, as `zeroshard prepare` writes them: plain text files and
// jsonl files (a string field per line, `text` by default) become a Megatron indexed dataset of
// token ids (data/indexed_dataset.h) with the end-of-document token after every document; jsonl
// chat conversations (`messages`, the ms-swift / Hugging Face SFT format) become one sequence per
// conversation (Qwen ChatML, text/chat_template.h) plus a parallel dataset of loss masks.
//
// Files written for output prefix P:
//   P.bin / P.idx                 token ids, one document per input document (text) or
//                                 conversation (chat)
//   P.loss_mask.bin / .idx        chat only: uint8, 1 where the token is a training target
//                                 (assistant-produced), same sequence lengths as P
//   P.json                        what was prepared: kind, tokenizer and its vocabulary size, the
//                                 end-of-document id, counts, the sources, every record skipped
//
// Documents: a jsonl file's non-blank lines (numbered as in the file); a plain text file (any
// other extension) is one document, or one per paragraph (blank-line separated) or per
// non-blank line (TextSplit). Folders stand for their regular files, sorted by name.
//
// Sharding: documents are numbered 0 .. D-1 in input order and rank r of W tokenizes the
// contiguous block [r*D/W, (r+1)*D/W) into a part; rank 0 concatenates the parts in rank order.
// The result is byte-identical for every W.
//
// Bad records (a malformed jsonl line, a line without the text field, a conversation the chat
// template rejects — e.g. one without an assistant turn): an error naming file:line, or with
// skip_bad_records each is skipped, counted and listed in P.json and the report. A chat
// conversation longer than max_tokens is kept whole and reported (file:line): training
// truncates it and counts it again.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::text {
class BpeTokenizer;
}

namespace zeroshard::data {

enum class CorpusKind { Text, Chat };
enum class TextSplit { File, Paragraph, Line };

const char* corpus_kind_name(CorpusKind kind);

// Files named by `inputs` (files, or folders: their regular files sorted by name), in order.
// Throws naming an input that does not exist or a folder without files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

struct PrepareOptions {
  CorpusKind kind = CorpusKind::Text;
  std::vector<std::string> files;  // expanded inputs
  std::string output;              // prefix P
  std::string text_key = "text";   // jsonl field of a text document
  TextSplit text_split = TextSplit::File;
  int32_t eos_id = -1;             // text: appended after every document (required)
  int64_t max_tokens = 0;          // chat: report conversations longer than this (0: none)
  bool skip_bad_records = false;
  std::string tokenizer_path;      // recorded in P.json
};

struct PrepareReport {
  int64_t documents = 0;      // written
  int64_t tokens = 0;         // written, end-of-document tokens included
  int64_t target_tokens = 0;  // chat: tokens with loss mask 1
  int64_t skipped = 0;        // bad records skipped (skip_bad_records)
  int64_t too_long = 0;       // chat: conversations longer than max_tokens
  std::vector<std::string> notes;  // "file:line: why" for every skipped or too-long record

  void add(const PrepareReport& other);
  nlohmann::json to_json() const;
  static PrepareReport from_json(const nlohmann::json& j);
};

// Documents in `files` (every rank computes the same; reads the files, parses nothing).
int64_t count_documents(const PrepareOptions& options);

// The part prefix of `rank` of `world` for output P.
std::string part_prefix(const std::string& output, int rank, int world);
// Removes <prefix>.bin and <prefix>.idx where they exist.
void remove_dataset(const std::string& prefix);

// Tokenizes documents [begin, end) into the part `part` (P.bin/.idx and, for chat, the masks).
PrepareReport prepare_part(const PrepareOptions& options, text::BpeTokenizer& tokenizer, int64_t begin, int64_t end,
                           const std::string& part);

// Rank 0, after every part is written: P from the parts in order, P.json; removes the parts.
void merge_parts(const PrepareOptions& options, int world, const PrepareReport& total, int64_t tokenizer_vocab);

// P.json of a prepared dataset (throws naming the file when it is missing or unreadable).
nlohmann::json read_corpus_meta(const std::string& prefix);

}  // namespace zeroshard::data
