// DiffSynth-Studio's preprocessing: PIL's bilinear resize (bit-exact against PIL when
// /usr/bin/python3 has it), ImageCropAndResize (against torchvision's resize + center_crop when
// installed), the dynamic size rule, LoadVideo's frame sampling, preprocess_image's [-1, 1]
// scaling (against torch), and whole clips from generated files.
#include "data/image_transforms.h"

#include "io/media_test_util.h"
#include "io/video_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

namespace zeroshard::data {
namespace {

using io::RgbImage;
using zeroshard::testing::TempDir;
namespace t = zeroshard::testing;

void save_raw(const std::string& path, const RgbImage& im) {
  t::write_bytes(path, std::to_string(im.width) + " " + std::to_string(im.height) + "\n" +
                           std::string(im.pixels.begin(), im.pixels.end()));
}

RgbImage load_raw(const std::string& path) {
  const std::string b = t::read_bytes(path);
  const size_t nl = b.find('\n');
  RgbImage im;
  std::sscanf(b.substr(0, nl).c_str(), "%ld %ld", &im.width, &im.height);
  im.pixels.assign(b.begin() + static_cast<std::ptrdiff_t>(nl + 1), b.end());
  return im;
}

// Jobs for Python, one per line: "resize IN OUT H W" (PIL), "crop IN OUT H W" (DiffSynth's
// crop_and_resize with torchvision), "size H W MAXPIX OUT" (get_height_width).
const char* kPythonJobs = R"PY(
import sys
from PIL import Image
def load(p):
    b = open(p, 'rb').read(); nl = b.index(b'\n'); w, h = map(int, b[:nl].split())
    return Image.frombytes('RGB', (w, h), b[nl + 1:])
def save(p, im):
    open(p, 'wb').write(b'%d %d\n' % im.size + im.tobytes())
for line in open(sys.argv[1]):
    job = line.split()
    if job[0] == 'resize':
        save(job[2], load(job[1]).resize((int(job[4]), int(job[3])), Image.BILINEAR))
    elif job[0] == 'crop':
        import torchvision
        image, th, tw = load(job[1]), int(job[3]), int(job[4])
        width, height = image.size
        scale = max(tw / width, th / height)
        image = torchvision.transforms.functional.resize(
            image, (round(height * scale), round(width * scale)),
            interpolation=torchvision.transforms.InterpolationMode.BILINEAR)
        save(job[2], torchvision.transforms.functional.center_crop(image, (th, tw)))
    elif job[0] == 'size':
        height, width, max_pixels = int(job[1]), int(job[2]), int(job[3])
        if width * height > max_pixels:
            scale = (width * height / max_pixels) ** 0.5
            height, width = int(height / scale), int(width / scale)
        open(job[4], 'w').write('%d %d' % (height // 16 * 16, width // 16 * 16))
)PY";

TEST(ImageTransforms, ResizeIsPilBilinearBitForBit) {
  if (!t::have_python_module("PIL")) GTEST_SKIP() << "/usr/bin/python3 has no PIL (python3-pil): resize parity not checked";
  TempDir dir;
  // (w, h) -> (W, H): shrink by non-integer and large factors, enlarge, mixed, tiny, same size.
  const std::vector<std::array<int64_t, 4>> cases = {
      {97, 61, 40, 23}, {300, 200, 16, 16}, {64, 64, 128, 96}, {50, 40, 120, 13}, {1, 1, 5, 3},
      {33, 17, 33, 17}, {640, 360, 832, 480}, {1280, 720, 832, 468}, {7, 300, 7, 31}, {255, 3, 256, 2}};
  std::string jobs;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    save_raw(dir.file("in" + std::to_string(k)), t::pattern(c[0], c[1], static_cast<int>(k)));
    jobs += "resize " + dir.file("in" + std::to_string(k)) + " " + dir.file("out" + std::to_string(k)) + " " +
            std::to_string(c[3]) + " " + std::to_string(c[2]) + "\n";
  }
  t::write_bytes(dir.file("jobs"), jobs);
  t::write_bytes(dir.file("jobs.py"), kPythonJobs);
  ASSERT_EQ(t::run("/usr/bin/python3 " + dir.file("jobs.py") + " " + dir.file("jobs")), 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const RgbImage ours = resize_bilinear(load_raw(dir.file("in" + std::to_string(k))), c[3], c[2]);
    const int diff = t::max_abs_diff(ours, load_raw(dir.file("out" + std::to_string(k))));
    std::printf("PIL BILINEAR %4ldx%-4ld -> %4ldx%-4ld max|diff| %d\n", static_cast<long>(c[0]), static_cast<long>(c[1]),
                static_cast<long>(c[2]), static_cast<long>(c[3]), diff);
    EXPECT_EQ(diff, 0) << "case " << k;
  }
}

TEST(ImageTransforms, CropAndResizeIsDiffSynthsWithTorchvision) {
  if (!t::have_python_module("torchvision")) {
    GTEST_SKIP() << "/usr/bin/python3 has no torchvision (python3-torchvision): crop_and_resize parity not checked";
  }
  TempDir dir;
  // (w, h) -> (H, W) targets, including half-pixel crop offsets and enlargement.
  const std::vector<std::array<int64_t, 4>> cases = {
      {97, 61, 32, 48}, {640, 360, 480, 832}, {360, 640, 480, 832}, {101, 99, 64, 64}, {20, 10, 31, 17}, {853, 480, 256, 256}};
  std::string jobs;
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    save_raw(dir.file("in" + std::to_string(k)), t::pattern(c[0], c[1], static_cast<int>(k)));
    jobs += "crop " + dir.file("in" + std::to_string(k)) + " " + dir.file("out" + std::to_string(k)) + " " +
            std::to_string(c[2]) + " " + std::to_string(c[3]) + "\n";
  }
  const std::vector<std::array<int64_t, 3>> sizes = {{1080, 1920, 1920 * 1080}, {3000, 4000, 1920 * 1080}, {481, 833, 300000},
                                                     {17, 5000, 1920 * 1080}};
  for (size_t k = 0; k < sizes.size(); ++k) {
    jobs += "size " + std::to_string(sizes[k][0]) + " " + std::to_string(sizes[k][1]) + " " + std::to_string(sizes[k][2]) + " " +
            dir.file("size" + std::to_string(k)) + "\n";
  }
  t::write_bytes(dir.file("jobs"), jobs);
  t::write_bytes(dir.file("jobs.py"), kPythonJobs);
  ASSERT_EQ(t::run("/usr/bin/python3 " + dir.file("jobs.py") + " " + dir.file("jobs") + " 2>/dev/null"), 0);
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    const RgbImage ours = crop_and_resize(load_raw(dir.file("in" + std::to_string(k))), c[2], c[3]);
    const int diff = t::max_abs_diff(ours, load_raw(dir.file("out" + std::to_string(k))));
    std::printf("DiffSynth crop_and_resize %4ldx%-4ld -> HxW %ldx%ld max|diff| %d\n", static_cast<long>(c[0]),
                static_cast<long>(c[1]), static_cast<long>(c[2]), static_cast<long>(c[3]), diff);
    EXPECT_EQ(diff, 0) << "case " << k;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    ImageSizeRule rule;
    rule.max_pixels = sizes[k][2];
    const auto [h, w] = target_size(rule, sizes[k][0], sizes[k][1]);
    EXPECT_EQ(std::to_string(h) + " " + std::to_string(w), t::read_bytes(dir.file("size" + std::to_string(k)))) << "size case " << k;
  }
}

