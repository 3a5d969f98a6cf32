#include "data/shapes.h"

#include "util/hash.h"

#include <array>
#include <cmath>

namespace zeroshard::data {
namespace {

constexpr std::array<const char*, 3> kShapes = {"circle", "square", "triangle"};
constexpr std::array<const char*, 6> kColours = {"red", "green", "blue", "yellow", "magenta", "cyan"};
constexpr std::array<std::array<float, 3>, 6> kRgb = {{{1, -1, -1}, {-1, 1, -1}, {-1, -1, 1},
                                                       {1, 1, -1}, {1, -1, 1}, {-1, 1, 1}}};
constexpr std::array<const char*, 9> kPlaces = {"top left",    "top",    "top right",    "left",        "center",
                                                "right",       "bottom left", "bottom", "bottom right"};
constexpr std::array<const char*, 5> kMotions = {"standing still", "moving right", "moving left", "moving down",
                                                 "moving up"};
constexpr float kBackground = -0.8f;

bool inside(int shape, float dx, float dy, float r) {
  switch (shape) {
    case 0: return dx * dx + dy * dy <= r * r;
    case 1: return std::fabs(dx) <= r && std::fabs(dy) <= r;
    default:  // upward triangle: apex at -r, base at +r
      return dy >= -r && dy <= r && std::fabs(dx) <= (dy + r) * 0.5f;
  }
}

}  // namespace

ShapeScene shape_scene(uint64_t seed, int64_t index) {
  uint64_t h = util::splitmix64(seed ^ util::splitmix64(static_cast<uint64_t>(index) + 0x5151));
  auto pick = [&](int n) {
    h = util::splitmix64(h);
    return static_cast<int>(h % static_cast<uint64_t>(n));
  };
  ShapeScene s;
  s.shape = pick(3);
  s.colour = pick(6);
  s.size = pick(2);
  s.place = pick(9);
  s.motion = pick(5);
  s.still_caption = std::string("a ") + (s.size ? "large " : "small ") + kColours[s.colour] + " " +
                    kShapes[s.shape] + " at the " + kPlaces[s.place];
  s.caption = s.still_caption + ", " + kMotions[s.motion];
  return s;
}

at::Tensor render_shape_clip(const ShapeScene& scene, int64_t frames, int64_t size) {
  at::Tensor clip = at::full({3, frames, size, size}, kBackground, at::kFloat);
  float* p = clip.data_ptr<float>();
  const float S = static_cast<float>(size);
  const float r = (scene.size ? 0.16f : 0.09f) * S;
  const float cx0 = (0.25f + 0.25f * static_cast<float>(scene.place % 3)) * S;
  const float cy0 = (0.25f + 0.25f * static_cast<float>(scene.place / 3)) * S;
  const float step = std::round(S / 16.0f);
  const float vx = scene.motion == 1 ? step : scene.motion == 2 ? -step : 0.0f;
  const float vy = scene.motion == 3 ? step : scene.motion == 4 ? -step : 0.0f;
  const auto& rgb = kRgb[static_cast<size_t>(scene.colour)];
  const int64_t plane = size * size, channel = frames * plane;
  for (int64_t t = 0; t < frames; ++t) {
    const float cx = cx0 + vx * static_cast<float>(t), cy = cy0 + vy * static_cast<float>(t);
    for (int64_t y = 0; y < size; ++y) {
      for (int64_t x = 0; x < size; ++x) {
        // Pixel centres; a shape leaving the frame is simply cut.
        if (!inside(scene.shape, static_cast<float>(x) + 0.5f - cx, static_cast<float>(y) + 0.5f - cy, r)) continue;
        for (int c = 0; c < 3; ++c) p[c * channel + t * plane + y * size + x] = rgb[static_cast<size_t>(c)];
      }
    }
  }
  return clip;
}

at::Tensor shape_images(uint64_t seed, int64_t first_index, int64_t batch, int64_t size) {
  return shape_clips(seed, first_index, batch, 1, size).select(2, 0);
}

at::Tensor shape_clips(uint64_t seed, int64_t first_index, int64_t batch, int64_t frames, int64_t size) {
  std::vector<at::Tensor> clips;
  for (int64_t i = 0; i < batch; ++i) clips.push_back(render_shape_clip(shape_scene(seed, first_index + i), frames, size));
  return at::stack(clips);
}

}  // namespace zeroshard::data
