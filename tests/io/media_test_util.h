// Helpers for the media and data-file tests: a temporary folder, files, shell commands, and
// encoders (libpng, libjpeg, libwebp) that make the test images, so the tests need no fixture
// files. Header-only; every function is inline.
#pragma once

#include "io/image_codec.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// After <cstdio>: jpeglib.h uses FILE without including it.
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>

namespace zeroshard::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "zs_media_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command; returns its exit status, and its stdout in *out when given.
inline int run(const std::string& command, std::string* out = nullptr) {
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return -1;
  std::string text;
  std::array<char, 65536> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  const int status = ::pclose(p);
  if (out != nullptr) *out = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline bool have_ffmpeg_cli() { return run("ffmpeg -version >/dev/null 2>&1") == 0; }
inline bool have_python_module(const std::string& module) {
  return run("/usr/bin/python3 -c 'import " + module + "' >/dev/null 2>&1") == 0;
}

// A deterministic test picture with detail in both directions and all three channels.
inline io::RgbImage pattern(int64_t w, int64_t h, int seed = 0) {
  io::RgbImage im(w, h);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = im.row(y) + x * 3;
      p[0] = static_cast<uint8_t>((x * 7 + y * 3 + seed * 31) & 255);
      p[1] = static_cast<uint8_t>((y * 11 + (x * y) % 23 + seed * 17) & 255);
      p[2] = static_cast<uint8_t>(((x ^ y) * 5 + seed * 59) & 255);
    }
  }
  return im;
}

inline int max_abs_diff(const io::RgbImage& a, const io::RgbImage& b) {
  if (a.width != b.width || a.height != b.height) return 1 << 30;
  int m = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) m = std::max(m, std::abs(int(a.pixels[i]) - int(b.pixels[i])));
  return m;
}

inline double mean_abs_diff(const io::RgbImage& a, const io::RgbImage& b) {
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(int(a.pixels[i]) - int(b.pixels[i]));
  return a.pixels.empty() ? 0 : s / static_cast<double>(a.pixels.size());
}

// PNG of any colour type / depth. `samples` holds rows of channels(color) samples, 16-bit
// samples as host integers (written big-endian by libpng's png_set_swap).
struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<uint16_t> samples;  // values before packing (for depth < 8: the small values)
  std::vector<png_color> palette;
  std::vector<uint8_t> trns;      // palette alpha
  std::string exif;               // raw TIFF bytes for an eXIf chunk
};

inline int png_channels(int color_type) {
  switch (color_type) {
    case PNG_COLOR_TYPE_GRAY: case PNG_COLOR_TYPE_PALETTE: return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    default: return 4;
  }
}

