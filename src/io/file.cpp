#include "io/file.h"

#include "util/crc32.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace zeroshard::io {

namespace {
std::string errno_text() { return std::strerror(errno); }
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw std::runtime_error("cannot open '" + path + "': " + errno_text());
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw std::runtime_error("cannot stat '" + path + "': " + errno_text());
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  if (offset + n > size_ || offset + n < offset) {
    throw std::runtime_error("'" + path_ + "' is too short: need bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + n) + ") but the file has " + std::to_string(size_) +
                             " bytes (truncated?)");
  }
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) throw std::runtime_error("read of '" + path_ + "' at byte " + std::to_string(offset) + " failed: " +
                                           (got < 0 ? errno_text() : std::string("unexpected end of file")));
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

uint32_t ReadOnlyFile::crc32() const {
  std::vector<char> block(4 << 20);
  uint32_t crc = 0;
  for (uint64_t off = 0; off < size_; off += block.size()) {
    const uint64_t n = std::min<uint64_t>(block.size(), size_ - off);
    read_at(off, block.data(), n);
    crc = util::crc32(block.data(), n, crc);
  }
  return crc;
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)), tmp_path_(path_ + ".tmp") {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot create '" + tmp_path_ + "': " + errno_text());
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, uint64_t n) {
  crc_ = util::crc32(data, n, crc_);
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = ::write(fd_, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw std::runtime_error("write to '" + tmp_path_ + "' failed: " + errno_text());
    p += put;
    n -= static_cast<uint64_t>(put);
    bytes_ += static_cast<uint64_t>(put);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) throw std::runtime_error("fsync of '" + tmp_path_ + "' failed: " + errno_text());
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    throw std::runtime_error("cannot rename '" + tmp_path_ + "' to '" + path_ + "': " + errno_text());
  }
  committed_ = true;
  fsync_directory(std::filesystem::path(path_).parent_path().string());
}

void write_file_atomic(const std::string& path, const std::string& text) {
  AtomicFileWriter w(path);
  w.write(text.data(), text.size());
  w.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open folder '" + dir + "': " + errno_text());
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw std::runtime_error("fsync of folder '" + dir + "' failed: " + errno_text());
}

}  // namespace zeroshard::io
