#pragma once
// bf16 and fp16 <-> fp32 conversions, round-to-nearest-even, NaN preserved (quieted), as PyTorch does.
#include <cstdint>
#include <cstring>

#include "core/hd.hpp"

namespace gdnv {

GDNV_HD std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

GDNV_HD float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

GDNV_HD std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                              // ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

GDNV_HD float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

// Rounds an fp32 value to the nearest bf16 and back: the storage boundary of a bf16 tensor.
GDNV_HD float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

GDNV_HD std::uint16_t float_to_fp16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                                    // fp16 subnormal or zero
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);           // below half the min subnormal
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - exp): total shift to 10-bit mantissa
    const std::uint32_t kept = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rounded = kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
    return static_cast<std::uint16_t>(sign | rounded);
  }
  std::uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

GDNV_HD float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  int e = 113;
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (static_cast<std::uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13));
}

}  // namespace gdnv
