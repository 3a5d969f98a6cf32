// io/video_codec.h in a build without FFmpeg (ZEROSHARD_WITH_VIDEO=OFF; video_codec.cpp is the
// real one): opening a reader or a writer refuses, naming the file and the CMake option. No
// object can exist, so the other members are never reached.
#include "io/video_codec.h"

#include "util/optional_parts.h"

namespace zeroshard::io {

struct VideoReader::Impl {
  std::string path;
  VideoInfo info;
  std::vector<std::string> warnings;
};

VideoReader::VideoReader(const std::string& path, const VideoReaderOptions&) {
  util::require_part(util::OptionalPart::kVideo, path);
}
VideoReader::~VideoReader() = default;
const std::string& VideoReader::path() const { return impl_->path; }
const VideoInfo& VideoReader::info() const { return impl_->info; }
int64_t VideoReader::frame_count() { return 0; }
bool VideoReader::frame_count_known() const { return false; }
std::vector<RgbImage> VideoReader::read_frames(const std::vector<int64_t>&) { return {}; }
std::vector<RgbImage> VideoReader::read_first_frames(int64_t) { return {}; }
const std::vector<std::string>& VideoReader::warnings() const { return impl_->warnings; }

struct VideoWriter::Impl {
  std::string codec;
};

VideoWriter::VideoWriter(const std::string& path, int64_t, int64_t, const VideoWriterOptions&) {
  util::require_part(util::OptionalPart::kVideo, path);
}
VideoWriter::~VideoWriter() = default;
void VideoWriter::write(const RgbImage&) {}
void VideoWriter::finish() {}
const std::string& VideoWriter::codec_name() const { return impl_->codec; }
int64_t VideoWriter::frames_written() const { return 0; }

std::string write_video(const std::string& path, const std::vector<RgbImage>&, const VideoWriterOptions&) {
  util::require_part(util::OptionalPart::kVideo, path);
  return {};
}

}  // namespace zeroshard::io
