#include "data/indexed_dataset.h"

#include "io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the MMIDIDX format is little-endian; so must the host be");

namespace zeroshard::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kHeaderBytes = 34;  // magic 9 + version 8 + dtype 1 + S 8 + D 8
constexpr size_t kFlushBytes = 1 << 20;

bool valid_code(uint8_t code) { return code >= 1 && code <= 8; }
bool is_integer(TokenDType d) { return d != TokenDType::kFloat32 && d != TokenDType::kFloat64; }

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void token_range(TokenDType d, int64_t& lo, int64_t& hi) {
  switch (d) {
    case TokenDType::kUInt8: lo = 0; hi = 255; return;
    case TokenDType::kInt8: lo = -128; hi = 127; return;
    case TokenDType::kInt16: lo = -32768; hi = 32767; return;
    case TokenDType::kUInt16: lo = 0; hi = 65535; return;
    case TokenDType::kInt32: lo = std::numeric_limits<int32_t>::min(); hi = std::numeric_limits<int32_t>::max(); return;
    default: lo = std::numeric_limits<int64_t>::min(); hi = std::numeric_limits<int64_t>::max(); return;
  }
}

struct Mapping {
  void* addr = nullptr;
  uint64_t size = 0;
};

Mapping map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error(path + ": cannot stat: " + std::strerror(e));
  }
  Mapping m;
  m.size = static_cast<uint64_t>(st.st_size);
  if (m.size > 0) {
    m.addr = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
    if (m.addr == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot mmap " + std::to_string(m.size) + " bytes: " + std::strerror(e));
    }
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

}  // namespace

size_t token_dtype_size(TokenDType d) {
  switch (d) {
    case TokenDType::kUInt8: case TokenDType::kInt8: return 1;
    case TokenDType::kInt16: case TokenDType::kUInt16: return 2;
    case TokenDType::kInt32: case TokenDType::kFloat32: return 4;
    case TokenDType::kInt64: case TokenDType::kFloat64: return 8;
  }
  throw std::invalid_argument("token dtype code " + std::to_string(static_cast<int>(d)) + " is not an MMIDIDX dtype (1..8)");
}

const char* token_dtype_name(TokenDType d) {
  switch (d) {
    case TokenDType::kUInt8: return "uint8";
    case TokenDType::kInt8: return "int8";
    case TokenDType::kInt16: return "int16";
    case TokenDType::kInt32: return "int32";
    case TokenDType::kInt64: return "int64";
    case TokenDType::kFloat64: return "float64";
    case TokenDType::kFloat32: return "float32";
    case TokenDType::kUInt16: return "uint16";
  }
  return "invalid";
}

TokenDType optimal_token_dtype(int64_t vocab_size) { return vocab_size < 65500 ? TokenDType::kUInt16 : TokenDType::kInt32; }

// ---------------------------------------------------------------------------------------------
// Writer

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype) : prefix_(prefix), dtype_(dtype) {
  if (!valid_code(static_cast<uint8_t>(dtype)) || !is_integer(dtype)) {
    throw std::invalid_argument(prefix + ".bin: token datasets need an integer dtype, got code " +
                                std::to_string(static_cast<int>(dtype)));
  }
  bin_ = std::make_unique<io::AtomicFileWriter>(prefix + ".bin");
}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

void IndexedDatasetWriter::append(const int64_t* tokens, size_t n) {
  if (finalized_) throw std::logic_error(prefix_ + ".bin: add after finalize()");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw std::invalid_argument(prefix_ + ".bin: a sequence of " + std::to_string(n) + " tokens exceeds the int32 length field");
  }
  int64_t lo = 0, hi = 0;
  token_range(dtype_, lo, hi);
  const size_t w = token_dtype_size(dtype_);
  for (size_t k = 0; k < n; ++k) {
    const int64_t t = tokens[k];
    if (t < lo || t > hi) {
      throw std::invalid_argument(prefix_ + ".bin: document " + std::to_string(documents()) + ", token " + std::to_string(k) +
                                  " of its sequence: id " + std::to_string(t) + " does not fit " + token_dtype_name(dtype_));
    }
    char bytes[8];
    std::memcpy(bytes, &t, 8);  // little-endian: the low w bytes are the narrowed value
    buffer_.insert(buffer_.end(), bytes, bytes + w);
  }
  if (buffer_.size() >= kFlushBytes) {
    bin_->write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }
}

