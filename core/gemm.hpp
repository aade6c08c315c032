#pragma once
// The oracle's fp64 matrix product, with one defined order of arithmetic: every C(i, j) is the chain
//   acc = C(i, j) or 0;  for k = 0 .. K-1:  acc = fma(A(i, k), B(k, j), acc)
// rounded once per step. Blocking, packing, vector width and thread count never change that chain, so
// the result has the same bits on any machine: AVX-512 or AVX2 + FMA where the CPU has it (chosen at
// run time), std::fma elsewhere. Eigen's own product splits K by the cache sizes it detects, which it does not.
#include <cstdint>
#include <string>

#include <Eigen/Dense>

namespace gdnv {

// A strided matrix: element (i, j) at data[i * row_stride + j * col_stride].
template <class T>
struct MatrixView {
  T* data;
  std::int64_t rows, cols, row_stride, col_stride;

  T& operator()(std::int64_t i, std::int64_t j) const { return data[i * row_stride + j * col_stride]; }
};

// Best: the widest the CPU has. The others name one kernel, for tests (an error where the CPU lacks it).
enum class GemmKernel { Best, Avx512, Avx2, Portable };
bool gemm_kernel_available(GemmKernel kernel);
// The kernel `kernel` resolves to on this CPU and its tile, e.g. "AVX2+FMA 6x8" (for the benches' reports).
std::string gemm_kernel_name(GemmKernel kernel = GemmKernel::Best);

// A lower (upper) triangular A has zeros above (below) its diagonal. Terms of the chain that only
// such zeros feed are skipped: a product with finite B has the same bits, for about half the work.
enum class Triangle { Full, Lower, Upper };

struct GemmOptions {
  bool accumulate = false;  // C += A B instead of C = A B
  int threads = 1;          // blocks of C's rows run in parallel (0: one thread per core)
  Triangle a = Triangle::Full;
  GemmKernel kernel = GemmKernel::Best;
};

// C = A B (or C += A B). A [M, K], B [K, N], C [M, N]; C must not overlap A or B.
void gemm(MatrixView<const double> A, MatrixView<const double> B, MatrixView<double> C, GemmOptions options = {});

// Views of Eigen matrices, maps, blocks and transposes of them.
template <class D>
MatrixView<const double> view(const Eigen::DenseBase<D>& m) {
  return {m.derived().data(), m.rows(), m.cols(), m.derived().rowStride(), m.derived().colStride()};
}
template <class D>
MatrixView<double> mutable_view(Eigen::DenseBase<D>& m) {
  return {m.derived().data(), m.rows(), m.cols(), m.derived().rowStride(), m.derived().colStride()};
}

// The product A B as a new row-major matrix, and C (+)= A B into an existing one.
template <class DA, class DB>
Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> product(const Eigen::DenseBase<DA>& A,
                                                                               const Eigen::DenseBase<DB>& B,
                                                                               GemmOptions options = {}) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> C(A.rows(), B.cols());
  gemm(view(A), view(B), mutable_view(C), options);
  return C;
}
template <class DA, class DB, class DC>
void product_into(const Eigen::DenseBase<DA>& A, const Eigen::DenseBase<DB>& B, Eigen::DenseBase<DC>&& C,
                  GemmOptions options = {}) {
  gemm(view(A), view(B), mutable_view(C), options);
}
template <class DA, class DB, class DC>
void product_into(const Eigen::DenseBase<DA>& A, const Eigen::DenseBase<DB>& B, Eigen::DenseBase<DC>& C,
                  GemmOptions options = {}) {
  gemm(view(A), view(B), mutable_view(C), options);
}

}  // namespace gdnv
