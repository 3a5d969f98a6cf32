// Image decoding: every PNG colour type/depth, JPEG (RGB, grey, CMYK, progressive, EXIF), WebP
// (lossless, lossy, alpha, animated), broken files; and bit-parity with PIL's
// Image.open(f).convert("RGB") when /usr/bin/python3 has PIL.
#include "io/image_codec.h"

#include "io/media_test_util.h"

#include <gtest/gtest.h>

namespace zeroshard::io {
namespace {

using testing::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImageCodec, SniffsByContentNotExtension) {
  TempDir dir;
  const RgbImage im = testing::pattern(9, 7);
  testing::write_png_rgb(dir.file("really_png.jpg"), im);
  const DecodedImage d = decode_image_file(dir.file("really_png.jpg"));
  EXPECT_EQ(d.format, ImageFormat::kPng);
  EXPECT_EQ(testing::max_abs_diff(d.image, im), 0);
}

TEST(ImageCodec, PngRgbAndRgbaExact) {
  TempDir dir;
  const RgbImage im = testing::pattern(33, 17);
  testing::write_png_rgb(dir.file("rgb.png"), im);
  DecodedImage d = decode_image_file(dir.file("rgb.png"));
  EXPECT_EQ(d.image.width, 33);
  EXPECT_EQ(d.image.height, 17);
  EXPECT_FALSE(d.had_alpha);
  EXPECT_EQ(testing::max_abs_diff(d.image, im), 0);

  testing::PngSpec s;
  s.width = 33;
  s.height = 17;
  s.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  for (size_t i = 0; i < 33 * 17; ++i) {
    for (int c = 0; c < 3; ++c) s.samples.push_back(im.pixels[i * 3 + c]);
    s.samples.push_back(static_cast<uint16_t>(i % 3 == 0 ? 0 : 200));  // transparent pixels keep their colour
  }
  testing::write_png_spec(dir.file("rgba.png"), s);
  d = decode_image_file(dir.file("rgba.png"));
  EXPECT_TRUE(d.had_alpha);
  EXPECT_EQ(testing::max_abs_diff(d.image, im), 0);
}

TEST(ImageCodec, PngGreyPaletteSixteenBitInterlaced) {
  TempDir dir;
  const int W = 13, H = 6;
  // 8-bit grey and grey + alpha: replicated to R, G, B.
  for (int color : {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA}) {
    testing::PngSpec s;
    s.width = W;
    s.height = H;
    s.color_type = color;
    for (int i = 0; i < W * H; ++i) {
      s.samples.push_back(static_cast<uint16_t>(i * 3 % 256));
      if (color == PNG_COLOR_TYPE_GRAY_ALPHA) s.samples.push_back(77);
    }
    testing::write_png_spec(dir.file("g.png"), s);
    const DecodedImage d = decode_image_file(dir.file("g.png"));
    EXPECT_EQ(d.had_alpha, color == PNG_COLOR_TYPE_GRAY_ALPHA);
    for (int i = 0; i < W * H; ++i) {
      for (int c = 0; c < 3; ++c) ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3 + c)], i * 3 % 256) << "pixel " << i;
    }
  }
  // 2-bit grey: levels 0..3 scale to 0, 85, 170, 255 (as PNG's bit replication and PIL's L;2).
  {
    testing::PngSpec s;
    s.width = W;
    s.height = H;
    s.color_type = PNG_COLOR_TYPE_GRAY;
    s.bit_depth = 2;
    for (int i = 0; i < W * H; ++i) s.samples.push_back(static_cast<uint16_t>(i % 4));
    testing::write_png_spec(dir.file("g2.png"), s);
    const DecodedImage d = decode_image_file(dir.file("g2.png"));
    for (int i = 0; i < W * H; ++i) ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3)], (i % 4) * 85);
  }
  // Palette with transparency: colours through the palette, alpha ignored.
  {
    testing::PngSpec s;
    s.width = W;
    s.height = H;
    s.color_type = PNG_COLOR_TYPE_PALETTE;
    s.bit_depth = 4;
    for (int k = 0; k < 16; ++k) {
      s.palette.push_back(png_color{static_cast<png_byte>(k * 16), static_cast<png_byte>(255 - k * 9), static_cast<png_byte>(k * 5)});
    }
    s.trns = {0, 128, 255};
    for (int i = 0; i < W * H; ++i) s.samples.push_back(static_cast<uint16_t>(i % 16));
    testing::write_png_spec(dir.file("p.png"), s);
    const DecodedImage d = decode_image_file(dir.file("p.png"));
    EXPECT_TRUE(d.had_alpha);
    for (int i = 0; i < W * H; ++i) {
      const int k = i % 16;
      ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3 + 0)], k * 16);
      ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3 + 1)], 255 - k * 9);
      ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3 + 2)], k * 5);
    }
  }
  // 16-bit RGB and grey, Adam7-interlaced: the high byte of each sample.
  for (int color : {PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_GRAY}) {
    testing::PngSpec s;
    s.width = W;
    s.height = H;
    s.color_type = color;
    s.bit_depth = 16;
    s.interlaced = true;
    const int ch = testing::png_channels(color);
    for (int i = 0; i < W * H * ch; ++i) s.samples.push_back(static_cast<uint16_t>(i * 977 + 255));
    testing::write_png_spec(dir.file("s16.png"), s);
    const DecodedImage d = decode_image_file(dir.file("s16.png"));
    for (int i = 0; i < W * H; ++i) {
      for (int c = 0; c < 3; ++c) {
        const int sample = ch == 3 ? i * 3 + c : i;
        ASSERT_EQ(d.image.pixels[static_cast<size_t>(i * 3 + c)], static_cast<uint16_t>(sample * 977 + 255) >> 8)
            << "colour type " << color << " pixel " << i;
      }
    }
  }
}

