// Still-image decoding to 8-bit RGB for the image/video datasets: JPEG (libjpeg-turbo), PNG
// (libpng) and WebP (libwebp), chosen by the file's first bytes, never by its extension.
//
// Conventions (chosen to equal what DiffSynth-Studio's `Image.open(path).convert("RGB")` gives):
// - Alpha is dropped, not composited: a transparent pixel keeps the colour stored under it, as
//   PIL's RGBA -> RGB conversion does. Palette images are expanded through their palette (a tRNS
//   chunk is ignored), grey levels are replicated to R, G and B.
// - 16-bit PNG samples keep their high byte (v >> 8), as PIL's "RGB;16B" unpacker does. PIL turns
//   a 16-bit *grey* PNG into mode I;16 and its I;16 -> RGB conversion clips at 255 (any value
//   >= 256 becomes white); we take the high byte there too, which keeps the picture. That is the
//   one deliberate difference from PIL.
// - EXIF orientation is read and returned, but NOT applied unless asked for
//   (apply_exif_orientation), because DiffSynth never calls ImageOps.exif_transpose: a portrait
//   phone photo stored landscape + orientation 6 trains landscape there. Applying it maps the
//   eight orientations exactly as PIL's exif_transpose does.
// - CMYK/YCCK JPEGs are converted as PIL does (Adobe files store inverted CMYK;
//   R = (255 - C)(255 - K) / 255 with PIL's rounding).
// - A truncated JPEG is an error (PIL raises "image file is truncated"); libjpeg's other
//   recoverable warnings (e.g. extraneous bytes before a marker) are returned in `warnings`, as
//   are libpng's warnings (e.g. a bad CRC in an ancillary chunk, which libpng discards).
// - Animated WebP and APNG: the first frame (as PIL opens them).
// Errors throw std::runtime_error "<file>: <format> decode failed: <reason>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::io {

// Row-major height x width x 3 bytes (R, G, B), no padding between rows.
struct RgbImage {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;

  RgbImage() = default;
  RgbImage(int64_t w, int64_t h) : width(w), height(h), pixels(static_cast<size_t>(w * h * 3)) {}
  uint8_t* row(int64_t y) { return pixels.data() + static_cast<size_t>(y * width * 3); }
  const uint8_t* row(int64_t y) const { return pixels.data() + static_cast<size_t>(y * width * 3); }
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };
const char* image_format_name(ImageFormat f);

// By content: JPEG (FF D8 FF), PNG (89 'PNG' 0D 0A 1A 0A), WebP ('RIFF' size 'WEBP').
ImageFormat sniff_image_format(const uint8_t* data, size_t size);

struct ImageDecodeOptions {
  bool apply_exif_orientation = false;
  // PIL refuses images above 2 x Image.MAX_IMAGE_PIXELS (a "decompression bomb"); so do we.
  int64_t max_pixels = 2LL * 89478485;
};

struct DecodedImage {
  RgbImage image;
  ImageFormat format = ImageFormat::kUnknown;
  bool had_alpha = false;        // the file stored an alpha channel or transparency (dropped)
  int exif_orientation = 1;      // 1..8 (1 when absent or unreadable)
  bool orientation_applied = false;
  std::vector<std::string> warnings;  // recoverable decoder warnings, in order
};

// Reads the whole file and decodes it. `name` in errors is the path.
DecodedImage decode_image_file(const std::string& path, const ImageDecodeOptions& options = {});
// Decodes bytes already in memory; `name` is used in error messages (a path, a member name).
DecodedImage decode_image(const uint8_t* data, size_t size, const std::string& name,
                          const ImageDecodeOptions& options = {});

// The EXIF orientation (1..8) in an EXIF block (with or without the "Exif\0\0" prefix of a JPEG
// APP1 segment); 1 when the tag is absent or the block is malformed.
int exif_orientation(const uint8_t* data, size_t size);
// Returns the image as PIL's ImageOps.exif_transpose would for this orientation (1..8).
RgbImage apply_exif_orientation(const RgbImage& image, int orientation);

}  // namespace zeroshard::io
