#pragma once
// Scalar math and storage access shared by the CUDA kernels and their host emulation (shared host/device math):
// plain loops over raw pointers, fp32 arithmetic, bf16 storage rounded to nearest even (core/half.hpp).
// Activations arrive as fp32 or bf16 (`bf16` says which); states, gates and scratch are fp32.
#include <cmath>
#include <cstdint>

#include "core/half.hpp"
#include "core/hd.hpp"

namespace gdnv::gpu {

using i64 = std::int64_t;

// The kernels' 64-token chunk of the gated delta rule and 64-row blocks of every row sum (the blocked
// partial sums of cpu/math.hpp's blocked_row_sum, so both backends round alike).
constexpr i64 kChunk = 64;
constexpr i64 kRowBlock = 64;

// expf / logf / sqrtf by name: the float overloads exist on host and device alike.
GDNV_HD float exp_f(float x) { return expf(x); }
GDNV_HD float log1p_f(float x) { return log1pf(x); }
GDNV_HD float sqrt_f(float x) { return sqrtf(x); }

GDNV_HD float sigmoid(float x) {
  if (x >= 0) return 1.0f / (1.0f + exp_f(-x));
  const float e = exp_f(x);  // no overflow for very negative x
  return e / (1.0f + e);
}

GDNV_HD float silu(float x) { return x * sigmoid(x); }

GDNV_HD float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

// log(1 + e^x) without overflow or the loss of log(1 + tiny).
GDNV_HD float softplus(float x) { return (x > 0.0f ? x : 0.0f) + log1p_f(exp_f(-fabsf(x))); }

// Element i of an activation tensor stored as fp32 or bf16.
GDNV_HD float load(const void* p, i64 i, bool bf16) {
  return bf16 ? bf16_to_float(static_cast<const std::uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Stores v as element i, rounded to nearest even when bf16: the op boundary of docs/DESIGN.md §4.
GDNV_HD void store(void* p, i64 i, float v, bool bf16) {
  if (bf16) static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v);
  else static_cast<float*>(p)[i] = v;
}

// Index of the packed sequence holding row r: the last s with cu[s] <= r (cu [n+1], non-decreasing).
// Binary search, so each thread finds its sequence from the device-resident offsets alone.
GDNV_HD i64 sequence_of(const i64* cu, i64 n, i64 r) {
  i64 lo = 0, hi = n - 1;
  while (lo < hi) {
    const i64 mid = (lo + hi + 1) / 2;
    if (cu[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace gdnv::gpu
