// Megatron-LM's indexed token dataset (megatron/core/datasets/indexed_dataset.py), byte for
// byte: PREFIX.bin holds the token ids of every sequence back to back in one dtype; PREFIX.idx
// (all little-endian) is
//   9 bytes   magic "MMIDIDX\0\0"
//   u64       version = 1
//   u8        dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32,
//             8 uint16)
//   u64       S, the sequence count
//   u64       D, the document-index count (documents + 1)
//   i32 x S   sequence lengths (tokens)
//   i64 x S   sequence pointers (byte offset of each sequence in .bin)
//   i64 x D   document indices: 0, then after each document the number of sequences so far
//   i8  x S   sequence modes (multimodal datasets only)
// A document is one or more sequences (Megatron's preprocess_data.py writes one per document,
// or one per sentence with --split-sentences).
//
// The reader maps both files (mmap, never read whole): opening checks the header, the .idx size
// against S and D, the document indices' ends and that the last sequence lies inside .bin;
// every access checks its bounds; validate() checks every entry. Errors name the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::io {
class AtomicFileWriter;
}

namespace zeroshard::data {

enum class TokenDType : uint8_t {
  kUInt8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kFloat64 = 6, kFloat32 = 7, kUInt16 = 8,
};
size_t token_dtype_size(TokenDType dtype);
const char* token_dtype_name(TokenDType dtype);
// Megatron's DType.optimal_dtype: uint16 when the vocabulary has fewer than 65500 ids, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

// Writes PREFIX.bin and PREFIX.idx. Both are written under ".tmp" names and renamed by
// finalize(); destroyed without finalize(), nothing is left under the final names.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document made of one sequence. Token ids must fit the dtype (integer dtypes only);
  // an id out of range throws naming the document and position (Megatron would wrap it).
  void add_document(const std::vector<int64_t>& tokens);
  // One document made of several sequences: tokens is their concatenation.
  void add_document(const std::vector<int64_t>& tokens, const std::vector<int32_t>& sequence_lengths);
  // Megatron's add_item / end_document pair: sequences, then a document boundary.
  void add_item(const std::vector<int64_t>& tokens);
  void end_document();

  void finalize();
  int64_t sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t documents() const { return static_cast<int64_t>(doc_index_.size()) - 1; }

 private:
  void append(const int64_t* tokens, size_t n);
  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<io::AtomicFileWriter> bin_;
  std::vector<char> buffer_;  // encoded tokens not yet written
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_index_{0};
  bool finalized_ = false;
};

class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return sequence_count_; }
  int64_t num_documents() const { return document_count_ - 1; }
  bool multimodal() const { return modes_ != nullptr; }
  uint64_t bin_bytes() const { return bin_size_; }

  int32_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;
  int8_t sequence_mode(int64_t i) const;  // throws unless multimodal()
  // Document d spans sequences [document_begin(d), document_begin(d + 1)); d in [0, documents].
  int64_t document_begin(int64_t d) const;

  // Tokens [offset, offset + length) of sequence i (length -1 = to the end), widened to int64
  // (integer dtypes only), like Megatron's IndexedDataset.get(idx, offset, length).
  std::vector<int64_t> get(int64_t i, int64_t offset = 0, int64_t length = -1) const;
  void read(int64_t i, int64_t offset, int64_t length, int64_t* out) const;
  // The raw bytes of sequence i in .bin (sequence_length(i) * dtype size bytes), bounds-checked.
  const void* data(int64_t i) const;

  // Checks every length, pointer and document index (O(S + D) reads of the index).
  void validate() const;

 private:
  void open();
  void unmap();
  const char* token_bytes(int64_t i, int64_t offset, int64_t length) const;
  std::string prefix_, idx_path_, bin_path_;
  TokenDType dtype_ = TokenDType::kInt32;
  int64_t sequence_count_ = 0, document_count_ = 0;
  void* idx_map_ = nullptr;
  size_t idx_size_ = 0;
  void* bin_map_ = nullptr;
  uint64_t bin_size_ = 0;
  // Into the .idx map. The arrays start at byte 34, so they are not aligned for their types:
  // entries are read with memcpy.
  const char* lengths_ = nullptr;
  const char* pointers_ = nullptr;
  const char* doc_index_ = nullptr;
  const char* modes_ = nullptr;
};

}  // namespace zeroshard::data
