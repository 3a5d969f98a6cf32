// CRC-32 (IEEE 802.3, the polynomial of zlib and Python's zlib.crc32), so a checkpoint's
// per-file checksums can be verified by any tool; and CRC-32C (Castagnoli), which TFRecord
// (TensorBoard event files) uses. One slicing-by-8 implementation serves both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zeroshard::util {

// Continues a running checksum: crc32(data, n, crc32(prefix, m)) == crc32(prefix + data).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
// The same for CRC-32C (reflected polynomial 0x82F63B78).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace zeroshard::util