void IndexedDatasetWriter::add_item(const std::vector<int64_t>& tokens) {
  append(tokens.data(), tokens.size());
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
}

void IndexedDatasetWriter::end_document() { doc_index_.push_back(static_cast<int64_t>(lengths_.size())); }

void IndexedDatasetWriter::add_document(const std::vector<int64_t>& tokens) {
  add_item(tokens);
  end_document();
}

void IndexedDatasetWriter::add_document(const std::vector<int64_t>& tokens, const std::vector<int32_t>& sequence_lengths) {
  int64_t total = 0;
  for (int32_t l : sequence_lengths) {
    if (l < 0) throw std::invalid_argument(prefix_ + ".bin: document " + std::to_string(documents()) + ": negative sequence length");
    total += l;
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    throw std::invalid_argument(prefix_ + ".bin: document " + std::to_string(documents()) + ": sequence lengths sum to " +
                                std::to_string(total) + " but it has " + std::to_string(tokens.size()) + " tokens");
  }
  append(tokens.data(), tokens.size());
  lengths_.insert(lengths_.end(), sequence_lengths.begin(), sequence_lengths.end());
  end_document();
}

void IndexedDatasetWriter::finalize() {
  if (finalized_) return;
  if (doc_index_.back() != static_cast<int64_t>(lengths_.size())) {
    throw std::logic_error(prefix_ + ".idx: " + std::to_string(static_cast<int64_t>(lengths_.size()) - doc_index_.back()) +
                           " sequence(s) after the last end_document()");
  }
  if (!buffer_.empty()) bin_->write(buffer_.data(), buffer_.size());
  buffer_.clear();
  bin_->commit();

  io::AtomicFileWriter idx(prefix_ + ".idx");
  const uint64_t version = 1, S = lengths_.size(), D = doc_index_.size();
  const auto code = static_cast<uint8_t>(dtype_);
  idx.write(kMagic, sizeof(kMagic));
  idx.write(&version, 8);
  idx.write(&code, 1);
  idx.write(&S, 8);
  idx.write(&D, 8);
  idx.write(lengths_.data(), S * sizeof(int32_t));
  std::vector<int64_t> pointers(S);
  int64_t ptr = 0;
  const auto w = static_cast<int64_t>(token_dtype_size(dtype_));
  for (size_t i = 0; i < S; ++i) {
    pointers[i] = ptr;
    ptr += static_cast<int64_t>(lengths_[i]) * w;
  }
  idx.write(pointers.data(), S * sizeof(int64_t));
  idx.write(doc_index_.data(), D * sizeof(int64_t));
  idx.commit();
  finalized_ = true;
}

// ---------------------------------------------------------------------------------------------
// Reader

IndexedDataset::IndexedDataset(const std::string& prefix)
    : prefix_(prefix), idx_path_(prefix + ".idx"), bin_path_(prefix + ".bin") {
  try {
    open();
  } catch (...) {
    unmap();
    throw;
  }
}

void IndexedDataset::unmap() {
  if (bin_map_ != nullptr) ::munmap(bin_map_, bin_size_);
  if (idx_map_ != nullptr) ::munmap(idx_map_, idx_size_);
  bin_map_ = idx_map_ = nullptr;
}

