#pragma once
// The one sum every transport's reductions use: element i over n ranks' contributions, added in rank
// order ((x_0 + x_1) + x_2) + ..., accumulated in fp64 for F64 and fp32 for F32 and BF16, rounded
// once to the storage dtype (RNE for bf16). Shared by host code and the CUDA kernel (GDNV_HD), so
// in-process, MPI and NCCL reductions give the same bits.
#include <cstdint>
#include <span>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/half.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"

namespace gdnv::comm {

template <class T>
using rank_sum_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

GDNV_HD double widen(double x) { return x; }
GDNV_HD float widen(float x) { return x; }
GDNV_HD float widen(bf16_t x) { return bf16_to_float(x.bits); }

template <class T>
GDNV_HD T narrow(rank_sum_acc_t<T> acc) {
  if constexpr (std::is_same_v<T, bf16_t>) return bf16_t{float_to_bf16(acc)};
  else return acc;
}

// Rank-ordered sum of x(0), ..., x(n-1), where x(r) is rank r's contribution (a T).
template <class T, class Contribution>
GDNV_HD T rank_ordered_sum(int n, Contribution x) {
  rank_sum_acc_t<T> acc = widen(x(0));
  for (int r = 1; r < n; ++r) acc += widen(x(r));
  return narrow<T>(acc);
}

// Host: out[i] = rank-ordered sum of inputs[r][i] for i < count (inputs in rank order; out may be
// one of them). dtype must be F64, F32 or BF16.
void rank_sum(DType dtype,
              void* out,                            // [count]
              std::span<const void* const> inputs,  // n pointers to [count]
              std::int64_t count);

}  // namespace gdnv::comm
