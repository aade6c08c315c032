// Projection GEMMs y = x w^T and their backward, with Eigen's GEMM in the compute type.
#include <Eigen/Dense>

#include "cpu/kernels.hpp"

namespace gdnv::cpu {
namespace {

template <class C>
using Matrix = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class C>
Eigen::Map<const Matrix<C>> view(const Array<C>& a, std::int64_t rows, std::int64_t cols) {
  return Eigen::Map<const Matrix<C>>(a.data(), rows, cols);
}

template <class C>
Eigen::Map<Matrix<C>> view(Array<C>& a, std::int64_t rows, std::int64_t cols) {
  return Eigen::Map<Matrix<C>>(a.data(), rows, cols);
}

}  // namespace

template <class C>
Array<C> Linear<C>::forward(const Array<C>& x, const Array<C>& w, std::int64_t in, std::int64_t out) {
  const auto N = static_cast<std::int64_t>(x.size()) / in;
  Array<C> y(static_cast<std::size_t>(N * out));
  view(y, N, out).noalias() = view(x, N, in) * view(w, out, in).transpose();
  return y;
}

// For y = x w^T: dx = dy w, dw = dy^T x.
template <class C>
typename Linear<C>::Grads Linear<C>::backward(const Array<C>& dy, const Array<C>& x, const Array<C>& w, std::int64_t in,
                                              std::int64_t out) {
  const auto N = static_cast<std::int64_t>(x.size()) / in;
  Grads g{Array<C>(x.size()), Array<C>(w.size())};
  view(g.dx, N, in).noalias() = view(dy, N, out) * view(w, out, in);
  view(g.dw, out, in).noalias() = view(dy, N, out).transpose() * view(x, N, in);
  return g;
}

template struct Linear<float>;
template struct Linear<double>;

}  // namespace gdnv::cpu