TEST(ImageCodec, PngBrokenFilesNameFileAndReason) {
  TempDir dir;
  testing::write_png_rgb(dir.file("ok.png"), testing::pattern(40, 30));
  const std::string png = testing::read_bytes(dir.file("ok.png"));

  testing::write_bytes(dir.file("cut.png"), png.substr(0, png.size() / 2));
  std::string e = error_of([&] { decode_image_file(dir.file("cut.png")); });
  EXPECT_NE(e.find(dir.file("cut.png")), std::string::npos) << e;
  EXPECT_NE(e.find("PNG decode failed"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;

  // A flipped byte inside the compressed data: zlib's error, named with the chunk.
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  std::string bad = png;
  bad[idat + 10] = static_cast<char>(bad[idat + 10] ^ 0x55);
  testing::write_bytes(dir.file("data.png"), bad);
  e = error_of([&] { decode_image_file(dir.file("data.png")); });
  EXPECT_NE(e.find(dir.file("data.png") + ": PNG decode failed: IDAT: "), std::string::npos) << e;

  // A wrong CRC on the IDAT chunk (a critical chunk): an error, as PIL's CRC check.
  const uint32_t len = (uint32_t(uint8_t(png[idat - 4])) << 24) | (uint32_t(uint8_t(png[idat - 3])) << 16) |
                       (uint32_t(uint8_t(png[idat - 2])) << 8) | uint32_t(uint8_t(png[idat - 1]));
  bad = png;
  bad[idat + 4 + len] = static_cast<char>(bad[idat + 4 + len] ^ 0x01);
  testing::write_bytes(dir.file("crc.png"), bad);
  e = error_of([&] { decode_image_file(dir.file("crc.png")); });
  EXPECT_NE(e.find(dir.file("crc.png")), std::string::npos) << e;
  EXPECT_NE(e.find("CRC"), std::string::npos) << e;

  // Without IEND the picture is complete: decoded, as PIL does, with a warning.
  testing::write_bytes(dir.file("noend.png"), png.substr(0, png.size() - 12));
  const DecodedImage d = decode_image_file(dir.file("noend.png"));
  EXPECT_EQ(testing::max_abs_diff(d.image, testing::pattern(40, 30)), 0);
  ASSERT_FALSE(d.warnings.empty());
  EXPECT_NE(d.warnings.back().find("after the image data"), std::string::npos) << d.warnings.back();
}

TEST(ImageCodec, JpegRgbGreyCmykProgressive) {
  TempDir dir;
  const RgbImage im = testing::pattern(48, 32);
  testing::JpegSpec spec;
  spec.subsample = false;
  testing::write_jpeg(dir.file("a.jpg"), im, spec);
  DecodedImage d = decode_image_file(dir.file("a.jpg"));
  EXPECT_EQ(d.format, ImageFormat::kJpeg);
  ASSERT_EQ(d.image.width, 48);
  ASSERT_EQ(d.image.height, 32);
  EXPECT_LT(testing::mean_abs_diff(d.image, im), 4.0);  // lossy, quality 95 4:4:4

  spec.progressive = true;
  testing::write_jpeg(dir.file("p.jpg"), im, spec);
  EXPECT_LT(testing::mean_abs_diff(decode_image_file(dir.file("p.jpg")).image, im), 4.0);

  testing::JpegSpec grey;
  grey.grayscale = true;
  testing::write_jpeg(dir.file("g.jpg"), im, grey);
  d = decode_image_file(dir.file("g.jpg"));
  double err = 0;
  for (size_t i = 0; i < 48 * 32; ++i) {
    ASSERT_EQ(d.image.pixels[i * 3], d.image.pixels[i * 3 + 1]);
    ASSERT_EQ(d.image.pixels[i * 3], d.image.pixels[i * 3 + 2]);
    err += std::abs(int(d.image.pixels[i * 3]) - int(im.pixels[i * 3]));
  }
  EXPECT_LT(err / (48 * 32), 4.0);

  // CMYK: libjpeg writes an Adobe marker, so the stored values are read back inverted (as
  // Photoshop and PIL read them): ink = 255 - stored, R = (255 - ink_C)(255 - ink_K) / 255 =
  // stored_C * stored_K / 255.
  testing::JpegSpec cmyk;
  cmyk.cmyk = true;
  cmyk.quality = 100;
  cmyk.subsample = false;
  testing::write_jpeg(dir.file("c.jpg"), im, cmyk);
  d = decode_image_file(dir.file("c.jpg"));
  err = 0;
  for (size_t i = 0; i < 48 * 32; ++i) {
    const int k = (im.pixels[i * 3] + im.pixels[i * 3 + 1]) / 2;
    for (int c = 0; c < 3; ++c) err += std::abs(int(d.image.pixels[i * 3 + c]) - im.pixels[i * 3 + c] * k / 255);
  }
  EXPECT_LT(err / (48 * 32 * 3), 3.0);
}

TEST(ImageCodec, JpegTruncatedOrGarbageIsAnError) {
  TempDir dir;
  testing::write_jpeg(dir.file("ok.jpg"), testing::pattern(64, 48));
  const std::string jpg = testing::read_bytes(dir.file("ok.jpg"));
  testing::write_bytes(dir.file("cut.jpg"), jpg.substr(0, jpg.size() * 2 / 3));
  std::string e = error_of([&] { decode_image_file(dir.file("cut.jpg")); });
  EXPECT_NE(e.find(dir.file("cut.jpg")), std::string::npos) << e;
  EXPECT_NE(e.find("JPEG decode failed: file is truncated"), std::string::npos) << e;

  testing::write_bytes(dir.file("head.jpg"), jpg.substr(0, 40));  // inside the headers
  e = error_of([&] { decode_image_file(dir.file("head.jpg")); });
  EXPECT_NE(e.find("JPEG decode failed"), std::string::npos) << e;

  testing::write_bytes(dir.file("text.jpg"), "hello, not an image");
  e = error_of([&] { decode_image_file(dir.file("text.jpg")); });
  EXPECT_NE(e.find("not a JPEG, PNG or WebP file (first bytes 68 65 6c 6c 6f 2c 20 6e)"), std::string::npos) << e;
  testing::write_bytes(dir.file("empty.png"), "");
  e = error_of([&] { decode_image_file(dir.file("empty.png")); });
  EXPECT_NE(e.find("empty file"), std::string::npos) << e;
  e = error_of([&] { decode_image_file(dir.file("missing.png")); });
  EXPECT_NE(e.find("missing.png: cannot open image file: No such file or directory"), std::string::npos) << e;
}

TEST(ImageCodec, DecompressionBombLimit) {
  TempDir dir;
  testing::write_png_rgb(dir.file("big.png"), testing::pattern(100, 100));
  ImageDecodeOptions o;
  o.max_pixels = 9999;
  const std::string e = error_of([&] { decode_image_file(dir.file("big.png"), o); });
  EXPECT_NE(e.find("exceeds the limit of 9999 pixels"), std::string::npos) << e;
}

// Orientation semantics, written out from the EXIF definitions on a 3 x 2 picture whose
// pixels are numbered 0..5 row by row:  0 1 2 / 3 4 5.
TEST(ImageCodec, ExifOrientationTransforms) {
  RgbImage im(3, 2);
  for (int i = 0; i < 6; ++i) im.pixels[static_cast<size_t>(i * 3)] = static_cast<uint8_t>(i);
  const std::vector<std::pair<int, std::vector<int>>> expected = {
      {1, {0, 1, 2, 3, 4, 5}},  // as stored
      {2, {2, 1, 0, 5, 4, 3}},  // mirrored left-right
      {3, {5, 4, 3, 2, 1, 0}},  // rotated 180
      {4, {3, 4, 5, 0, 1, 2}},  // mirrored top-bottom
      {5, {0, 3, 1, 4, 2, 5}},  // transposed (2 wide, 3 high)
      {6, {3, 0, 4, 1, 5, 2}},  // stored rotated 90 CCW; displayed after turning 90 CW
      {7, {5, 2, 4, 1, 3, 0}},  // transverse
      {8, {2, 5, 1, 4, 0, 3}},  // turned 90 CCW
  };
  for (const auto& [o, want] : expected) {
    const RgbImage out = apply_exif_orientation(im, o);
    EXPECT_EQ(out.width, o >= 5 ? 2 : 3) << "orientation " << o;
    std::vector<int> got;
    for (size_t i = 0; i < 6; ++i) got.push_back(out.pixels[i * 3]);
    EXPECT_EQ(got, want) << "orientation " << o;
  }
}

TEST(ImageCodec, ExifOrientationReadFromJpegPngWebpNotAppliedByDefault) {
  TempDir dir;
  const RgbImage im = testing::pattern(20, 10);
  testing::JpegSpec spec;
  spec.app1 = std::string("Exif\0\0", 6) + testing::exif_tiff_orientation(6, /*big_endian=*/true);
  testing::write_jpeg(dir.file("o.jpg"), im, spec);
  DecodedImage d = decode_image_file(dir.file("o.jpg"));
  EXPECT_EQ(d.exif_orientation, 6);
  EXPECT_FALSE(d.orientation_applied);
  EXPECT_EQ(d.image.width, 20);
  ImageDecodeOptions apply;
  apply.apply_exif_orientation = true;
  const DecodedImage r = decode_image_file(dir.file("o.jpg"), apply);
  EXPECT_TRUE(r.orientation_applied);
  EXPECT_EQ(r.image.width, 10);
  EXPECT_EQ(r.image.height, 20);
  EXPECT_EQ(testing::max_abs_diff(r.image, apply_exif_orientation(d.image, 6)), 0);

  testing::PngSpec s;
  s.width = 20;
  s.height = 10;
  s.samples.assign(im.pixels.begin(), im.pixels.end());
  s.exif = testing::exif_tiff_orientation(3);
  testing::write_png_spec(dir.file("o.png"), s);
  EXPECT_EQ(decode_image_file(dir.file("o.png")).exif_orientation, 3);
  EXPECT_EQ(testing::max_abs_diff(decode_image_file(dir.file("o.png"), apply).image, apply_exif_orientation(im, 3)), 0);

  EXPECT_EQ(exif_orientation(reinterpret_cast<const uint8_t*>("II*\0"), 4), 1);  // truncated block
  const std::string eight = testing::exif_tiff_orientation(8);
  EXPECT_EQ(exif_orientation(reinterpret_cast<const uint8_t*>(eight.data()), eight.size()), 8);
}

TEST(ImageCodec, WebpLosslessLossyAlphaAndBroken) {
  TempDir dir;
  const RgbImage im = testing::pattern(31, 19);
  testing::write_webp(dir.file("l.webp"), im, /*lossless=*/true);
  DecodedImage d = decode_image_file(dir.file("l.webp"));
  EXPECT_EQ(d.format, ImageFormat::kWebp);
  EXPECT_FALSE(d.had_alpha);
  EXPECT_EQ(testing::max_abs_diff(d.image, im), 0);

  testing::write_webp(dir.file("a.webp"), im, /*lossless=*/true, /*alpha=*/100);
  d = decode_image_file(dir.file("a.webp"));
  EXPECT_TRUE(d.had_alpha);
  EXPECT_EQ(testing::max_abs_diff(d.image, im), 0);  // alpha dropped, colour kept

  testing::write_webp(dir.file("q.webp"), im, /*lossless=*/false);
  d = decode_image_file(dir.file("q.webp"));
  EXPECT_EQ(d.image.width, 31);
  EXPECT_LT(testing::mean_abs_diff(d.image, im), 12.0);

  const std::string w = testing::read_bytes(dir.file("l.webp"));
  testing::write_bytes(dir.file("cut.webp"), w.substr(0, w.size() / 2));
  const std::string e = error_of([&] { decode_image_file(dir.file("cut.webp")); });
  EXPECT_NE(e.find(dir.file("cut.webp") + ": WebP decode failed"), std::string::npos) << e;
}

TEST(ImageCodec, AnimatedWebpGivesFirstFrame) {
  if (!testing::have_ffmpeg_cli()) GTEST_SKIP() << "the ffmpeg command is not installed: animated WebP not generated";
  TempDir dir;
  const std::string out = dir.file("anim.webp");
  ASSERT_EQ(testing::run("ffmpeg -v error -f lavfi -i testsrc=size=32x24:rate=5 -frames:v 3 -lossless 1 -loop 0 -y " + out), 0);
  const std::string png = dir.file("first.png");
  ASSERT_EQ(testing::run("ffmpeg -v error -f lavfi -i testsrc=size=32x24:rate=5 -frames:v 1 -y " + png), 0);
  const DecodedImage d = decode_image_file(out);
  EXPECT_EQ(d.image.width, 32);
  EXPECT_EQ(d.image.height, 24);
  ASSERT_FALSE(d.warnings.empty());
  EXPECT_NE(d.warnings[0].find("first frame"), std::string::npos);
  // Lossless WebP of yuv420p-free RGB data equals the first frame rendered to PNG.
  EXPECT_LE(testing::max_abs_diff(d.image, decode_image_file(png).image), 0);
}

// PIL parity: every file decoded by PIL (Image.open(f).convert("RGB"), and exif_transpose) and
// by us; the maximum absolute difference is printed per file and must be 0, except for the
// 16-bit grey PNG where PIL clips (documented in image_codec.h).
TEST(ImageCodec, BitIdenticalToPil) {
  if (!testing::have_python_module("PIL")) GTEST_SKIP() << "/usr/bin/python3 has no PIL (python3-pil): parity not checked";
  TempDir dir;
  const RgbImage im = testing::pattern(37, 23, 3);
  std::vector<std::string> files;
  auto add = [&](const std::string& name) { files.push_back(dir.file(name)); };
  testing::write_png_rgb(dir.file("rgb.png"), im), add("rgb.png");
  testing::write_jpeg(dir.file("j420.jpg"), im), add("j420.jpg");
  testing::JpegSpec s444;
  s444.subsample = false;
  s444.progressive = true;
  testing::write_jpeg(dir.file("j444p.jpg"), im, s444), add("j444p.jpg");
  testing::JpegSpec grey;
  grey.grayscale = true;
  testing::write_jpeg(dir.file("jg.jpg"), im, grey), add("jg.jpg");
  testing::JpegSpec cmyk;
  cmyk.cmyk = true;
  testing::write_jpeg(dir.file("jc.jpg"), im, cmyk), add("jc.jpg");
  testing::write_webp(dir.file("wl.webp"), im, true), add("wl.webp");
  testing::write_webp(dir.file("wq.webp"), im, false), add("wq.webp");
  testing::write_webp(dir.file("wa.webp"), im, false, 60), add("wa.webp");
  testing::PngSpec pal;
  pal.width = 37;
  pal.height = 23;
  pal.color_type = PNG_COLOR_TYPE_PALETTE;
  for (int k = 0; k < 256; ++k) pal.palette.push_back(png_color{png_byte(k), png_byte(255 - k), png_byte(k * 3)});
  pal.trns = {0, 10, 20};
  for (int i = 0; i < 37 * 23; ++i) pal.samples.push_back(static_cast<uint16_t>(i * 7 % 256));
  testing::write_png_spec(dir.file("pal.png"), pal), add("pal.png");
  testing::PngSpec rgb16;
  rgb16.width = 37;
  rgb16.height = 23;
  rgb16.bit_depth = 16;
  for (int i = 0; i < 37 * 23 * 3; ++i) rgb16.samples.push_back(static_cast<uint16_t>(i * 911));
  testing::write_png_spec(dir.file("rgb16.png"), rgb16), add("rgb16.png");
  testing::PngSpec ga;
  ga.width = 37;
  ga.height = 23;
  ga.color_type = PNG_COLOR_TYPE_GRAY_ALPHA;
  for (int i = 0; i < 37 * 23; ++i) ga.samples.insert(ga.samples.end(), {uint16_t(i % 256), uint16_t(i * 3 % 256)});
  testing::write_png_spec(dir.file("ga.png"), ga), add("ga.png");
  for (int o = 2; o <= 8; ++o) {  // every EXIF orientation against ImageOps.exif_transpose
    testing::JpegSpec rot;
    rot.app1 = std::string("Exif\0\0", 6) + testing::exif_tiff_orientation(o, o % 2 == 0);
    const std::string name = "rot" + std::to_string(o) + ".jpg";
    testing::write_jpeg(dir.file(name), im, rot), add(name);
  }
  testing::PngSpec g16 = rgb16;
  g16.color_type = PNG_COLOR_TYPE_GRAY;
  g16.samples.resize(37 * 23);
  testing::write_png_spec(dir.file("g16.png"), g16);

  const std::string script = dir.file("pil_decode.py");
  testing::write_bytes(script,
                       "import sys\n"
                       "from PIL import Image, ImageOps\n"
                       "for f in sys.argv[1:]:\n"
                       "    im = Image.open(f)\n"
                       "    for suffix, out in (('.pil', im.convert('RGB')), ('.pilt', ImageOps.exif_transpose(im).convert('RGB'))):\n"
                       "        open(f + suffix, 'wb').write(b'%d %d\\n' % out.size + out.tobytes())\n");
  std::string cmd = "/usr/bin/python3 " + script;
  for (const auto& f : files) cmd += " " + f;
  cmd += " " + dir.file("g16.png");
  ASSERT_EQ(testing::run(cmd), 0) << cmd;
  auto load_pil = [](const std::string& path) {
    const std::string b = testing::read_bytes(path);
    const size_t nl = b.find('\n');
    RgbImage out;
    std::sscanf(b.substr(0, nl).c_str(), "%ld %ld", &out.width, &out.height);
    out.pixels.assign(b.begin() + static_cast<std::ptrdiff_t>(nl + 1), b.end());
    return out;
  };
  ImageDecodeOptions apply;
  apply.apply_exif_orientation = true;
  for (const auto& f : files) {
    const int plain = testing::max_abs_diff(decode_image_file(f).image, load_pil(f + ".pil"));
    const int transposed = testing::max_abs_diff(decode_image_file(f, apply).image, load_pil(f + ".pilt"));
    std::printf("PIL parity %-12s max|diff| %d, with exif_transpose %d\n", std::filesystem::path(f).filename().c_str(), plain,
                transposed);
    EXPECT_EQ(plain, 0) << f;
    EXPECT_EQ(transposed, 0) << f;
  }
  // 16-bit grey: PIL's I -> RGB clips to 255, we keep the high byte (a documented difference).
  const RgbImage pil16 = load_pil(dir.file("g16.png") + ".pil");
  const RgbImage ours16 = decode_image_file(dir.file("g16.png")).image;
  for (size_t i = 0; i < 37 * 23; ++i) {
    ASSERT_EQ(pil16.pixels[i * 3], std::min<int>(g16.samples[i], 255));
    ASSERT_EQ(ours16.pixels[i * 3], g16.samples[i] >> 8);
  }
}

}  // namespace
}  // namespace zeroshard::io
