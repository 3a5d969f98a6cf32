#include "data/image_transforms.h"

#include "io/video_codec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace zeroshard::data {
namespace {

// PIL's fixed-point precision for 8-bit resampling (Resample.c: 32 - 8 - 2).
constexpr int kPrecisionBits = 22;

// Python's round() on a double: nearest, ties to even (the default FP rounding mode).
int64_t round_half_even(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

// The triangle (bilinear) filter with support 1.
double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Per output pixel: first input pixel, number of taps, and the taps as fixed-point weights,
// computed as PIL's precompute_coeffs + normalize_coeffs_8bpc do.
struct Coefficients {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;  // out_size x ksize
};

Coefficients precompute(int64_t in_size, int64_t out_size) {
  Coefficients c;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weights.assign(static_cast<size_t>(out_size * c.ksize), 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);  // truncation, as C's (int)
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = triangle((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double w = k[static_cast<size_t>(x)];
      if (ww != 0.0) w /= ww;
      const double f = w * (1 << kPrecisionBits);
      c.weights[static_cast<size_t>(xx * c.ksize + x)] = static_cast<int32_t>(w < 0 ? -0.5 + f : 0.5 + f);
    }
    c.first[static_cast<size_t>(xx)] = xmin;
    c.count[static_cast<size_t>(xx)] = xmax;
  }
  return c;
}

inline uint8_t clip8(int64_t v) {
  if (v >= (int64_t{1} << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

io::RgbImage resample_horizontal(const io::RgbImage& in, int64_t width) {
  const Coefficients c = precompute(in.width, width);
  io::RgbImage out(width, in.height);
  for (int64_t y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int64_t xx = 0; xx < width; ++xx) {
      const int32_t* k = &c.weights[static_cast<size_t>(xx * c.ksize)];
      const int64_t xmin = c.first[static_cast<size_t>(xx)], n = c.count[static_cast<size_t>(xx)];
      int64_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int64_t x = 0; x < n; ++x) {
        const uint8_t* p = src + (x + xmin) * 3;
        s0 += p[0] * k[x];
        s1 += p[1] * k[x];
        s2 += p[2] * k[x];
      }
      dst[xx * 3 + 0] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

io::RgbImage resample_vertical(const io::RgbImage& in, int64_t height) {
  const Coefficients c = precompute(in.height, height);
  io::RgbImage out(in.width, height);
  const int64_t row_bytes = in.width * 3;
  for (int64_t yy = 0; yy < height; ++yy) {
    const int32_t* k = &c.weights[static_cast<size_t>(yy * c.ksize)];
    const int64_t ymin = c.first[static_cast<size_t>(yy)], n = c.count[static_cast<size_t>(yy)];
    uint8_t* dst = out.row(yy);
    for (int64_t i = 0; i < row_bytes; ++i) {
      int64_t s = 1 << (kPrecisionBits - 1);
      for (int64_t y = 0; y < n; ++y) s += in.row(y + ymin)[i] * k[y];
      dst[i] = clip8(s);
    }
  }
  return out;
}

std::string lower_extension(const std::string& path) {
  const size_t dot = path.rfind('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot + 1);
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return ext;
}

void check_image(const io::RgbImage& im, const char* what) {
  if (im.width <= 0 || im.height <= 0 || im.pixels.size() != static_cast<size_t>(im.width * im.height * 3)) {
    throw std::invalid_argument(std::string(what) + ": invalid RGB image of " + std::to_string(im.width) + "x" +
                                std::to_string(im.height) + " with " + std::to_string(im.pixels.size()) + " bytes");
  }
}

}  // namespace

io::RgbImage resize_bilinear(const io::RgbImage& image, int64_t height, int64_t width) {
  check_image(image, "resize_bilinear");
  if (height <= 0 || width <= 0) {
    throw std::invalid_argument("resize_bilinear: target size " + std::to_string(height) + "x" + std::to_string(width) +
                                " must be positive");
  }
  // PIL: horizontal pass only when the width changes, vertical only when the height does.
  io::RgbImage out = image.width != width ? resample_horizontal(image, width) : image;
  if (image.height != height) out = resample_vertical(out, height);
  return out;
}

io::RgbImage center_crop(const io::RgbImage& image, int64_t height, int64_t width) {
  check_image(image, "center_crop");
  if (height <= 0 || width <= 0) {
    throw std::invalid_argument("center_crop: size " + std::to_string(height) + "x" + std::to_string(width) + " must be positive");
  }
  const io::RgbImage* src = &image;
  io::RgbImage padded;
  if (width > image.width || height > image.height) {
    // torchvision pads with zeros: left/top get the floor half, right/bottom the rest.
    const int64_t left = width > image.width ? (width - image.width) / 2 : 0;
    const int64_t top = height > image.height ? (height - image.height) / 2 : 0;
    const int64_t right = width > image.width ? (width - image.width + 1) / 2 : 0;
    const int64_t bottom = height > image.height ? (height - image.height + 1) / 2 : 0;
    padded = io::RgbImage(image.width + left + right, image.height + top + bottom);
    for (int64_t y = 0; y < image.height; ++y) {
      std::memcpy(padded.row(y + top) + left * 3, image.row(y), static_cast<size_t>(image.width * 3));
    }
    src = &padded;
  }
  const int64_t top = round_half_even(static_cast<double>(src->height - height) / 2.0);
  const int64_t left = round_half_even(static_cast<double>(src->width - width) / 2.0);
  io::RgbImage out(width, height);
  for (int64_t y = 0; y < height; ++y) {
    std::memcpy(out.row(y), src->row(y + top) + left * 3, static_cast<size_t>(width * 3));
  }
  return out;
}

io::RgbImage crop_and_resize(const io::RgbImage& image, int64_t height, int64_t width) {
  check_image(image, "crop_and_resize");
  const double scale = std::max(static_cast<double>(width) / static_cast<double>(image.width),
                                static_cast<double>(height) / static_cast<double>(image.height));
  const int64_t h = round_half_even(static_cast<double>(image.height) * scale);
  const int64_t w = round_half_even(static_cast<double>(image.width) * scale);
  return center_crop(resize_bilinear(image, h, w), height, width);
}

std::pair<int64_t, int64_t> target_size(const ImageSizeRule& rule, int64_t image_height, int64_t image_width) {
  if (rule.height > 0 && rule.width > 0) return {rule.height, rule.width};
  if (rule.max_pixels <= 0 || rule.height_division_factor <= 0 || rule.width_division_factor <= 0) {
    throw std::invalid_argument("image size rule: max_pixels and the division factors must be positive");
  }
  int64_t h = image_height, w = image_width;
  if (w * h > rule.max_pixels) {
    const double scale = std::pow(static_cast<double>(w * h) / static_cast<double>(rule.max_pixels), 0.5);
    h = static_cast<int64_t>(static_cast<double>(h) / scale);
    w = static_cast<int64_t>(static_cast<double>(w) / scale);
  }
  h = h / rule.height_division_factor * rule.height_division_factor;
  w = w / rule.width_division_factor * rule.width_division_factor;
  return {h, w};
}

io::RgbImage fit_image(const io::RgbImage& image, const ImageSizeRule& rule, const std::string& name) {
  const auto [h, w] = target_size(rule, image.height, image.width);
  if (h <= 0 || w <= 0) {
    throw std::invalid_argument((name.empty() ? std::string("image") : name) + ": an image of " + std::to_string(image.width) +
                                "x" + std::to_string(image.height) + " gives an empty target size " + std::to_string(w) +
                                "x" + std::to_string(h) + " (smaller than the division factors)");
  }
  return crop_and_resize(image, h, w);
}

int64_t clip_frame_count(int64_t available, const FrameSampling& s) {
  if (s.num_frames <= 0 || s.time_division_factor <= 0) {
    throw std::invalid_argument("frame sampling: num_frames and time_division_factor must be positive");
  }
  int64_t n = s.num_frames;
  if (available < n) {
    n = available;
    while (n > 1 && n % s.time_division_factor != s.time_division_remainder) --n;
  }
  return n;
}

std::vector<int64_t> clip_frame_indices(int64_t total_frames, double fps, double duration_seconds, const FrameSampling& s) {
  std::vector<int64_t> idx;
  if (s.start_frame < 0 || s.frame_interval < 1) {
    throw std::invalid_argument("frame sampling: start_frame must be >= 0 and frame_interval >= 1, got " +
                                std::to_string(s.start_frame) + " and " + std::to_string(s.frame_interval));
  }
  if (!s.fix_frame_rate) {
    const int64_t available = total_frames > s.start_frame ? (total_frames - 1 - s.start_frame) / s.frame_interval + 1 : 0;
    const int64_t n = clip_frame_count(available, s);
    for (int64_t i = 0; i < n; ++i) idx.push_back(s.start_frame + i * s.frame_interval);
    return idx;
  }
  if (s.start_frame != 0 || s.frame_interval != 1) {
    throw std::invalid_argument("frame sampling: start_frame/frame_interval cannot be combined with fix_frame_rate");
  }
  if (!(fps > 0) || !(s.frame_rate > 0)) {
    throw std::invalid_argument("frame sampling: fix_frame_rate needs a positive source fps and frame_rate");
  }
  const double duration = duration_seconds > 0 ? duration_seconds : static_cast<double>(total_frames) / fps;
  const auto available = static_cast<int64_t>(std::floor(duration * s.frame_rate));
  const int64_t n = clip_frame_count(available, s);
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / s.frame_rate;
    idx.push_back(std::min(round_half_even(t * fps), total_frames - 1));
  }
  return idx;
}

MediaKind media_kind(const std::string& path) {
  const std::string ext = lower_extension(path);
  for (const char* e : {"jpg", "jpeg", "png", "webp"}) {
    if (ext == e) return MediaKind::kImage;
  }
  for (const char* e : {"gif", "mp4", "avi", "mov", "wmv", "mkv", "flv", "webm"}) {
    if (ext == e) return MediaKind::kVideo;
  }
  throw std::invalid_argument(path + ": unsupported media file extension '" + ext +
                              "' (images: jpg jpeg png webp; videos: gif mp4 avi mov wmv mkv flv webm)");
}

io::RgbImage load_image(const std::string& path, const ImageSizeRule& rule) {
  return fit_image(io::decode_image_file(path).image, rule, path);
}

Clip load_clip(const std::string& path, const ImageSizeRule& rule, const FrameSampling& sampling) {
  Clip clip;
  if (media_kind(path) == MediaKind::kImage) {
    io::DecodedImage d = io::decode_image_file(path);
    clip.source_width = d.image.width;
    clip.source_height = d.image.height;
    clip.frames.push_back(fit_image(d.image, rule, path));
    clip.source_frames.push_back(0);
    clip.warnings = std::move(d.warnings);
    return clip;
  }
  io::VideoReader reader(path);
  clip.source_fps = reader.info().fps;
  clip.source_width = reader.info().width;
  clip.source_height = reader.info().height;
  std::vector<io::RgbImage> raw;
  if (!sampling.fix_frame_rate && sampling.start_frame == 0 && sampling.frame_interval == 1) {
    // Decode only what the clip needs: the first num_frames frames, fewer if the video ends
    // first (then the 1 + 4k rule shortens the clip).
    raw = reader.read_first_frames(clip_frame_count(sampling.num_frames, sampling));
    if (reader.frame_count_known()) clip.source_frame_count = reader.frame_count();
    const int64_t n = clip_frame_count(static_cast<int64_t>(raw.size()), sampling);
    raw.resize(static_cast<size_t>(std::min<int64_t>(n, static_cast<int64_t>(raw.size()))));
    for (int64_t i = 0; i < static_cast<int64_t>(raw.size()); ++i) clip.source_frames.push_back(i);
  } else {
    clip.source_frame_count = reader.frame_count();
    clip.source_frames = clip_frame_indices(clip.source_frame_count, clip.source_fps, reader.info().duration_seconds, sampling);
    if (!clip.source_frames.empty()) raw = reader.read_frames(clip.source_frames);
  }
  if (raw.empty()) throw std::runtime_error(path + ": the video has no decodable frames for the clip");
  for (const auto& f : raw) clip.frames.push_back(fit_image(f, rule, path));
  clip.warnings = reader.warnings();
  return clip;
}

std::vector<float> to_chw(const io::RgbImage& image) { return to_cthw({image}); }

std::vector<float> to_cthw(const std::vector<io::RgbImage>& frames) {
  if (frames.empty()) throw std::invalid_argument("to_cthw: no frames");
  const int64_t H = frames[0].height, W = frames[0].width, T = static_cast<int64_t>(frames.size());
  for (int64_t t = 0; t < T; ++t) {
    check_image(frames[static_cast<size_t>(t)], "to_cthw");
    if (frames[static_cast<size_t>(t)].height != H || frames[static_cast<size_t>(t)].width != W) {
      throw std::invalid_argument("to_cthw: frame " + std::to_string(t) + " is " + std::to_string(frames[static_cast<size_t>(t)].width) +
                                  "x" + std::to_string(frames[static_cast<size_t>(t)].height) + ", frame 0 is " +
                                  std::to_string(W) + "x" + std::to_string(H));
    }
  }
  // preprocess_image: (v * float(2/255)) + (-1), two fp32 roundings.
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    const auto scale = static_cast<float>(2.0 / 255.0);
    for (int v = 0; v < 256; ++v) {
      volatile float product = static_cast<float>(v) * scale;  // no fused multiply-add
      t[static_cast<size_t>(v)] = product + -1.0f;
    }
    return t;
  }();
  std::vector<float> out(static_cast<size_t>(3 * T * H * W));
  const size_t plane = static_cast<size_t>(H * W), per_channel = static_cast<size_t>(T) * plane;
  for (int64_t t = 0; t < T; ++t) {
    const uint8_t* p = frames[static_cast<size_t>(t)].pixels.data();
    for (size_t i = 0; i < plane; ++i) {
      for (size_t c = 0; c < 3; ++c) out[c * per_channel + static_cast<size_t>(t) * plane + i] = table[p[i * 3 + c]];
    }
  }
  return out;
}

}  // namespace zeroshard::data