void IndexedDataset::open() {
  const Mapping idx = map_file(idx_path_);
  idx_map_ = idx.addr;
  idx_size_ = idx.size;
  const char* p = static_cast<const char*>(idx_map_);
  if (idx_size_ < kHeaderBytes) {
    throw std::runtime_error(idx_path_ + ": " + std::to_string(idx_size_) + " bytes, too small for the 34-byte MMIDIDX header");
  }
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) throw std::runtime_error(idx_path_ + ": bad magic (not a Megatron MMIDIDX index)");
  const auto version = load<uint64_t>(p + 9);
  if (version != 1) throw std::runtime_error(idx_path_ + ": version " + std::to_string(version) + ", expected 1");
  const auto code = static_cast<uint8_t>(p[17]);
  if (!valid_code(code)) throw std::runtime_error(idx_path_ + ": dtype code " + std::to_string(code) + " is not 1..8");
  dtype_ = static_cast<TokenDType>(code);
  const auto S = load<uint64_t>(p + 18), D = load<uint64_t>(p + 26);
  const uint64_t body = idx_size_ - kHeaderBytes;
  if (S > body / 12 || D > body / 8 || D < 1) {
    throw std::runtime_error(idx_path_ + ": sequence count " + std::to_string(S) + " and document-index count " +
                             std::to_string(D) + " do not fit a " + std::to_string(idx_size_) + "-byte index");
  }
  const uint64_t expected = kHeaderBytes + S * 12 + D * 8;
  if (idx_size_ != expected && idx_size_ != expected + S) {
    throw std::runtime_error(idx_path_ + ": " + std::to_string(idx_size_) + " bytes, expected " + std::to_string(expected) +
                             " (or " + std::to_string(expected + S) + " with sequence modes) for " + std::to_string(S) +
                             " sequences and " + std::to_string(D) + " document indices");
  }
  sequence_count_ = static_cast<int64_t>(S);
  document_count_ = static_cast<int64_t>(D);
  lengths_ = p + kHeaderBytes;
  pointers_ = lengths_ + S * 4;
  doc_index_ = pointers_ + S * 8;
  if (idx_size_ == expected + S && S > 0) modes_ = doc_index_ + D * 8;
  if (document_begin(0) != 0 || document_begin(document_count_ - 1) != sequence_count_) {
    throw std::runtime_error(idx_path_ + ": document indices run from " + std::to_string(document_begin(0)) + " to " +
                             std::to_string(document_begin(document_count_ - 1)) + ", expected 0 to " + std::to_string(S));
  }
  const Mapping bin = map_file(bin_path_);
  bin_map_ = bin.addr;
  bin_size_ = bin.size;
  if (S > 0) token_bytes(sequence_count_ - 1, 0, sequence_length(sequence_count_ - 1));  // last sequence inside .bin
}

IndexedDataset::~IndexedDataset() { unmap(); }

int32_t IndexedDataset::sequence_length(int64_t i) const {
  if (i < 0 || i >= sequence_count_) {
    throw std::out_of_range(idx_path_ + ": sequence " + std::to_string(i) + " out of range [0, " + std::to_string(sequence_count_) + ")");
  }
  return load<int32_t>(lengths_ + i * 4);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  sequence_length(i);  // range check
  return load<int64_t>(pointers_ + i * 8);
}

int8_t IndexedDataset::sequence_mode(int64_t i) const {
  if (modes_ == nullptr) throw std::logic_error(idx_path_ + ": the dataset has no sequence modes (not multimodal)");
  sequence_length(i);
  return static_cast<int8_t>(modes_[i]);
}

int64_t IndexedDataset::document_begin(int64_t d) const {
  if (d < 0 || d >= document_count_) {
    throw std::out_of_range(idx_path_ + ": document index " + std::to_string(d) + " out of range [0, " +
                            std::to_string(document_count_) + ")");
  }
  return load<int64_t>(doc_index_ + d * 8);
}

