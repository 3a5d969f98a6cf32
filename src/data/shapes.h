// Captioned images and clips of moving shapes, generated in-process from (seed, index): the
// data of the image and video series, with nothing to download. A scene is one shape (circle,
// square or triangle) of one colour and size on a dark background, starting at one of nine
// places and moving in one of five ways; the caption says all of that.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace zeroshard::data {

struct ShapeScene {
  int shape = 0;   // 0 circle, 1 square, 2 triangle
  int colour = 0;  // index into the palette (red, green, blue, yellow, magenta, cyan)
  int size = 0;    // 0 small, 1 large
  int place = 0;   // 0..8: row-major 3x3 grid (top left .. bottom right) of the first frame
  int motion = 0;  // 0 still, 1 right, 2 left, 3 down, 4 up
  std::string caption;        // e.g. "a large red circle at the top left, moving right"
  std::string still_caption;  // the first frame's: "a large red circle at the top left"
};

ShapeScene shape_scene(uint64_t seed, int64_t index);

// The scene as `frames` frames of size x size pixels: float [3, frames, size, size] in [-1, 1].
// The shape moves size/16 pixels per frame (rounded to whole pixels: crisp edges).
at::Tensor render_shape_clip(const ShapeScene& scene, int64_t frames, int64_t size);

// Images [batch, 3, size, size]: the first frames of scenes first_index .. + batch - 1 (their
// captions: shape_scene(seed, i).still_caption).
at::Tensor shape_images(uint64_t seed, int64_t first_index, int64_t batch, int64_t size);

// Clips [batch, 3, frames, size, size] of scenes first_index .. first_index + batch - 1.
at::Tensor shape_clips(uint64_t seed, int64_t first_index, int64_t batch, int64_t frames, int64_t size);

}  // namespace zeroshard::data
