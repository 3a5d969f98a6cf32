#include "util/crc32.h"

#include <array>
#include <cstring>

namespace zeroshard::util {

namespace {

// Slicing-by-8 tables of a reflected polynomial: table[k][b] is the CRC of byte b followed by k
// zero bytes.
template <uint32_t Poly>
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c & 1) ? (Poly ^ (c >> 1)) : (c >> 1);
      t[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (int k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
    }
  }
};

template <uint32_t Poly>
uint32_t update(const void* data, size_t n, uint32_t crc) {
  static const Tables<Poly> tables;
  const auto& t = tables.t;
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  while (n >= 8) {
    uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= crc;  // little-endian hosts only (x86-64, aarch64)
    crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^ t[3][hi & 0xff] ^
          t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) { return update<0xEDB88320u>(data, n, crc); }

uint32_t crc32c(const void* data, size_t n, uint32_t crc) { return update<0x82F63B78u>(data, n, crc); }

}  // namespace zeroshard::util