// The geometry without Python: scale, rounding (Python's, half to even) and crop offsets.
TEST(ImageTransforms, CropGeometry) {
  const RgbImage im = t::pattern(100, 50);
  // scale = max(32/100, 32/50) = 0.64 -> 64 x 32, crop columns 16..47.
  const RgbImage resized = resize_bilinear(im, 32, 64);
  const RgbImage out = crop_and_resize(im, 32, 32);
  for (int64_t y = 0; y < 32; ++y) {
    ASSERT_EQ(0, std::memcmp(out.row(y), resized.row(y) + 16 * 3, 32 * 3)) << "row " << y;
  }
  // Offsets (7 - 4) / 2 = 1.5 and (9 - 4) / 2 = 2.5 both round to 2.
  for (int64_t w : {7, 9}) {
    const RgbImage src = t::pattern(w, 4);
    const RgbImage c = center_crop(src, 4, 4);
    ASSERT_EQ(0, std::memcmp(c.row(0), src.row(0) + 2 * 3, 4 * 3)) << "width " << w;
  }
  // A crop larger than the image pads with zeros: 2 left, 3 right for 5 extra columns.
  const RgbImage small = t::pattern(3, 2);
  const RgbImage padded = center_crop(small, 2, 8);
  EXPECT_EQ(padded.row(0)[0], 0);
  EXPECT_EQ(0, std::memcmp(padded.row(1) + 2 * 3, small.row(1), 3 * 3));
  EXPECT_EQ(padded.row(1)[7 * 3], 0);
  // Resizing to the same size is the identity.
  EXPECT_EQ(t::max_abs_diff(resize_bilinear(im, 50, 100), im), 0);
  // The dynamic rule: 1920 x 1080 at the default 1920*1080 pixels keeps its size, then floors
  // each side to a multiple of 16: 1080 -> 1072.
  ImageSizeRule rule;
  EXPECT_EQ(target_size(rule, 1080, 1920), (std::pair<int64_t, int64_t>(1072, 1920)));
  EXPECT_THROW(fit_image(t::pattern(10, 10), rule, "tiny.png"), std::invalid_argument);
}

