#include "reference/norms.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"

namespace gdnv::ref {

double sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);  // no overflow for very negative x
  return e / (1.0 + e);
}

namespace {

struct Silu {
  double value, grad;
};

Silu silu_with_grad(double x) {  // one sigmoid for both
  const double s = sigmoid(x);
  return {x * s, s * (1.0 + x * (1.0 - s))};
}

}  // namespace

double silu(double x) { return silu_with_grad(x).value; }
double silu_grad(double x) { return silu_with_grad(x).grad; }

namespace {

std::int64_t rows_of(const Tensor& x, const Tensor& w, const char* what) {
  const std::int64_t n = w.numel();
  if (w.rank() != 1 || x.rank() == 0 || x.dim(-1) != n)
    throw Error(std::string(what) + ": weight " + shape_str(w.shape()) + " does not match the last dimension of " +
                shape_str(x.shape()));
  return x.numel() / n;
}

double row_rstd(const double* x, std::int64_t n, double eps) {
  double ss = 0;
  for (std::int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
}

// With nrm = x * rstd and y = nrm * w: dx = rstd * (dy*w - nrm * mean(dy*w*nrm)); dw's term is dy * nrm.
void row_dx(const double* x, const double* w, double rstd, const double* dy, std::int64_t n, double* dx) {
  double dot = 0;
  for (std::int64_t i = 0; i < n; ++i) dot += dy[i] * w[i] * x[i] * rstd;
  const double mean = dot / static_cast<double>(n);
  for (std::int64_t i = 0; i < n; ++i) dx[i] = rstd * (dy[i] * w[i] - x[i] * rstd * mean);
}

}  // namespace

namespace {

// f(begin, end) on `threads` contiguous blocks of [0, count) in parallel (0: one per core).
template <class F>
void for_blocks(std::int64_t count, int threads, F f) {
  const std::int64_t blocks = std::min<std::int64_t>(threads > 0 ? threads : hardware_threads(), count);
  parallel_for(blocks, static_cast<int>(blocks),
               [&](std::int64_t b) { f(count * b / blocks, count * (b + 1) / blocks); });
}

void rmsnorm_rows(const double* px, const double* pw, std::int64_t n, std::int64_t rows, double eps, double* py,
                  double* pr, int threads) {
  for_blocks(rows, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      pr[r] = row_rstd(px + r * n, n, eps);
      for (std::int64_t i = 0; i < n; ++i) py[r * n + i] = px[r * n + i] * pr[r] * pw[i];
    }
  });
}

}  // namespace

RmsNorm rmsnorm_forward(const Tensor& x, const Tensor& w, double eps, int threads) {
  const std::int64_t rows = rows_of(x, w, "rmsnorm"), n = w.numel();
  RmsNorm out{Tensor::uninitialized(DType::F64, x.shape()), Tensor::uninitialized(DType::F64, {rows})};
  rmsnorm_rows(x.data<double>(), w.data<double>(), n, rows, eps, out.y.data<double>(), out.rstd.data<double>(),
               threads);
  return out;
}

RmsNorm rmsnorm_forward_rows(const Tensor& x, std::int64_t r0, std::int64_t count, const Tensor& w, double eps,
                             int threads) {
  const std::int64_t rows = rows_of(x, w, "rmsnorm"), n = w.numel();
  if (r0 < 0 || count < 0 || r0 + count > rows)
    throw Error("rmsnorm: rows [" + std::to_string(r0) + ", " + std::to_string(r0 + count) + ") outside [0, " +
                std::to_string(rows) + ")");
  RmsNorm out{Tensor::uninitialized(DType::F64, {count, n}), Tensor::uninitialized(DType::F64, {count})};
  rmsnorm_rows(x.data<double>() + r0 * n, w.data<double>(), n, count, eps, out.y.data<double>(),
               out.rstd.data<double>(), threads);
  return out;
}

// dx row by row as row_backward's, and dw column by column, each column's terms summed over the rows in
// order as row_backward adds them.
RmsNormGrads rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, int threads) {
  const std::int64_t rows = rows_of(x, w, "rmsnorm_backward"), n = w.numel();
  RmsNormGrads g{Tensor::uninitialized(DType::F64, x.shape()), Tensor(DType::F64, w.shape())};
  const double *px = x.data<double>(), *pw = w.data<double>(), *pr = rstd.data<double>(), *pdy = dy.data<double>();
  double *pdx = g.dx.data<double>(), *pdw = g.dw.data<double>();
  for_blocks(rows, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) row_dx(px + r * n, pw, pr[r], pdy + r * n, n, pdx + r * n);
  });
  for_blocks(n, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = begin; i < end; ++i) pdw[i] += pdy[r * n + i] * (px[r * n + i] * pr[r]);
  });
  return g;
}

GatedNorm gated_rmsnorm_forward(const Tensor& o, const Tensor& z, const Tensor& w, double eps, int threads) {
  if (z.numel() != o.numel())
    throw Error("gated_rmsnorm: gate " + shape_str(z.shape()) + " does not match " + shape_str(o.shape()));
  RmsNorm n = rmsnorm_forward(o, w, eps, threads);
  double* py = n.y.data<double>();
  const double* pz = z.data<double>();
  for_blocks(o.numel(), threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) py[i] *= silu(pz[i]);
  });
  return {std::move(n.y), std::move(n.rstd)};
}

// Rows in parallel, each with its dw terms; then dw, column by column, the sum of the terms over the rows
// in order.
GatedNormGrads gated_rmsnorm_backward(const Tensor& o, const Tensor& z, const Tensor& w, const Tensor& rstd,
                                      const Tensor& dy, Tensor* dw_terms, int threads) {
  const std::int64_t rows = rows_of(o, w, "gated_rmsnorm_backward"), n = w.numel();
  Tensor terms = Tensor::uninitialized(DType::F64, o.shape());
  GatedNormGrads g{Tensor::uninitialized(DType::F64, o.shape()), Tensor::uninitialized(DType::F64, z.shape()),
                   Tensor(DType::F64, w.shape())};
  const double *po = o.data<double>(), *pz = z.data<double>(), *pw = w.data<double>(), *pr = rstd.data<double>(),
               *pdy = dy.data<double>();
  double *pdz = g.dz.data<double>(), *pdo = g.d_o.data<double>(), *pt = terms.data<double>(),
         *pdw = g.dw.data<double>();
  for_blocks(rows, threads, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> d_normed(static_cast<std::size_t>(n));  // gradient of rmsnorm(o) * w
    for (std::int64_t r = begin; r < end; ++r) {
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t j = r * n + i;
        const Silu gate = silu_with_grad(pz[j]);
        pdz[j] = pdy[j] * po[j] * pr[r] * pw[i] * gate.grad;
        d_normed[static_cast<std::size_t>(i)] = pdy[j] * gate.value;
      }
      row_dx(po + r * n, pw, pr[r], d_normed.data(), n, pdo + r * n);
      for (std::int64_t i = 0; i < n; ++i)
        pt[r * n + i] = d_normed[static_cast<std::size_t>(i)] * (po[r * n + i] * pr[r]);
    }
  });
  for_blocks(n, threads, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = begin; i < end; ++i) pdw[i] += pt[r * n + i];
  });
  if (dw_terms) *dw_terms = std::move(terms);
  return g;
}

}  // namespace gdnv::ref
