#pragma once
// Scalar math and reductions of the CPU kernels, in the compute type C (float for fp32 and bf16
// storage, double for fp64).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace gdnv::cpu {

template <class C>
C sigmoid(C x) {
  if (x >= 0) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);  // no overflow for very negative x
  return e / (C(1) + e);
}

template <class C>
C silu(C x) {
  return x * sigmoid(x);
}

template <class C>
C silu_grad(C x) {
  const C s = sigmoid(x);
  return s * (C(1) + x * (C(1) - s));
}

// log(1 + e^x) without overflow or the loss of log(1 + tiny).
template <class C>
C softplus(C x) {
  return std::max(x, C(0)) + std::log1p(std::exp(-std::abs(x)));
}

// out[:] += sum over rows r < rows of the row terms add_row(r, partial) adds into a partial sum, taken
// in blocks of 64 rows: the fp32 rounding error of a sum over N rows then grows like sqrt(64) +
// sqrt(N / 64) ulps instead of sqrt(N), as in a GPU kernel's per-block partial sums.
template <class C, class AddRow>
void blocked_row_sum(std::int64_t rows, std::vector<C>& out, AddRow add_row) {
  constexpr std::int64_t kBlock = 64;
  std::vector<C> partial(out.size());
  for (std::int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    std::fill(partial.begin(), partial.end(), C(0));
    for (std::int64_t r = r0; r < std::min(rows, r0 + kBlock); ++r) add_row(r, partial.data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += partial[i];
  }
}

}  // namespace gdnv::cpu
