// Scalar building blocks for row loops that -O3 vectorizes: interleaved sums, e^x in float and
// bf16's bits. Branch-free and always inlined, so that each target clone of a loop (x86-64, AVX2,
// AVX-512) inlines the same arithmetic. Used by the fused row kernels (src/nn/rms_norm.cpp,
// activations.cpp), which are built with -O3 -ffp-contract=off -fno-math-errno (and
// -fno-trapping-math where selects must vectorize; CMakeLists.txt): without FMA contraction every
// clone computes the same bits.
#pragma once

#include <cstdint>

namespace zeroshard::nn::vec {

inline constexpr int64_t kSumLanes = 16;

// sum_j term(j) over 0 <= j < n: kSumLanes interleaved partial sums, combined pairwise. The order
// of the additions depends on n only (not on threads or the CPU's vector width).
template <typename A, typename Term>
__attribute__((always_inline)) inline A lane_sum(int64_t n, const Term& term) {
  A lane[kSumLanes] = {};
  int64_t j = 0;
  for (; j + kSumLanes <= n; j += kSumLanes) {
    for (int64_t l = 0; l < kSumLanes; ++l) lane[l] += term(j + l);
  }
  for (int64_t l = 0; j < n; ++j, ++l) lane[l] += term(j);
  for (int64_t w = kSumLanes / 2; w > 0; w /= 2) {
    for (int64_t l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

// e^x in float, within 1 ulp of the true value (measured over [-100, 89]: at most 0.97 ulp):
// x = n ln2 + r with n = round(x log2 e) (found by adding 1.5 * 2^23) and ln2 in two parts, e^r by
// Cephes' degree-6 polynomial, 2^n as two powers of two. Results that would be subnormal
// (x < -87.34, e^x < 2^-126) are 0; x > 88.72 gives +inf; NaN stays NaN.
__attribute__((always_inline)) inline float exp(float x) {
  constexpr float kLo = -87.33654475f, kHi = 88.72283905f, kRound = 12582912.0f;
  float xc = x < kLo ? kLo : x;  // a NaN passes and is restored at the end
  xc = xc > kHi ? kHi : xc;
  const float t = xc * 1.44269504088896341f + kRound;  // round(x log2 e) in t's low mantissa bits
  const float n = t - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const int32_t ni = __builtin_bit_cast(int32_t, t) - __builtin_bit_cast(int32_t, kRound);  // n in [-126, 128]
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  y = y * __builtin_bit_cast(float, (n1 + 127) << 23) * __builtin_bit_cast(float, (n2 + 127) << 23);
  y = x < kLo ? 0.0f : y;
  y = x > kHi ? __builtin_inff() : y;
  return x != x ? x : y;
}

// bf16 <-> float on the raw bits, with c10::BFloat16's rounding (to nearest, ties to even; NaN to
// the quiet NaN 0x7FC0).
__attribute__((always_inline)) inline float bf16_to_float(uint16_t b) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16);
}

__attribute__((always_inline)) inline uint16_t float_to_bf16(float f) {
  const uint32_t u = __builtin_bit_cast(uint32_t, f);
  const auto rounded = static_cast<uint16_t>((u + UINT32_C(0x7FFF) + ((u >> 16) & 1U)) >> 16);
  return f != f ? static_cast<uint16_t>(0x7FC0) : rounded;
}

}  // namespace zeroshard::nn::vec
