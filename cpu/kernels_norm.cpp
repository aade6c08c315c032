// RMSNorm and the gated per-head output norm, forward and backward, row by row in C.
#include <cmath>
#include <type_traits>

#include "core/fast_rsqrt.hpp"
#include "cpu/kernels.hpp"
#include "cpu/math.hpp"
#include "faults/seams.hpp"

namespace gdnv::cpu {
namespace {

// rstd = 1 / sqrt(mean(x^2) + eps); under the planted fault RmsnormFastRsqrt an fp32 rstd is the fast
// approximation a fast-math build substitutes (fp64 has no such instruction to fall back on).
template <class C>
C row_rstd(const C* x, std::int64_t n, double eps) {
  C ss = 0;
  for (std::int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const C mean_eps = ss / static_cast<C>(n) + static_cast<C>(eps);
  if constexpr (std::is_same_v<C, float>)
    if (faults::fast_norm_rsqrt()) return fast_rsqrt(mean_eps);
  return C(1) / std::sqrt(mean_eps);
}

// With nrm = x * rstd and y = nrm * w, for the row gradient dy: dx = rstd * (dy*w - nrm * mean(dy*w*nrm)).
template <class C>
void row_dx(const C* x, const C* w, C rstd, const C* dy, std::int64_t n, C* dx) {
  C dot = 0;
  for (std::int64_t i = 0; i < n; ++i) dot += dy[i] * w[i] * x[i] * rstd;
  const C mean = dot / static_cast<C>(n);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = rstd * (dy[i] * w[i] - x[i] * rstd * mean);
}

template <class C>
std::int64_t rows_of(const Array<C>& x, const Array<C>& w) {
  return w.empty() ? 0 : static_cast<std::int64_t>(x.size() / w.size());
}

}  // namespace

template <class C>
typename Norm<C>::Out Norm<C>::rmsnorm(const Array<C>& x, const Array<C>& w, double eps) {
  const std::int64_t rows = rows_of(x, w), n = static_cast<std::int64_t>(w.size());
  Out out{Array<C>(x.size()), Array<C>(static_cast<std::size_t>(rows))};
  for (std::int64_t r = 0; r < rows; ++r) {
    const C rstd = out.rstd[r] = row_rstd(&x[r * n], n, eps);
    for (std::int64_t i = 0; i < n; ++i) out.y[r * n + i] = x[r * n + i] * rstd * w[i];
  }
  return out;
}

template <class C>
typename Norm<C>::Grads Norm<C>::rmsnorm_backward(const Array<C>& dy, const Array<C>& x, const Array<C>& w,
                                                  const Array<C>& rstd) {
  const std::int64_t rows = rows_of(x, w), n = static_cast<std::int64_t>(w.size());
  Grads g{Array<C>(x.size()), {}, Array<C>(w.size())};
  for (std::int64_t r = 0; r < rows; ++r) row_dx(&x[r * n], w.data(), rstd[r], &dy[r * n], n, &g.dx[r * n]);
  blocked_row_sum(rows, g.dw, [&](std::int64_t r, C* dw) {  // dw = sum_rows dy * nrm
    for (std::int64_t i = 0; i < n; ++i) dw[i] += dy[r * n + i] * x[r * n + i] * rstd[r];
  });
  return g;
}

template <class C>
typename Norm<C>::Out Norm<C>::gated(const Array<C>& o, const Array<C>& z, const Array<C>& w, double eps) {
  Out out = rmsnorm(o, w, eps);
  for (std::size_t j = 0; j < o.size(); ++j) out.y[j] *= silu(z[j]);
  return out;
}

template <class C>
typename Norm<C>::Grads Norm<C>::gated_backward(const Array<C>& dy, const Array<C>& o, const Array<C>& z,
                                                const Array<C>& w, const Array<C>& rstd) {
  const std::int64_t rows = rows_of(o, w), n = static_cast<std::int64_t>(w.size());
  Array<C> d_normed(o.size());  // gradient of rmsnorm(o) * w
  Grads g{{}, Array<C>(o.size()), {}};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t j = r * n + i;
      g.dz[j] = dy[j] * o[j] * rstd[r] * w[i] * silu_grad(z[j]);
      d_normed[j] = dy[j] * silu(z[j]);
    }
  Grads norm = rmsnorm_backward(d_normed, o, w, rstd);
  g.dx = std::move(norm.dx);
  g.dw = std::move(norm.dw);
  return g;
}

template struct Norm<float>;
template struct Norm<double>;

}  // namespace gdnv::cpu
