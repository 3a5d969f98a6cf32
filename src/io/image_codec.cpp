#include "io/image_codec.h"

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "util/optional_parts.h"

#ifndef ZS_WITH_IMAGES
#error "ZS_WITH_IMAGES comes from CMakeLists.txt"
#endif
#if ZS_WITH_IMAGES
// After <cstdio>: jpeglib.h uses FILE without including it.
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>
#endif

// libjpeg and libpng report fatal errors through a callback that must not return; they are C
// libraries, so a C++ exception must not unwind through them. Both decoders therefore longjmp
// back to a setjmp in a function whose frame holds only trivially destructible locals (the
// output vectors live in the caller's frame), and the caller throws afterwards.

namespace zeroshard::io {
#if ZS_WITH_IMAGES
namespace {

[[noreturn]] void fail(const std::string& name, ImageFormat f, const std::string& reason) {
  throw std::runtime_error(name + ": " + image_format_name(f) + " decode failed: " + reason);
}

void check_size(const std::string& name, ImageFormat f, int64_t w, int64_t h, const ImageDecodeOptions& o) {
  if (w <= 0 || h <= 0) fail(name, f, "invalid size " + std::to_string(w) + "x" + std::to_string(h));
  if (w * h > o.max_pixels) {
    fail(name, f, "image of " + std::to_string(w) + "x" + std::to_string(h) + " pixels exceeds the limit of " +
                      std::to_string(o.max_pixels) + " pixels (a decompression bomb?)");
  }
}

// ---------------------------------------------------------------------------------------------
// JPEG

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  std::vector<std::string>* warnings;
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace messages
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  char text[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, text);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
    // libjpeg would pad the missing rows with grey; PIL refuses such files and so do we.
    std::snprintf(err->message, sizeof(err->message), "file is truncated (%s)", text);
    std::longjmp(err->jump, 1);
  }
  err->warnings->push_back(text);
}

struct JpegRaw {
  int64_t width = 0, height = 0;
  int components = 0;  // 3 (RGB) or 4 (CMYK)
  bool adobe_inverted = false;
  int orientation = 1;
};

