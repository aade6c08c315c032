#include "reference/l2norm.hpp"

#include <cmath>

namespace gdnv::ref {

void l2norm_rows(Eigen::Ref<RowMatrix> x) {
  for (Eigen::Index i = 0; i < x.rows(); ++i) x.row(i) /= std::sqrt(x.row(i).squaredNorm() + kL2NormEps);
}

void l2norm_backward(const Tensor& x, Tensor& dx) {
  const std::int64_t D = x.dim(-1), rows = D ? x.numel() / D : 0;
  const ConstMatrixMap X = as_matrix(x, rows, D);
  MatrixMap dX = as_matrix(dx, rows, D);
  for (std::int64_t i = 0; i < rows; ++i) {
    const double r = 1.0 / std::sqrt(X.row(i).squaredNorm() + kL2NormEps);
    const Eigen::RowVectorXd x_hat = r * X.row(i);
    dX.row(i) = r * (dX.row(i) - x_hat * x_hat.dot(dX.row(i)));
  }
}

}  // namespace gdnv::ref
