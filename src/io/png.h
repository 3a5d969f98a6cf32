// A minimal PNG writer (8-bit RGB, no compression: "stored" deflate blocks), so pictures of
// samples need no image library. Any viewer and Python's zlib read the files.
#pragma once

#include <ATen/ATen.h>

#include <string>

namespace zeroshard::io {

// rgb: float [3, H, W] in [-1, 1] (clamped). Written atomically; throws naming the path.
void write_png(const std::string& path, const at::Tensor& rgb);

}  // namespace zeroshard::io
