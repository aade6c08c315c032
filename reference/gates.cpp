#include "reference/gates.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "reference/norms.hpp"

namespace gdnv::ref {

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }

namespace {

std::int64_t heads_of(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias) {
  const std::int64_t Hv = A_log.numel();
  if (a.shape() != b.shape() || a.rank() == 0 || a.dim(-1) != Hv || dt_bias.numel() != Hv)
    throw Error("gates: a " + shape_str(a.shape()) + ", b " + shape_str(b.shape()) + ", A_log " +
                shape_str(A_log.shape()) + ", dt_bias " + shape_str(dt_bias.shape()) + " do not agree");
  return Hv;
}

}  // namespace

Gates gates_forward(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias) {
  const std::int64_t Hv = heads_of(a, b, A_log, dt_bias);
  Gates out{Tensor(DType::F64, a.shape()), Tensor(DType::F64, b.shape())};
  const double *pa = a.data<double>(), *pb = b.data<double>(), *pA = A_log.data<double>(),
               *pdt = dt_bias.data<double>();
  double *pg = out.g.data<double>(), *pbeta = out.beta.data<double>();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t h = i % Hv;
    pg[i] = -std::exp(pA[h]) * softplus(pa[i] + pdt[h]);
    pbeta[i] = sigmoid(pb[i]);
  }
  return out;
}

GateGrads gates_backward(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias, const Tensor& dg,
                         const Tensor& dbeta) {
  const std::int64_t Hv = heads_of(a, b, A_log, dt_bias);
  GateGrads g{Tensor(DType::F64, a.shape()), Tensor(DType::F64, b.shape()), Tensor(DType::F64, A_log.shape()),
              Tensor(DType::F64, dt_bias.shape())};
  const double *pa = a.data<double>(), *pb = b.data<double>(), *pA = A_log.data<double>(),
               *pdt = dt_bias.data<double>(), *pdg = dg.data<double>(), *pdbeta = dbeta.data<double>();
  double *pda = g.da.data<double>(), *pdb = g.db.data<double>(), *pdA = g.dA_log.data<double>(),
         *pddt = g.ddt_bias.data<double>();
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    const std::int64_t h = i % Hv;
    const double A = std::exp(pA[h]), x = pa[i] + pdt[h];
    pdA[h] += pdg[i] * -A * softplus(x);  // dg/dA_log = g
    pda[i] = pdg[i] * -A * sigmoid(x);    // softplus' = sigmoid
    pddt[h] += pda[i];
    const double s = sigmoid(pb[i]);
    pdb[i] = pdbeta[i] * s * (1.0 - s);
  }
  return g;
}

}  // namespace gdnv::ref
