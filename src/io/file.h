// POSIX file helpers with errors that name the file: positioned reads (each rank reads only
// its byte ranges), and atomic writes (temporary name, fsync, rename, fsync of the folder),
// so a crash leaves either the old file or the new one, never a half-written one.
#pragma once

#include <cstdint>
#include <string>

namespace zeroshard::io {

class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);  // throws "cannot open 'path': reason"
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; throws naming the file, offset and size otherwise.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;
  // CRC-32 of the whole file, streamed in blocks.
  uint32_t crc32() const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes a file under `path + ".tmp"`, and on commit() fsyncs it, renames it to `path` and
// fsyncs the folder. Destroyed without commit(): the temporary is removed.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, uint64_t n);  // also updates the running CRC-32
  void commit();
  uint64_t bytes_written() const { return bytes_; }
  uint32_t crc32() const { return crc_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  uint32_t crc_ = 0;
  bool committed_ = false;
};

// One call: the whole text, atomically.
void write_file_atomic(const std::string& path, const std::string& text);
// fsync of a folder, so a rename inside it survives a crash.
void fsync_directory(const std::string& dir);

}  // namespace zeroshard::io