// Returns false with err.message set on failure. Locals are trivially destructible (see top).
bool jpeg_decode_raw(const uint8_t* data, size_t size, JpegError& err, JpegRaw& raw, std::vector<uint8_t>& out,
                     int64_t max_pixels) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  for (jpeg_saved_marker_ptr m = cinfo.marker_list; m != nullptr; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      raw.orientation = exif_orientation(m->data, m->data_length);
      break;
    }
  }
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  raw.adobe_inverted = cmyk && cinfo.saw_Adobe_marker;
  raw.width = cinfo.image_width;
  raw.height = cinfo.image_height;
  if (raw.width <= 0 || raw.height <= 0 || raw.width * raw.height > max_pixels) {
    std::snprintf(err.message, sizeof(err.message), "invalid or too large size %lldx%lld",
                  static_cast<long long>(raw.width), static_cast<long long>(raw.height));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  raw.components = cinfo.output_components;
  out.resize(static_cast<size_t>(raw.width * raw.height * raw.components));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.data() + static_cast<size_t>(cinfo.output_scanline) * raw.width * raw.components;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

// PIL's cmyk2rgb: MULDIV255(a, b) = ((a*b + 128) >> 8 + a*b + 128) >> 8.
inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void decode_jpeg(const uint8_t* data, size_t size, const std::string& name, const ImageDecodeOptions& o,
                 DecodedImage& result) {
  JpegError err{};
  err.warnings = &result.warnings;
  JpegRaw raw;
  std::vector<uint8_t> buf;
  if (!jpeg_decode_raw(data, size, err, raw, buf, o.max_pixels)) fail(name, ImageFormat::kJpeg, err.message);
  check_size(name, ImageFormat::kJpeg, raw.width, raw.height, o);
  result.exif_orientation = raw.orientation;
  if (raw.components == 3) {
    result.image.width = raw.width;
    result.image.height = raw.height;
    result.image.pixels = std::move(buf);
    return;
  }
  if (raw.components != 4) fail(name, ImageFormat::kJpeg, "unexpected " + std::to_string(raw.components) + " output components");
  result.image = RgbImage(raw.width, raw.height);
  const size_t n = static_cast<size_t>(raw.width * raw.height);
  for (size_t i = 0; i < n; ++i) {
    int c[4];
    for (int k = 0; k < 4; ++k) c[k] = raw.adobe_inverted ? 255 - buf[i * 4 + k] : buf[i * 4 + k];
    const int nk = 255 - c[3];
    for (int k = 0; k < 3; ++k) {
      const int v = nk - muldiv255(c[k], nk);
      result.image.pixels[i * 3 + k] = static_cast<uint8_t>(v < 0 ? 0 : v);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// PNG

struct PngState {
  std::jmp_buf jump;
  char message[512];
  const uint8_t* data;
  size_t size;
  size_t pos;
  std::vector<std::string>* warnings;
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof(st->message), "%s", msg);
  std::longjmp(st->jump, 1);
}

void png_on_warning(png_structp png, png_const_charp msg) {
  static_cast<PngState*>(png_get_error_ptr(png))->warnings->push_back(msg);
}

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "file is truncated (unexpected end of data)");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

struct PngRaw {
  int64_t width = 0, height = 0;
  bool had_alpha = false;
  int orientation = 1;
  bool trailer_failed = false;
  char trailer_message[512];
};

bool png_decode_raw(PngState& st, PngRaw& raw, std::vector<uint8_t>& out, std::vector<png_bytep>& rows,
                    int64_t max_pixels) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, png_on_error, png_on_warning);
  if (png == nullptr) {
    std::snprintf(st.message, sizeof(st.message), "png_create_read_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(st.message, sizeof(st.message), "png_create_info_struct failed");
    return false;
  }
  if (setjmp(st.jump)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, &st, png_read_mem);
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  raw.width = w;
  raw.height = h;
  if (raw.width * raw.height > max_pixels) {
    std::snprintf(st.message, sizeof(st.message), "image of %ux%u pixels exceeds the limit of %lld pixels", w, h,
                  static_cast<long long>(max_pixels));
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  raw.had_alpha = (color & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((color & PNG_COLOR_MASK_COLOR) == 0) {
    if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  if (depth == 16) png_set_strip_16(png);  // keeps the high byte, as PIL does
  png_set_strip_alpha(png);                // also cancels the tRNS expansion of palette_to_rgb
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) {
    std::snprintf(st.message, sizeof(st.message), "unexpected layout after conversion (%d channels, %d bits)",
                  png_get_channels(png, info), png_get_bit_depth(png, info));
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  out.resize(static_cast<size_t>(w) * h * 3);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(png, rows.data());
  png_bytep exif = nullptr;
  png_uint_32 exif_len = 0;
  if (png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif != nullptr) raw.orientation = exif_orientation(exif, exif_len);
  // The image is complete. Chunks after it (eXIf may live there) are read when present; a
  // file cut after its last IDAT is accepted as PIL accepts it, with a warning.
  if (setjmp(st.jump)) {
    raw.trailer_failed = true;
    std::snprintf(raw.trailer_message, sizeof(raw.trailer_message), "%s", st.message);
  } else {
    png_read_end(png, info);
    if (raw.orientation == 1 && png_get_eXIf_1(png, info, &exif_len, &exif) != 0 && exif != nullptr) {
      raw.orientation = exif_orientation(exif, exif_len);
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

void decode_png(const uint8_t* data, size_t size, const std::string& name, const ImageDecodeOptions& o,
                DecodedImage& result) {
  PngState st{};
  st.data = data;
  st.size = size;
  st.warnings = &result.warnings;
  PngRaw raw{};
  std::vector<uint8_t> buf;
  std::vector<png_bytep> rows;
  if (!png_decode_raw(st, raw, buf, rows, o.max_pixels)) fail(name, ImageFormat::kPng, st.message);
  check_size(name, ImageFormat::kPng, raw.width, raw.height, o);
  if (raw.trailer_failed) result.warnings.push_back(std::string("chunks after the image data unreadable: ") + raw.trailer_message);
  result.had_alpha = raw.had_alpha;
  result.exif_orientation = raw.orientation;
  result.image.width = raw.width;
  result.image.height = raw.height;
  result.image.pixels = std::move(buf);
}

// ---------------------------------------------------------------------------------------------
// WebP

const char* vp8_status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error (corrupt data)";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "user abort";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "file is truncated (not enough data)";
  }
  return "unknown status";
}

void decode_webp(const uint8_t* data, size_t size, const std::string& name, const ImageDecodeOptions& o,
                 DecodedImage& result) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(data, size, &features);
  if (status != VP8_STATUS_OK) fail(name, ImageFormat::kWebp, vp8_status_text(status));
  check_size(name, ImageFormat::kWebp, features.width, features.height, o);
  result.had_alpha = features.has_alpha != 0;
  WebPData wd{data, size};
  if (WebPDemuxer* demux = WebPDemux(&wd)) {
    if (WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS) & EXIF_FLAG) {
      WebPChunkIterator it;
      if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
        result.exif_orientation = exif_orientation(it.chunk.bytes, it.chunk.size);
        WebPDemuxReleaseChunkIterator(&it);
      }
    }
    WebPDemuxDelete(demux);
  }
  if (features.has_animation) {
    WebPAnimDecoderOptions ao;
    if (!WebPAnimDecoderOptionsInit(&ao)) fail(name, ImageFormat::kWebp, "WebPAnimDecoderOptionsInit failed");
    ao.color_mode = MODE_RGBA;
    ao.use_threads = 0;
    WebPAnimDecoder* dec = WebPAnimDecoderNew(&wd, &ao);
    if (dec == nullptr) fail(name, ImageFormat::kWebp, "cannot parse the animation (corrupt or truncated)");
    WebPAnimInfo info;
    uint8_t* rgba = nullptr;
    int timestamp = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || !WebPAnimDecoderGetNext(dec, &rgba, &timestamp)) {
      WebPAnimDecoderDelete(dec);
      fail(name, ImageFormat::kWebp, "cannot decode the first animation frame (corrupt or truncated)");
    }
    result.image = RgbImage(info.canvas_width, info.canvas_height);
    const size_t n = static_cast<size_t>(info.canvas_width) * info.canvas_height;
    for (size_t i = 0; i < n; ++i) std::memcpy(&result.image.pixels[i * 3], rgba + i * 4, 3);
    WebPAnimDecoderDelete(dec);
    result.warnings.push_back("animated WebP: decoded the first frame only");
    return;
  }
  result.image = RgbImage(features.width, features.height);
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) fail(name, ImageFormat::kWebp, "WebPInitDecoderConfig failed");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = result.image.pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(features.width * 3);
  config.output.u.RGBA.size = result.image.pixels.size();
  const VP8StatusCode ds = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  if (ds != VP8_STATUS_OK) fail(name, ImageFormat::kWebp, vp8_status_text(ds));
}

}  // namespace
#endif  // ZS_WITH_IMAGES

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat sniff_image_format(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::kJpeg;
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name, const ImageDecodeOptions& options) {
  DecodedImage result;
  result.format = sniff_image_format(data, size);
  switch (result.format) {
#if ZS_WITH_IMAGES
    case ImageFormat::kJpeg: decode_jpeg(data, size, name, options, result); break;
    case ImageFormat::kPng: decode_png(data, size, name, options, result); break;
    case ImageFormat::kWebp: decode_webp(data, size, name, options, result); break;
#else
    case ImageFormat::kJpeg:
    case ImageFormat::kPng:
    case ImageFormat::kWebp:
      util::require_part(util::OptionalPart::kImages, name + " (" + image_format_name(result.format) + ")");
      break;
#endif
    case ImageFormat::kUnknown: {
      std::ostringstream head;
      for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) {
        static const char* hex = "0123456789abcdef";
        head << hex[data[i] >> 4] << hex[data[i] & 15] << (i + 1 < std::min<size_t>(size, 8) ? " " : "");
      }
      throw std::runtime_error(name + ": not a JPEG, PNG or WebP file (" +
                               (size == 0 ? std::string("empty file") : "first bytes " + head.str()) + ")");
    }
  }
  if (result.exif_orientation < 1 || result.exif_orientation > 8) result.exif_orientation = 1;
  if (options.apply_exif_orientation && result.exif_orientation != 1) {
    result.image = apply_exif_orientation(result.image, result.exif_orientation);
    result.orientation_applied = true;
  }
  return result;
}