const char* IndexedDataset::token_bytes(int64_t i, int64_t offset, int64_t length) const {
  const int64_t len = sequence_length(i);
  if (len < 0) throw std::runtime_error(idx_path_ + ": sequence " + std::to_string(i) + " has negative length " + std::to_string(len));
  if (offset < 0 || length < 0 || offset > len || length > len - offset) {
    throw std::out_of_range(bin_path_ + ": tokens [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                            ") outside sequence " + std::to_string(i) + " of " + std::to_string(len) + " tokens");
  }
  const int64_t ptr = load<int64_t>(pointers_ + i * 8);
  const auto w = static_cast<int64_t>(token_dtype_size(dtype_));
  const int64_t begin = ptr + offset * w, bytes = length * w;
  if (ptr < 0 || begin < 0 || static_cast<uint64_t>(begin) > bin_size_ || static_cast<uint64_t>(bytes) > bin_size_ - static_cast<uint64_t>(begin)) {
    throw std::runtime_error(bin_path_ + ": sequence " + std::to_string(i) + " (byte offset " + std::to_string(ptr) + ", " +
                             std::to_string(len) + " tokens of " + token_dtype_name(dtype_) + ") lies outside the " +
                             std::to_string(bin_size_) + "-byte file");
  }
  return static_cast<const char*>(bin_map_) + begin;
}

const void* IndexedDataset::data(int64_t i) const { return token_bytes(i, 0, sequence_length(i)); }

void IndexedDataset::read(int64_t i, int64_t offset, int64_t length, int64_t* out) const {
  if (!is_integer(dtype_)) throw std::logic_error(bin_path_ + ": token ids requested from a " + token_dtype_name(dtype_) + " dataset");
  const char* p = token_bytes(i, offset, length);
  for (int64_t k = 0; k < length; ++k) {
    switch (dtype_) {
      case TokenDType::kUInt8: out[k] = load<uint8_t>(p + k); break;
      case TokenDType::kInt8: out[k] = load<int8_t>(p + k); break;
      case TokenDType::kInt16: out[k] = load<int16_t>(p + k * 2); break;
      case TokenDType::kUInt16: out[k] = load<uint16_t>(p + k * 2); break;
      case TokenDType::kInt32: out[k] = load<int32_t>(p + k * 4); break;
      default: out[k] = load<int64_t>(p + k * 8); break;
    }
  }
}

std::vector<int64_t> IndexedDataset::get(int64_t i, int64_t offset, int64_t length) const {
  if (length < 0) length = sequence_length(i) - offset;
  std::vector<int64_t> out(static_cast<size_t>(std::max<int64_t>(length, 0)));
  read(i, offset, length, out.data());
  return out;
}

void IndexedDataset::validate() const {
  const auto w = static_cast<int64_t>(token_dtype_size(dtype_));
  int64_t expect = 0;
  for (int64_t i = 0; i < sequence_count_; ++i) {
    const int64_t len = sequence_length(i), ptr = load<int64_t>(pointers_ + i * 8);
    if (len < 0) throw std::runtime_error(idx_path_ + ": sequence " + std::to_string(i) + " has negative length " + std::to_string(len));
    if (ptr != expect) {
      throw std::runtime_error(idx_path_ + ": sequence " + std::to_string(i) + " starts at byte " + std::to_string(ptr) +
                               ", expected " + std::to_string(expect) + " (sequences are stored back to back)");
    }
    expect += len * w;
  }
  if (static_cast<uint64_t>(expect) != bin_size_) {
    throw std::runtime_error(bin_path_ + ": " + std::to_string(bin_size_) + " bytes, the index describes " + std::to_string(expect));
  }
  for (int64_t d = 1; d < document_count_; ++d) {
    if (document_begin(d) < document_begin(d - 1)) {
      throw std::runtime_error(idx_path_ + ": document index " + std::to_string(d) + " (" + std::to_string(document_begin(d)) +
                               ") is below the previous one (" + std::to_string(document_begin(d - 1)) + ")");
    }
  }
}

}  // namespace zeroshard::data
