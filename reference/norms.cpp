#include "reference/norms.hpp"

#include <cmath>

#include "core/error.hpp"

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

// With nrm = x * rstd and y = nrm * w: dw += dy * nrm, dx = rstd * (dy*w - nrm * mean(dy*w*nrm)).
void row_backward(const double* x, const double* w, double rstd, const double* dy, std::int64_t n, double* dx,
                  double* dw) {
  double dot = 0;
  for (std::int64_t i = 0; i < n; ++i) dot += dy[i] * w[i] * x[i] * rstd;
  const double mean = dot / static_cast<double>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double nrm = x[i] * rstd;
    dw[i] += dy[i] * nrm;
    dx[i] = rstd * (dy[i] * w[i] - nrm * mean);
  }
}

}  // namespace

RmsNorm rmsnorm_forward(const Tensor& x, const Tensor& w, double eps) {
  const std::int64_t rows = rows_of(x, w, "rmsnorm"), n = w.numel();
  RmsNorm out{Tensor(DType::F64, x.shape()), Tensor(DType::F64, {rows})};
  const double *px = x.data<double>(), *pw = w.data<double>();
  double *py = out.y.data<double>(), *pr = out.rstd.data<double>();
  for (std::int64_t r = 0; r < rows; ++r) {
    pr[r] = row_rstd(px + r * n, n, eps);
    for (std::int64_t i = 0; i < n; ++i) py[r * n + i] = px[r * n + i] * pr[r] * pw[i];
  }
  return out;
}

RmsNormGrads rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy) {
  const std::int64_t rows = rows_of(x, w, "rmsnorm_backward"), n = w.numel();
  RmsNormGrads g{Tensor(DType::F64, x.shape()), Tensor(DType::F64, w.shape())};
  const double *px = x.data<double>(), *pw = w.data<double>(), *pr = rstd.data<double>(), *pdy = dy.data<double>();
  for (std::int64_t r = 0; r < rows; ++r)
    row_backward(px + r * n, pw, pr[r], pdy + r * n, n, g.dx.data<double>() + r * n, g.dw.data<double>());
  return g;
}

GatedNorm gated_rmsnorm_forward(const Tensor& o, const Tensor& z, const Tensor& w, double eps) {
  if (z.numel() != o.numel())
    throw Error("gated_rmsnorm: gate " + shape_str(z.shape()) + " does not match " + shape_str(o.shape()));
  RmsNorm n = rmsnorm_forward(o, w, eps);
  double* py = n.y.data<double>();
  const double* pz = z.data<double>();
  for (std::int64_t i = 0; i < o.numel(); ++i) py[i] *= silu(pz[i]);
  return {std::move(n.y), std::move(n.rstd)};
}

GatedNormGrads gated_rmsnorm_backward(const Tensor& o, const Tensor& z, const Tensor& w, const Tensor& rstd,
                                      const Tensor& dy, Tensor* dw_terms) {
  const std::int64_t rows = rows_of(o, w, "gated_rmsnorm_backward"), n = w.numel();
  if (dw_terms) *dw_terms = Tensor(DType::F64, o.shape());
  GatedNormGrads g{Tensor(DType::F64, o.shape()), Tensor(DType::F64, z.shape()), Tensor(DType::F64, w.shape())};
  const double *po = o.data<double>(), *pz = z.data<double>(), *pw = w.data<double>(), *pr = rstd.data<double>(),
               *pdy = dy.data<double>();
  double* pdz = g.dz.data<double>();
  std::vector<double> d_normed(static_cast<std::size_t>(n));  // gradient of rmsnorm(o) * w
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t j = r * n + i;
      const Silu gate = silu_with_grad(pz[j]);
      pdz[j] = pdy[j] * po[j] * pr[r] * pw[i] * gate.grad;
      d_normed[static_cast<std::size_t>(i)] = pdy[j] * gate.value;
    }
    row_backward(po + r * n, pw, pr[r], d_normed.data(), n, g.d_o.data<double>() + r * n, g.dw.data<double>());
    for (std::int64_t i = 0; dw_terms && i < n; ++i)  // row_backward's dw terms, with its nrm
      dw_terms->data<double>()[r * n + i] = d_normed[static_cast<std::size_t>(i)] * (po[r * n + i] * pr[r]);
  }
  return g;
}

}  // namespace gdnv::ref