DecodedImage decode_image_file(const std::string& path, const ImageDecodeOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open image file: " + std::strerror(errno));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error(path + ": read error: " + std::strerror(errno));
  return decode_image(bytes.data(), bytes.size(), path, options);
}

int exif_orientation(const uint8_t* d, size_t n) {
  if (n >= 6 && std::memcmp(d, "Exif\0\0", 6) == 0) {
    d += 6;
    n -= 6;
  }
  if (n < 8) return 1;
  const bool le = d[0] == 'I' && d[1] == 'I';
  if (!le && !(d[0] == 'M' && d[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t { return le ? d[at] | d[at + 1] << 8 : d[at] << 8 | d[at + 1]; };
  auto u32 = [&](size_t at) -> uint32_t {
    return le ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + i * 12;
    if (e + 12 > n) return 1;
    if (u16(e) == 0x0112) {
      const uint32_t type = u16(e + 2), cnt = u32(e + 4);
      if (type != 3 || cnt < 1) return 1;  // SHORT
      const uint32_t v = u16(e + 8);
      return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
    }
  }
  return 1;
}

RgbImage apply_exif_orientation(const RgbImage& in, int orientation) {
  const int64_t W = in.width, H = in.height;
  const bool swap = orientation >= 5 && orientation <= 8;
  RgbImage out(swap ? H : W, swap ? W : H);
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sy = y, sx = x;
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                   // FLIP_LEFT_RIGHT
        case 3: sy = H - 1 - y; sx = W - 1 - x; break;   // ROTATE_180
        case 4: sy = H - 1 - y; break;                   // FLIP_TOP_BOTTOM
        case 5: sy = x; sx = y; break;                   // TRANSPOSE
        case 6: sy = H - 1 - x; sx = y; break;           // ROTATE_270 (clockwise)
        case 7: sy = H - 1 - x; sx = W - 1 - y; break;   // TRANSVERSE
        case 8: sy = x; sx = W - 1 - y; break;           // ROTATE_90 (counter-clockwise)
        default: break;
      }
      std::memcpy(out.row(y) + x * 3, in.row(sy) + sx * 3, 3);
    }
  }
  return out;
}

}  // namespace zeroshard::io
