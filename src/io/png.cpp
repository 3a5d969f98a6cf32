#include "io/png.h"

#include "io/file.h"
#include "util/crc32.h"

#include <stdexcept>

namespace zeroshard::io {
namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xFF));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, util::crc32(body.data(), body.size()));
}

// zlib stream of stored (uncompressed) deflate blocks of at most 65535 bytes.
std::string zlib_stored(const std::string& raw) {
  std::string z = "\x78\x01";
  uint32_t a = 1, b = 0;  // Adler-32
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(static_cast<char>(last ? 1 : 0));
    z.push_back(static_cast<char>(n & 0xFF));
    z.push_back(static_cast<char>(n >> 8));
    z.push_back(static_cast<char>(~n & 0xFF));
    z.push_back(static_cast<char>((~n >> 8) & 0xFF));
    z.append(raw, pos, n);
    pos += n;
  } while (pos < raw.size());
  put_u32(z, (b << 16) | a);
  return z;
}

}  // namespace

void write_png(const std::string& path, const at::Tensor& rgb) {
  if (rgb.dim() != 3 || rgb.size(0) != 3) {
    throw std::invalid_argument(path + ": write_png expects a [3, H, W] image");
  }
  const int64_t H = rgb.size(1), W = rgb.size(2);
  const at::Tensor px = ((rgb.to(at::kFloat).clamp(-1, 1) + 1) * 127.5).round().to(at::kByte).permute({1, 2, 0}).contiguous();
  std::string raw;
  raw.reserve(static_cast<size_t>(H * (1 + 3 * W)));
  const auto* p = px.data_ptr<uint8_t>();
  for (int64_t y = 0; y < H; ++y) {
    raw.push_back('\0');  // filter: none
    raw.append(reinterpret_cast<const char*>(p + y * W * 3), static_cast<size_t>(W * 3));
  }
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(W));
  put_u32(ihdr, static_cast<uint32_t>(H));
  ihdr += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, RGB, deflate, adaptive filters, no interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", zlib_stored(raw));
  chunk(png, "IEND", "");
  write_file_atomic(path, png);
}

void write_png_rows(const std::string& path, const std::vector<at::Tensor>& rows) {
  if (rows.empty()) throw std::invalid_argument(path + ": write_png_rows needs at least one row");
  const int64_t S = rows[0].size(2), gap = 2;
  int64_t n = 0;
  for (const auto& r : rows) n = std::max(n, r.size(1));
  at::Tensor sheet = at::zeros({3, static_cast<int64_t>(rows.size()) * (S + gap), n * (S + gap)}, at::kFloat);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t t = 0; t < rows[i].size(1); ++t) {
      sheet.narrow(1, static_cast<int64_t>(i) * (S + gap), S).narrow(2, t * (S + gap), S).copy_(rows[i].select(1, t));
    }
  }
  write_png(path, sheet);
}

}  // namespace zeroshard::io
