#pragma once
// A fast 1 / sqrt(x) of the kind a fast-math path substitutes for 1 / sqrtf(x): a table of 1 / sqrt at
// steps of 1/256 over [1, 4) (768 entries) read with linear interpolation, after taking out a power of 4 (x = m 4^k,
// rsqrt(x) = rsqrt(m) 2^-k). The chord of a convex function lies above it: relative error up
// to 1.5e-6 (mean +3e-7 over log-uniform x), largest for m near 1, where rows of unit RMS land. Only the planted fault
// RmsnormFastRsqrt uses it (CPU and GPU norms alike), never a correct path. The table's entries are computed where they
// are read.
#include <cmath>

#include "core/hd.hpp"

namespace gdnv {

GDNV_HD float fast_rsqrt(float x) {
  constexpr float kStep = 1.0f / 256;  // exact in fp32, so every knot is
  int e = 0;
  (void)frexpf(x, &e);                // x = f 2^e, f in [0.5, 1): floor(log2 x) = e - 1
  const int k = (e - 1) >> 1;         // floor((e - 1) / 2)
  const float m = ldexpf(x, -2 * k);  // in [1, 4)
  const float at = (m - 1.0f) / kStep, i = floorf(at), t = at - i;
  const float m0 = 1.0f + i * kStep, m1 = m0 + kStep;
  return ldexpf((1.0f - t) / sqrtf(m0) + t / sqrtf(m1), -k);
}

}  // namespace gdnv
