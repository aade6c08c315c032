// The gates (docs/DESIGN.md §1.3) in the state dtype: g = -exp(A_log) * softplus(a + dt_bias) (log decay),
// beta = sigmoid(b); forward and backward.
#include <cmath>

#include "core/half.hpp"
#include "cpu/kernels.hpp"
#include "cpu/math.hpp"
#include "faults/seams.hpp"

namespace gdnv::cpu {

namespace {

// softplus, or under the planted fault SoftplusOverflows the naive log(1 + e^x).
template <class C>
C gate_softplus(C x, bool naive) {
  return naive ? std::log(C(1) + std::exp(x)) : softplus(x);
}

// A gate as stored: in the state dtype, or under the planted fault GateBf16BeforeExp rounded to bf16.
template <class C>
C stored_gate(C x, bool to_bf16) {
  return to_bf16 ? static_cast<C>(round_bf16(static_cast<float>(x))) : x;
}

}  // namespace

template <class C>
typename GateMath<C>::Out GateMath<C>::forward(const Array<C>& a, const Array<C>& b, const Array<C>& A_log,
                                               const Array<C>& dt_bias, bool bf16_storage) {
  const std::size_t Hv = A_log.size();
  Out out{Array<C>(a.size()), Array<C>(b.size())};
  const bool naive = faults::naive_softplus();
  const bool to_bf16 = faults::gates_rounded_to_bf16(bf16_storage);
  for (std::size_t j = 0; j < a.size(); ++j) {
    const std::size_t h = j % Hv;
    out.g[j] = stored_gate(-std::exp(A_log[h]) * gate_softplus(a[j] + dt_bias[h], naive), to_bf16);
    out.beta[j] = stored_gate(sigmoid(b[j]), to_bf16);
  }
  return out;
}

// With x = a + dt_bias: dg/dA_log = g, dg/dx = -exp(A_log) sigmoid(x) (softplus' = sigmoid), dx/ddt_bias = 1;
// dbeta/db = beta (1 - beta).
template <class C>
typename GateMath<C>::Grads GateMath<C>::backward(const Array<C>& dg, const Array<C>& dbeta, const Array<C>& a,
                                                  const Array<C>& b, const Array<C>& A_log, const Array<C>& dt_bias) {
  const auto Hv = static_cast<std::int64_t>(A_log.size());
  const auto rows = Hv == 0 ? 0 : static_cast<std::int64_t>(a.size()) / Hv;
  Grads g{Array<C>(a.size()), Array<C>(b.size()), Array<C>(A_log.size()), Array<C>(dt_bias.size())};
  const bool naive = faults::naive_softplus();
  for (std::int64_t j = 0; j < rows * Hv; ++j) {
    const std::int64_t h = j % Hv;
    g.da[j] = dg[j] * -std::exp(A_log[h]) * sigmoid(a[j] + dt_bias[h]);
    const C beta = sigmoid(b[j]);
    g.db[j] = dbeta[j] * beta * (C(1) - beta);
  }
  blocked_row_sum(rows, g.dA_log, [&](std::int64_t r, C* acc) {
    for (std::int64_t h = 0; h < Hv; ++h)
      acc[h] += dg[r * Hv + h] * -std::exp(A_log[h]) * gate_softplus(a[r * Hv + h] + dt_bias[h], naive);
  });
  blocked_row_sum(rows, g.ddt_bias, [&](std::int64_t r, C* acc) {
    for (std::int64_t h = 0; h < Hv; ++h) acc[h] += g.da[r * Hv + h];
  });
  return g;
}

template struct GateMath<float>;
template struct GateMath<double>;

}  // namespace gdnv::cpu
