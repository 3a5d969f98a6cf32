// Video reading and writing through FFmpeg's libraries: our writer's files read back (mp4 with
// libx264 or mpeg4, mkv without a stored frame count), exact frame counts, frame selection,
// broken files, and equality with the ffmpeg command's rgb24 output (what DiffSynth's imageio
// reader gets) when the command is installed.
#include "io/video_codec.h"

#include "io/media_test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

namespace zeroshard::io {
namespace {

using testing::TempDir;

// Frame t: smooth, saturated colour ramps (4:2:0 chroma keeps them; a wrong YUV matrix would
// not), moving with t, and a 16 x 16 block of grey 20 + 9 t in the top-left corner, so a
// decoded frame tells its own index despite lossy coding.
RgbImage numbered_frame(int t, int64_t w = 64, int64_t h = 48) {
  RgbImage f(w, h);
  for (int64_t y = 0; y < h; ++y) {
    for (int64_t x = 0; x < w; ++x) {
      uint8_t* p = f.row(y) + x * 3;
      p[0] = static_cast<uint8_t>(std::min<int64_t>(255, x * 4 + t * 2));
      p[1] = static_cast<uint8_t>(std::min<int64_t>(255, y * 5));
      p[2] = static_cast<uint8_t>(255 - std::min<int64_t>(255, (x + y) * 2 + t));
    }
  }
  for (int64_t y = 0; y < 16; ++y) {
    for (int64_t x = 0; x < 16; ++x) std::fill_n(f.row(y) + x * 3, 3, static_cast<uint8_t>(20 + 9 * t));
  }
  return f;
}

int frame_number(const RgbImage& f) {
  double s = 0;
  for (int64_t y = 4; y < 12; ++y) {
    for (int64_t x = 4; x < 12; ++x) s += f.row(y)[x * 3 + 1];
  }
  return static_cast<int>(std::lround((s / 64.0 - 20.0) / 9.0));
}

std::vector<RgbImage> numbered_clip(int n) {
  std::vector<RgbImage> frames;
  for (int t = 0; t < n; ++t) frames.push_back(numbered_frame(t));
  return frames;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(VideoCodec, WriteThenReadMp4) {
  TempDir dir;
  const std::string path = dir.file("clip.mp4");
  VideoWriterOptions o;
  o.fps = 12;
  const std::string codec = write_video(path, numbered_clip(24), o);
  std::printf("encoder used: %s\n", codec.c_str());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  VideoReader r(path);
  EXPECT_EQ(r.info().width, 64);
  EXPECT_EQ(r.info().height, 48);
  EXPECT_DOUBLE_EQ(r.info().fps, 12.0);
  EXPECT_EQ(r.info().codec, codec == "libx264" ? "h264" : "mpeg4");
  EXPECT_EQ(r.info().container_frames, 24);
  EXPECT_NEAR(r.info().duration_seconds, 2.0, 0.1);
  EXPECT_EQ(r.frame_count(), 24);
  EXPECT_TRUE(r.warnings().empty());

  // Any order, repeats, after the count consumed the stream (the reader reopens).
  const std::vector<int64_t> want = {5, 0, 23, 5, 11};
  const auto frames = r.read_frames(want);
  ASSERT_EQ(frames.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(frame_number(frames[k]), want[k]);
    EXPECT_LT(testing::mean_abs_diff(frames[k], numbered_frame(static_cast<int>(want[k]))), 3.0) << "frame " << want[k];
  }
  const auto first = r.read_first_frames(30);  // more than there are
  ASSERT_EQ(first.size(), 24u);
  for (int t = 0; t < 24; ++t) EXPECT_EQ(frame_number(first[static_cast<size_t>(t)]), t);

  const std::string e = error_of([&] { r.read_frames({3, 24}); });
  EXPECT_NE(e.find(path + ": frame index 24 is beyond the last frame (24 frames)"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { r.read_frames({-1}); }).find("frame index -1 is negative"), std::string::npos);
}

TEST(VideoCodec, MkvHasNoStoredCountSoItIsDecoded) {
  TempDir dir;
  const std::string path = dir.file("clip.mkv");
  VideoWriterOptions o;
  o.fps = 8;
  write_video(path, numbered_clip(9), o);
  VideoReader r(path);
  EXPECT_EQ(r.info().container_frames, 0);
  EXPECT_FALSE(r.frame_count_known());
  EXPECT_EQ(r.frame_count(), 9);
  EXPECT_TRUE(r.frame_count_known());
  EXPECT_EQ(frame_number(r.read_frames({8})[0]), 8);
  // A short read learns the count without a separate pass.
  VideoReader r2(path);
  EXPECT_EQ(r2.read_first_frames(20).size(), 9u);
  EXPECT_TRUE(r2.frame_count_known());
  EXPECT_EQ(r2.frame_count(), 9);
}

TEST(VideoCodec, Mpeg4EncoderAndWriterErrors) {
  TempDir dir;
  VideoWriterOptions o;
  o.codec = "mpeg4";
  o.fps = 10;
  EXPECT_EQ(write_video(dir.file("m.mp4"), numbered_clip(6), o), "mpeg4");
  VideoReader r(dir.file("m.mp4"));
  EXPECT_EQ(r.info().codec, "mpeg4");
  EXPECT_EQ(r.frame_count(), 6);
  EXPECT_EQ(frame_number(r.read_frames({4})[0]), 4);

  EXPECT_NE(error_of([&] { VideoWriter w(dir.file("odd.mp4"), 63, 48); }).find("divisible by 2, got 63x48"), std::string::npos);
  EXPECT_NE(error_of([&] { VideoWriter w(dir.file("x.unknownext"), 64, 48); }).find("no FFmpeg container matches"),
            std::string::npos);
  VideoWriterOptions bad;
  bad.codec = "no_such_encoder";
  EXPECT_NE(error_of([&] { VideoWriter w(dir.file("y.mp4"), 64, 48, bad); }).find("encoder 'no_such_encoder' is not in this FFmpeg build"),
            std::string::npos);
  {
    VideoWriter w(dir.file("abandoned.mp4"), 64, 48);
    w.write(numbered_frame(0));
    EXPECT_NE(error_of([&] { w.write(testing::pattern(32, 32)); }).find("frame 1 is 32x32, the video is 64x48"), std::string::npos);
  }  // destroyed without finish(): nothing left behind
  EXPECT_FALSE(std::filesystem::exists(dir.file("abandoned.mp4")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("abandoned.mp4.tmp")));
}

TEST(VideoCodec, BrokenFilesNameFileAndFfmpegError) {
  TempDir dir;
  std::string e = error_of([&] { VideoReader r(dir.file("missing.mp4")); });
  EXPECT_NE(e.find(dir.file("missing.mp4") + ": cannot open video: No such file or directory"), std::string::npos) << e;

  testing::write_bytes(dir.file("garbage.mp4"), std::string(5000, 'x'));
  e = error_of([&] { VideoReader r(dir.file("garbage.mp4")); });
  EXPECT_NE(e.find(dir.file("garbage.mp4") + ": cannot open video: Invalid data found when processing input"), std::string::npos) << e;

  testing::write_png_rgb(dir.file("still.png"), testing::pattern(8, 8));
  VideoReader still(dir.file("still.png"));  // FFmpeg reads a PNG as a one-frame video
  EXPECT_EQ(still.frame_count(), 1);

  // Without faststart the index (moov) is at the end: cutting the file loses it.
  VideoWriterOptions o;
  o.faststart = false;
  write_video(dir.file("tail.mp4"), numbered_clip(12), o);
  std::string bytes = testing::read_bytes(dir.file("tail.mp4"));
  const size_t moov = bytes.rfind("moov");
  ASSERT_NE(moov, std::string::npos);
  testing::write_bytes(dir.file("tail_cut.mp4"), bytes.substr(0, moov - 4));
  e = error_of([&] { VideoReader r(dir.file("tail_cut.mp4")); });
  EXPECT_NE(e.find(dir.file("tail_cut.mp4") + ": cannot open video: Invalid data found when processing input"), std::string::npos) << e;
  // Cut inside the index header (mvhd), before any track: no stream at all.
  testing::write_bytes(dir.file("moov_cut.mp4"), bytes.substr(0, moov + 40));
  e = error_of([&] { VideoReader r(dir.file("moov_cut.mp4")); });
  EXPECT_NE(e.find(dir.file("moov_cut.mp4") + ": no video stream in the file"), std::string::npos) << e;

  // With faststart the index comes first and still claims 24 frames after the cut; the cut
  // packet fails to decode: an error naming the packet and FFmpeg's text, or, tolerated, a
  // warning, and the exact count is what decodes.
  write_video(dir.file("front.mp4"), numbered_clip(24));
  bytes = testing::read_bytes(dir.file("front.mp4"));
  testing::write_bytes(dir.file("front_cut.mp4"), bytes.substr(0, bytes.size() * 4 / 5));
  {
    VideoReader strict(dir.file("front_cut.mp4"));
    EXPECT_EQ(strict.info().container_frames, 24);
    e = error_of([&] { strict.frame_count(); });
    EXPECT_NE(e.find(dir.file("front_cut.mp4") + ": decoding packet "), std::string::npos) << e;
    EXPECT_NE(e.find("Invalid data found when processing input"), std::string::npos) << e;
  }
  VideoReaderOptions tolerate;
  tolerate.tolerate_decode_errors = true;
  VideoReader r(dir.file("front_cut.mp4"), tolerate);
  const int64_t n = r.frame_count();
  std::printf("truncated mp4: container says 24 frames, %ld decode\n", static_cast<long>(n));
  EXPECT_LT(n, 24);
  EXPECT_GT(n, 0);
  if (testing::have_ffmpeg_cli()) {  // ffprobe decodes the same number
    std::string probe;
    ASSERT_EQ(testing::run("ffprobe -v quiet -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 " +
                               dir.file("front_cut.mp4"), &probe), 0);
    EXPECT_EQ(std::stol(probe), n);
  }
  ASSERT_GE(r.warnings().size(), 2u);
  EXPECT_NE(r.warnings().front().find("(packet skipped)"), std::string::npos) << r.warnings().front();
  EXPECT_NE(r.warnings().back().find("the container states 24 frames but " + std::to_string(n) + " decode"), std::string::npos);
  const auto frames = r.read_first_frames(24);
  ASSERT_EQ(static_cast<int64_t>(frames.size()), n);
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(frame_number(frames[static_cast<size_t>(t)]), t);
}

// The ffmpeg command's rgb24 frames (what imageio hands DiffSynth) equal ours, for our own file
// and for files the command encodes itself (BT.709-tagged, full-range, odd sizes, GIF).
TEST(VideoCodec, FramesEqualFfmpegCommandRgb24) {
  if (!testing::have_ffmpeg_cli()) GTEST_SKIP() << "the ffmpeg command is not installed: parity not checked";
  TempDir dir;
  write_video(dir.file("ours.mp4"), numbered_clip(10));
  const std::vector<std::pair<std::string, std::string>> made = {
      {"bt709.mp4", "-f lavfi -i testsrc2=size=96x54:rate=25 -frames:v 17 -pix_fmt yuv420p -colorspace bt709 -color_primaries bt709 -color_trc bt709"},
      {"full.mp4", "-f lavfi -i testsrc=size=50x30:rate=24 -frames:v 7 -pix_fmt yuvj420p"},
      {"odd.mkv", "-f lavfi -i mandelbrot=size=45x27:rate=10 -frames:v 5 -c:v ffv1 -pix_fmt yuv444p"},
      {"anim.gif", "-f lavfi -i testsrc=size=40x30:rate=10 -frames:v 6"},
  };
  std::vector<std::string> files = {dir.file("ours.mp4")};
  for (const auto& [name, args] : made) {
    ASSERT_EQ(testing::run("ffmpeg -v error " + args + " -y " + dir.file(name)), 0) << name;
    files.push_back(dir.file(name));
  }
  for (const auto& f : files) {
    std::string raw;
    ASSERT_EQ(testing::run("ffmpeg -v error -i " + f + " -map 0:v:0 -f rawvideo -pix_fmt rgb24 -", &raw), 0) << f;
    VideoReader r(f);
    const int64_t n = r.frame_count();
    std::string probe;
    ASSERT_EQ(testing::run("ffprobe -v quiet -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 " + f,
                           &probe), 0);
    EXPECT_EQ(std::stol(probe), n) << f;
    const auto frames = r.read_first_frames(n);
    const size_t frame_bytes = static_cast<size_t>(r.info().width * r.info().height * 3);
    ASSERT_EQ(raw.size(), frame_bytes * static_cast<size_t>(n)) << f << ": the command gives a different frame count";
    int worst = 0;
    for (int64_t t = 0; t < n; ++t) {
      RgbImage cli(r.info().width, r.info().height);
      std::memcpy(cli.pixels.data(), raw.data() + static_cast<size_t>(t) * frame_bytes, frame_bytes);
      worst = std::max(worst, testing::max_abs_diff(frames[static_cast<size_t>(t)], cli));
    }
    std::printf("ffmpeg rgb24 parity %-10s %ld frames (%s), max|diff| %d\n", std::filesystem::path(f).filename().c_str(),
                static_cast<long>(n), r.info().codec.c_str(), worst);
    EXPECT_EQ(worst, 0) << f;
  }
}

// DiffSynth reads GIFs through imageio/PIL; we read them through FFmpeg's GIF decoder. On a
// GIF the ffmpeg command makes, every frame equals PIL's convert("RGB").
TEST(VideoCodec, GifFramesEqualPil) {
  if (!testing::have_ffmpeg_cli() || !testing::have_python_module("PIL")) {
    GTEST_SKIP() << "needs the ffmpeg command and /usr/bin/python3 with PIL";
  }
  TempDir dir;
  const std::string gif = dir.file("a.gif");
  ASSERT_EQ(testing::run("ffmpeg -v error -f lavfi -i testsrc2=size=40x30:rate=10 -frames:v 6 -y " + gif), 0);
  std::string raw;
  ASSERT_EQ(testing::run("/usr/bin/python3 -c \"import sys; from PIL import Image, ImageSequence; "
                         "[sys.stdout.buffer.write(f.convert('RGB').tobytes()) for f in ImageSequence.Iterator(Image.open(sys.argv[1]))]\" " +
                             gif,
                         &raw),
            0);
  VideoReader r(gif);
  const auto frames = r.read_first_frames(100);
  ASSERT_EQ(raw.size(), frames.size() * 40 * 30 * 3);
  for (size_t t = 0; t < frames.size(); ++t) {
    EXPECT_EQ(0, std::memcmp(frames[t].pixels.data(), raw.data() + t * 40 * 30 * 3, 40 * 30 * 3)) << "frame " << t;
  }
}

}  // namespace
}  // namespace zeroshard::io