TEST(ImageTransforms, FrameSamplingRules) {
  FrameSampling s;  // 81 frames, 4k + 1
  EXPECT_EQ(clip_frame_count(200, s), 81);
  EXPECT_EQ(clip_frame_count(81, s), 81);
  EXPECT_EQ(clip_frame_count(80, s), 77);
  EXPECT_EQ(clip_frame_count(10, s), 9);
  EXPECT_EQ(clip_frame_count(5, s), 5);
  EXPECT_EQ(clip_frame_count(4, s), 1);
  EXPECT_EQ(clip_frame_count(1, s), 1);
  EXPECT_EQ(clip_frame_count(0, s), 0);
  EXPECT_EQ(clip_frame_indices(30, 24, 0, s), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
                                                                     18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28}));
  // Our start/interval extension: 2, 5, ..., 26 from 30 frames; from 20 frames only 6 fit
  // (2 .. 17), so the 4k + 1 rule gives 5.
  FrameSampling every3 = s;
  every3.num_frames = 9;
  every3.start_frame = 2;
  every3.frame_interval = 3;
  EXPECT_EQ(clip_frame_indices(30, 24, 0, every3), (std::vector<int64_t>{2, 5, 8, 11, 14, 17, 20, 23, 26}));
  EXPECT_EQ(clip_frame_indices(20, 24, 0, every3), (std::vector<int64_t>{2, 5, 8, 11, 14}));
  EXPECT_EQ(clip_frame_indices(2, 24, 0, every3), std::vector<int64_t>{});
  every3.frame_interval = 0;
  EXPECT_THROW(clip_frame_indices(20, 24, 0, every3), std::invalid_argument);
  // Resampled to 24 fps from 30 fps, 100 frames (3.33 s): floor(3.33 * 24) = 80 available, so
  // 77 frames; frame i is round(i * 30 / 24) with ties to even: 1.25 -> 1, 2.5 -> 2, 7.5 -> 8.
  s.fix_frame_rate = true;
  const auto idx = clip_frame_indices(100, 30, 0, s);
  ASSERT_EQ(idx.size(), 77u);
  EXPECT_EQ(idx[1], 1);
  EXPECT_EQ(idx[2], 2);
  EXPECT_EQ(idx[6], 8);
  EXPECT_EQ(idx[76], 95);
  // Clamped to the last frame when the container's duration outlasts the frames.
  const auto clamped = clip_frame_indices(10, 30, 2.0, s);
  EXPECT_EQ(clamped.size(), 45u);
  EXPECT_EQ(clamped.back(), 9);
}

