// A minimal PNG writer (8-bit RGB, no compression: "stored" deflate blocks), so pictures of
// samples need no image library. Any viewer and Python's zlib read the files.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace zeroshard::io {

// rgb: float [3, H, W] in [-1, 1] (clamped). Written atomically; throws naming the path.
void write_png(const std::string& path, const at::Tensor& rgb);

// A contact sheet: rows[i] is float [3, n, S, S] (n frames or images of S x S pixels, in
// [-1, 1]), drawn left to right, rows top to bottom, 2 grey pixels between them.
void write_png_rows(const std::string& path, const std::vector<at::Tensor>& rows);

}  // namespace zeroshard::io
