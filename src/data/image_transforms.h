// The image and video preprocessing of DiffSynth-Studio's training datasets (UnifiedDataset's
// default_image_operator / default_video_operator in diffsynth/core/data/operators.py), without
// torch: LoadImage -> ImageCropAndResize, LoadVideo's frame sampling, and the pipeline's
// preprocess_image / preprocess_video scaling to [-1, 1].
//
// - resize_bilinear is PIL's Image.resize(..., BILINEAR) on an RGB image, bit for bit: a
//   triangle filter whose support is scaled by the shrink factor (antialiasing when
//   downscaling), 22-bit fixed-point weights, a horizontal pass rounded to 8 bits, then a
//   vertical pass. torchvision's resize on a PIL image calls exactly this.
// - crop_and_resize: scale = max(W'/W, H'/H), resize to (round(H*scale), round(W*scale)) with
//   Python's round (half to even), then torchvision's center_crop (top = round((h - H')/2.0),
//   also half to even; zero padding if the image is smaller).
// - Video frames (LoadVideo): frame i of the clip is source frame i (0, 1, 2, ...); DiffSynth's
//   current loader has no interval and no random start. When the video has
//   fewer frames than num_frames, the clip takes the largest n <= total with
//   n % time_division_factor == time_division_remainder (or n = 1), i.e. 1 + 4k frames by
//   default, and those are the first n frames. With fix_frame_rate the clip is resampled to
//   frame_rate: clip frame i is source frame min(round(i / frame_rate * fps), total - 1) and the
//   available length is floor(duration * frame_rate).
// - to_chw / to_cthw: v * float(2/255) - 1 in fp32, as preprocess_image computes it in an fp32
//   pipeline (a bf16 pipeline casts the 0..255 values to bf16 first and rounds twice; cast our
//   fp32 result to bf16 instead and a value may differ by one bf16 ulp).
#pragma once

#include "io/image_codec.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::data {

io::RgbImage resize_bilinear(const io::RgbImage& image, int64_t height, int64_t width);
io::RgbImage center_crop(const io::RgbImage& image, int64_t height, int64_t width);
io::RgbImage crop_and_resize(const io::RgbImage& image, int64_t height, int64_t width);

// ImageCropAndResize's size rule. height and width both > 0: a fixed size. Otherwise
// ("dynamic resolution"): an image above max_pixels is scaled by sqrt(H*W / max_pixels)
// (truncated), then both sides are rounded down to their division factor.
struct ImageSizeRule {
  int64_t height = 0;
  int64_t width = 0;
  int64_t max_pixels = 1920 * 1080;
  int64_t height_division_factor = 16;
  int64_t width_division_factor = 16;
};
// (height, width) the rule gives for an image of this size; throws when it is empty.
std::pair<int64_t, int64_t> target_size(const ImageSizeRule& rule, int64_t image_height, int64_t image_width);
io::RgbImage fit_image(const io::RgbImage& image, const ImageSizeRule& rule, const std::string& name = "");

struct FrameSampling {
  int64_t num_frames = 81;
  int64_t time_division_factor = 4;
  int64_t time_division_remainder = 1;
  bool fix_frame_rate = false;
  double frame_rate = 24;
  // Our extension, after DiffSynth's older train_wan_t2v.py loader (which drew start_frame at
  // random and skipped videos too short for the clip): clip frame i is source frame
  // start_frame + i * frame_interval. A video too short for num_frames gives the longest
  // 1 + 4k clip that fits, as LoadVideo does. The defaults (0, 1) are LoadVideo's. Not combined
  // with fix_frame_rate.
  int64_t start_frame = 0;
  int64_t frame_interval = 1;
};
// LoadVideo.get_num_frames for a video with `available` frames.
int64_t clip_frame_count(int64_t available, const FrameSampling& sampling);
// The source frame indices of the clip. duration_seconds <= 0: total_frames / fps is used.
std::vector<int64_t> clip_frame_indices(int64_t total_frames, double fps, double duration_seconds,
                                        const FrameSampling& sampling);

// DiffSynth routes by extension (case-insensitive): jpg/jpeg/png/webp are images, gif and
// mp4/avi/mov/wmv/mkv/flv/webm are videos (gif decoded by FFmpeg here, by PIL there).
enum class MediaKind { kImage, kVideo };
// Throws std::invalid_argument "<path>: unsupported media file extension ..." otherwise.
MediaKind media_kind(const std::string& path);

struct Clip {
  std::vector<io::RgbImage> frames;       // each fitted to the size rule
  std::vector<int64_t> source_frames;     // source frame index of each frame (0 for an image)
  double source_fps = 0;                  // 0 for an image
  int64_t source_width = 0, source_height = 0;  // the file's size before the size rule
  int64_t source_frame_count = -1;        // exact count when it had to be known, else -1
  std::vector<std::string> warnings;      // decoder warnings
};
// default_video_operator: an image gives a one-frame clip, a video its sampled frames.
// Errors (unreadable file, a video with no frames) name the path.
Clip load_clip(const std::string& path, const ImageSizeRule& rule, const FrameSampling& sampling);
// default_image_operator on one path.
io::RgbImage load_image(const std::string& path, const ImageSizeRule& rule);

// [3, H, W] floats in [-1, 1].
std::vector<float> to_chw(const io::RgbImage& image);
// [3, T, H, W] floats in [-1, 1]; all frames must have one size.
std::vector<float> to_cthw(const std::vector<io::RgbImage>& frames);

}  // namespace zeroshard::data