inline void write_png_spec(const std::string& path, const PngSpec& s) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw std::runtime_error("libpng failed writing " + path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  if (!s.exif.empty()) {
    png_set_eXIf_1(png, info, static_cast<png_uint_32>(s.exif.size()),
                   reinterpret_cast<png_bytep>(const_cast<char*>(s.exif.data())));
  }
  png_write_info(png, info);
  if (s.bit_depth < 8) png_set_packing(png);
  if (s.bit_depth == 16) png_set_swap(png);
  const int ch = png_channels(s.color_type);
  const int bytes = s.bit_depth == 16 ? 2 : 1;
  std::vector<uint8_t> rows(static_cast<size_t>(s.height) * s.width * ch * bytes);
  for (size_t i = 0; i < s.samples.size(); ++i) {
    if (bytes == 2) {
      std::memcpy(&rows[i * 2], &s.samples[i], 2);
    } else {
      rows[i] = static_cast<uint8_t>(s.samples[i]);
    }
  }
  std::vector<png_bytep> ptrs(static_cast<size_t>(s.height));
  for (int y = 0; y < s.height; ++y) ptrs[static_cast<size_t>(y)] = rows.data() + static_cast<size_t>(y) * s.width * ch * bytes;
  png_write_image(png, ptrs.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

inline void write_png_rgb(const std::string& path, const io::RgbImage& im) {
  PngSpec s;
  s.width = static_cast<int>(im.width);
  s.height = static_cast<int>(im.height);
  s.samples.assign(im.pixels.begin(), im.pixels.end());
  write_png_spec(path, s);
}

struct JpegSpec {
  int quality = 95;
  bool grayscale = false;  // the image's R channel as grey
  bool cmyk = false;       // 4 channels: R, G, B of the image and (R+G)/2 as K
  bool progressive = false;
  bool subsample = true;   // 4:2:0 (libjpeg's default) or 4:4:4
  std::string app1;        // an APP1 payload (e.g. "Exif\0\0" + TIFF)
};

inline void write_jpeg(const std::string& path, const io::RgbImage& im, const JpegSpec& spec = {}) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = static_cast<JDIMENSION>(im.width);
  c.image_height = static_cast<JDIMENSION>(im.height);
  c.input_components = spec.grayscale ? 1 : spec.cmyk ? 4 : 3;
  c.in_color_space = spec.grayscale ? JCS_GRAYSCALE : spec.cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, spec.quality, TRUE);
  if (!spec.subsample && !spec.grayscale) {
    for (int k = 0; k < c.num_components; ++k) c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
  }
  if (spec.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  if (!spec.app1.empty()) {
    jpeg_write_marker(&c, JPEG_APP0 + 1, reinterpret_cast<const JOCTET*>(spec.app1.data()),
                      static_cast<unsigned>(spec.app1.size()));
  }
  std::vector<uint8_t> row(static_cast<size_t>(im.width) * 4);
  while (c.next_scanline < c.image_height) {
    const uint8_t* src = im.row(c.next_scanline);
    for (int64_t x = 0; x < im.width; ++x) {
      const uint8_t* p = src + x * 3;
      if (spec.grayscale) {
        row[static_cast<size_t>(x)] = p[0];
      } else if (spec.cmyk) {
        for (int k = 0; k < 3; ++k) row[static_cast<size_t>(x * 4 + k)] = p[k];
        row[static_cast<size_t>(x * 4 + 3)] = static_cast<uint8_t>((p[0] + p[1]) / 2);
      } else {
        for (int k = 0; k < 3; ++k) row[static_cast<size_t>(x * 3 + k)] = p[k];
      }
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

// Lossless WebP (RGB, or RGBA with the given alpha everywhere), or lossy at `quality`.
inline void write_webp(const std::string& path, const io::RgbImage& im, bool lossless, int alpha = -1, float quality = 90) {
  uint8_t* out = nullptr;
  size_t n = 0;
  const int w = static_cast<int>(im.width), h = static_cast<int>(im.height);
  if (alpha >= 0) {
    std::vector<uint8_t> rgba(static_cast<size_t>(w * h * 4));
    for (size_t i = 0; i < static_cast<size_t>(w * h); ++i) {
      std::memcpy(&rgba[i * 4], &im.pixels[i * 3], 3);
      rgba[i * 4 + 3] = static_cast<uint8_t>(alpha);
    }
    n = lossless ? WebPEncodeLosslessRGBA(rgba.data(), w, h, w * 4, &out) : WebPEncodeRGBA(rgba.data(), w, h, w * 4, quality, &out);
  } else {
    n = lossless ? WebPEncodeLosslessRGB(im.pixels.data(), w, h, w * 3, &out) : WebPEncodeRGB(im.pixels.data(), w, h, w * 3, quality, &out);
  }
  if (n == 0) throw std::runtime_error("WebP encoding failed for " + path);
  write_bytes(path, std::string(reinterpret_cast<char*>(out), n));
  WebPFree(out);
}

// A minimal little-endian TIFF block holding only the orientation tag.
inline std::string exif_tiff_orientation(int orientation, bool big_endian = false) {
  std::string t;
  auto u16 = [&](uint32_t v) {
    if (big_endian) { t.push_back(char(v >> 8)); t.push_back(char(v & 255)); }
    else { t.push_back(char(v & 255)); t.push_back(char(v >> 8)); }
  };
  auto u32 = [&](uint32_t v) {
    if (big_endian) { u16(v >> 16); u16(v & 0xFFFF); }
    else { u16(v & 0xFFFF); u16(v >> 16); }
  };
  t += big_endian ? "MM" : "II";
  u16(42);
  u32(8);         // IFD0 right after the header
  u16(1);         // one entry
  u16(0x0112);    // Orientation
  u16(3);         // SHORT
  u32(1);
  u16(static_cast<uint32_t>(orientation));
  u16(0);
  u32(0);         // no next IFD
  return t;
}

}  // namespace zeroshard::testing
