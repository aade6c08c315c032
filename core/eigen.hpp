#pragma once
// Zero-copy Eigen views of row-major tensors, for the oracle.
#include <Eigen/Dense>

#include "core/tensor.hpp"

namespace gdnv {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;

// The F64 tensor `t` viewed as a rows x cols row-major matrix (rows * cols == numel).
inline MatrixMap as_matrix(Tensor& t, Eigen::Index rows, Eigen::Index cols) {
  if (rows * cols != t.numel())
    throw Error("as_matrix: " + std::to_string(rows) + "x" + std::to_string(cols) + " view of " + shape_str(t.shape()));
  return MatrixMap(t.data<double>(), rows, cols);
}
inline ConstMatrixMap as_matrix(const Tensor& t, Eigen::Index rows, Eigen::Index cols) {
  if (rows * cols != t.numel())
    throw Error("as_matrix: " + std::to_string(rows) + "x" + std::to_string(cols) + " view of " + shape_str(t.shape()));
  return ConstMatrixMap(t.data<double>(), rows, cols);
}

}  // namespace gdnv