TEST(ImageTransforms, ToFloatIsPreprocessImage) {
  RgbImage im(2, 1);
  im.pixels = {0, 128, 255, 1, 2, 254};
  const std::vector<float> chw = to_chw(im);
  ASSERT_EQ(chw.size(), 6u);
  // Layout: channel planes. R plane = pixels 0 and 1's red: 0, 1.
  EXPECT_EQ(chw[0], -1.0f);
  EXPECT_FLOAT_EQ(chw[1], 1.0f / 127.5f - 1.0f);
  EXPECT_FLOAT_EQ(chw[4], 255.0f / 127.5f - 1.0f);
  // [3, T, H, W]
  RgbImage b = im;
  b.pixels = {9, 9, 9, 9, 9, 9};
  const std::vector<float> cthw = to_cthw({im, b});
  EXPECT_EQ(cthw[0], chw[0]);
  EXPECT_EQ(cthw[2], cthw[3]);  // channel 0, frame 1
  EXPECT_EQ(cthw[4], chw[2]);   // channel 1, frame 0
  EXPECT_THROW(to_cthw({im, t::pattern(3, 3)}), std::invalid_argument);

  if (!t::have_python_module("torch")) GTEST_SKIP() << "/usr/bin/python3 has no torch: bitwise check against torch skipped";
  TempDir dir;
  std::string out;
  ASSERT_EQ(t::run("/usr/bin/python3 -c \"import torch, sys; x = torch.arange(256, dtype=torch.float32); "
                   "x = x * ((1 - -1) / 255) + -1; sys.stdout.buffer.write(x.numpy().tobytes())\"",
                   &out),
            0);
  ASSERT_EQ(out.size(), 256 * sizeof(float));
  RgbImage all(256, 1);
  for (int v = 0; v < 256; ++v) all.pixels[static_cast<size_t>(v * 3)] = static_cast<uint8_t>(v);
  const std::vector<float> ours = to_chw(all);
  EXPECT_EQ(0, std::memcmp(ours.data(), out.data(), out.size())) << "differs from torch's x * (2 / 255) + -1";
}

TEST(ImageTransforms, LoadClipFromVideosAndImages) {
  TempDir dir;
  ImageSizeRule rule;
  rule.height = 32;
  rule.width = 48;
  FrameSampling s;
  s.num_frames = 9;
  auto make = [&](const std::string& name, int n) {
    std::vector<RgbImage> frames;
    for (int k = 0; k < n; ++k) frames.push_back(t::pattern(64, 40, k));
    io::write_video(dir.file(name), frames);
  };
  make("long.mp4", 24);
  Clip c = load_clip(dir.file("long.mp4"), rule, s);
  ASSERT_EQ(c.frames.size(), 9u);
  EXPECT_EQ(c.source_frames.back(), 8);
  EXPECT_EQ(c.frames[0].height, 32);
  EXPECT_EQ(c.frames[0].width, 48);
  EXPECT_EQ(c.source_frame_count, -1);  // never needed
  // Each clip frame is the fitted decoded source frame.
  io::VideoReader r(dir.file("long.mp4"));
  EXPECT_EQ(t::max_abs_diff(c.frames[4], crop_and_resize(r.read_frames({4})[0], 32, 48)), 0);

  make("seven.mkv", 7);  // shorter than 9: the 4k + 1 rule gives 5
  c = load_clip(dir.file("seven.mkv"), rule, s);
  EXPECT_EQ(c.frames.size(), 5u);
  EXPECT_EQ(c.source_frame_count, 7);
  make("three.mp4", 4);  // 4 frames: 1
  EXPECT_EQ(load_clip(dir.file("three.mp4"), rule, s).frames.size(), 1u);

  t::write_png_rgb(dir.file("still.PNG"), t::pattern(64, 40));
  c = load_clip(dir.file("still.PNG"), rule, s);
  ASSERT_EQ(c.frames.size(), 1u);
  EXPECT_EQ(t::max_abs_diff(c.frames[0], crop_and_resize(t::pattern(64, 40), 32, 48)), 0);
  EXPECT_EQ(t::max_abs_diff(load_image(dir.file("still.PNG"), rule), c.frames[0]), 0);

  FrameSampling strided = s;  // frames 1, 3, ..., 17 of 24
  strided.start_frame = 1;
  strided.frame_interval = 2;
  c = load_clip(dir.file("long.mp4"), rule, strided);
  EXPECT_EQ(c.source_frames, (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15, 17}));
  EXPECT_EQ(t::max_abs_diff(c.frames[8], crop_and_resize(r.read_frames({17})[0], 32, 48)), 0);

  s.fix_frame_rate = true;  // 24 frames at 16 fps (1.5 s) resampled to 8 fps: 12 available -> 9
  s.frame_rate = 8;
  c = load_clip(dir.file("long.mp4"), rule, s);
  EXPECT_EQ(c.source_frames, (std::vector<int64_t>{0, 2, 4, 6, 8, 10, 12, 14, 16}));
  EXPECT_EQ(t::max_abs_diff(c.frames[3], crop_and_resize(r.read_frames({6})[0], 32, 48)), 0);

  try {
    load_clip(dir.file("notes.txt"), rule, s);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("notes.txt: unsupported media file extension 'txt'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zeroshard::data
