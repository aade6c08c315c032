#pragma once
// The optional in-kernel L2 norm of q and k (docs/DESIGN.md §1.1): x_hat = x / sqrt(sum x^2 + eps).
#include <Eigen/Dense>

#include "core/eigen.hpp"

namespace gdnv::ref {

constexpr double kL2NormEps = 1e-6;

// Normalises each row of x [n, D] in place.
void l2norm_rows(Eigen::Ref<RowMatrix> x);

// Turns the gradient w.r.t. x_hat into the gradient w.r.t. x, in place over the last dim:
//   dx = (dx_hat - x_hat (x_hat . dx_hat)) / sqrt(sum x^2 + eps).
// x and dx are F64 tensors of one shape [..., D]. Linear in dx_hat, so gradients summed over the
// value heads of a GVA group may go through it once.
void l2norm_backward(const Tensor& x, Tensor& dx);

}  // namespace gdnv::ref
