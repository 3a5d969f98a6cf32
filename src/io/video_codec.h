// Video files through FFmpeg's libraries (libavformat, libavcodec, libswscale): reading frames
// as 8-bit RGB for the video datasets, and writing RGB frames to mp4 for samples.
//
// Reading conventions (chosen to equal what DiffSynth-Studio's imageio/ffmpeg reader returns):
// - Frames are numbered 0, 1, ... in presentation order, as the decoder outputs them; every
//   decoded frame counts (no frame-rate resampling: imageio runs ffmpeg with rgb24 rawvideo
//   output, which passes frames through).
// - YUV -> RGB uses the matrix and range the stream is tagged with (BT.601 limited range when
//   untagged), as ffmpeg's scale filter does in its "auto" mode, with its default bicubic flags.
// - frame_count() is exact: it decodes the whole stream once (cached), because a container's
//   nb_frames may be absent (Matroska, WebM) or wrong (truncated or damaged files).
// - Frames are reached by decoding forward from the start (no timestamp seeking, whose landing
//   point depends on keyframes); a request for an earlier frame reopens the file.
// - FFmpeg's own log is lowered to errors once (its default prints libx264's statistics and
//   swscale notices to stderr on every file) unless the program has set another level.
// Errors throw std::runtime_error naming the file and FFmpeg's error text.
#pragma once

#include "io/image_codec.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::io {

struct VideoInfo {
  int64_t width = 0, height = 0;
  double fps = 0;                 // average frame rate (avg_frame_rate, else r_frame_rate)
  int64_t fps_num = 0, fps_den = 1;
  int64_t container_frames = 0;   // nb_frames as the container states it; 0 = not stored
  double duration_seconds = -1;   // container duration, else the stream's; -1 = unknown
  std::string codec;              // e.g. "h264"
  std::string container;          // e.g. "mov,mp4,m4a,3gp,3g2,mj2"
};

struct VideoReaderOptions {
  int threads = 1;  // decoder threads; 1 keeps decoding off the training cores and deterministic
  // false: a packet the decoder rejects (damaged or cut data) throws, naming the packet and
  // FFmpeg's error. true: it is skipped with a warning and decoding goes on, as the ffmpeg
  // command does (then frame_count() counts the frames that decode); a read error ends the
  // stream with a warning.
  bool tolerate_decode_errors = false;
};

class VideoReader {
 public:
  explicit VideoReader(const std::string& path, const VideoReaderOptions& options = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const std::string& path() const;
  const VideoInfo& info() const;

  // Exact number of decodable frames (decodes the stream once, then cached).
  int64_t frame_count();
  bool frame_count_known() const;

  // Frames at the given indices (any order, repeats allowed), in the order asked. An index at or
  // beyond the end throws std::out_of_range naming the file, the index and the frame count.
  std::vector<RgbImage> read_frames(const std::vector<int64_t>& indices);
  // The first n frames, or all of them when the stream is shorter (then frame_count is known).
  std::vector<RgbImage> read_first_frames(int64_t n);

  // Decoder warnings seen so far (frames flagged corrupt, container/decoded count mismatch).
  const std::vector<std::string>& warnings() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct VideoWriterOptions {
  double fps = 16;
  // "" = libx264 when this FFmpeg build has it, else mpeg4. Any encoder name FFmpeg knows works.
  std::string codec;
  int crf = 18;                    // libx264 quality (0 = lossless .. 51)
  std::string preset = "medium";   // libx264 preset
  int mpeg4_qscale = 2;            // mpeg4 quality (1 = best .. 31)
  int threads = 1;
  bool faststart = true;           // mp4/mov: index at the front, so players can stream it
};

// Encodes RGB frames (all of one size; yuv420p needs even width and height) to `path`; the
// container follows the extension (.mp4, .mkv, .mov, ...). Written under path + ".tmp" and
// renamed at finish(), so a failed write never leaves a half file under the final name.
class VideoWriter {
 public:
  VideoWriter(const std::string& path, int64_t width, int64_t height, const VideoWriterOptions& options = {});
  ~VideoWriter();  // without finish(): the temporary file is removed
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  void write(const RgbImage& frame);
  void finish();
  const std::string& codec_name() const;  // the encoder used, e.g. "libx264"
  int64_t frames_written() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One call: the whole clip. Returns the encoder name used.
std::string write_video(const std::string& path, const std::vector<RgbImage>& frames,
                        const VideoWriterOptions& options = {});

}  // namespace zeroshard::io
