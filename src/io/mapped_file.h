// A file memory-mapped read-only for as long as something uses its bytes: torch.save archives
// whose tensors are views of their zip entries (io/torch_pth.h), and frozen weights used where
// they lie in the user's files (FrozenStorage::File, shard/file_backed.h). Every process that
// maps the same file shares its pages through the page cache; clean pages are reclaimed by the
// kernel under memory pressure and read again when touched, so a mapping larger than memory
// needs no swap.
//
// Another process writing or truncating the file while it is mapped would change what the
// mapping shows (or fault on pages past the new end): check_unchanged() compares the file's size,
// modification time and identity with those it had when mapped and throws naming the file; a
// page fault past the end of a truncated file (SIGBUS) in between two checks ends the process
// with a message naming the file instead of a bare signal.
#pragma once

#include <cstdint>
#include <string>

namespace zeroshard::io {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws "cannot map 'path': reason"
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  // Throws naming the file when it is no longer the file that was mapped: another size, another
  // modification time, or the path now names another file (replaced or removed).
  void check_unchanged() const;
  // Hints for the kernel (no effect on what is read): start reading [offset, offset + n) now
  // (MADV_WILLNEED), or reclaim those pages before others when memory is short (MADV_COLD).
  void will_need(uint64_t offset, uint64_t n) const;
  void done_with(uint64_t offset, uint64_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  char* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t dev_ = 0, ino_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace zeroshard::io
