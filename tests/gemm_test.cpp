// The oracle's GEMM against its own definition: each C(i, j) is the fma chain over k in order, so both
// kernels, on any number of threads, must reproduce a naive triple loop bit for bit, across every
// blocking boundary.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/eigen.hpp"
#include "core/error.hpp"
#include "core/gemm.hpp"
#include "core/gemm_subnormal.hpp"
#include "core/rng.hpp"

namespace gdnv {
namespace {

RowMatrix random_matrix(std::int64_t rows, std::int64_t cols, const char* stream) {
  RowMatrix m(rows, cols);
  const Rng rng(7, stream);
  for (std::int64_t i = 0; i < m.size(); ++i) m.data()[i] = rng.normal(static_cast<std::uint64_t>(i));
  return m;
}

// The definition, written out.
RowMatrix fma_chain(const RowMatrix& A, const RowMatrix& B, const RowMatrix* C0) {
  RowMatrix C(A.rows(), B.cols());
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < B.cols(); ++j) {
      double acc = C0 ? (*C0)(i, j) : 0.0;
      for (Eigen::Index k = 0; k < A.cols(); ++k) acc = std::fma(A(i, k), B(k, j), acc);
      C(i, j) = acc;
    }
  return C;
}

bool same_bits(const RowMatrix& a, const RowMatrix& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), sizeof(double) * static_cast<std::size_t>(a.size())) == 0;
}

struct Dims {
  std::int64_t M, K, N;
};

// Edges of the tiles (6 x 8, 14 x 16), of the K blocks (256 deep, 384 for the portable kernel), of B's
// blocks (at most 512 columns, fewer on a small L2) and of A's blocks of about 1024 rows (two at 1540).
const Dims kDims[] = {{1, 1, 1},     {5, 3, 7},      {6, 8, 8},      {7, 9, 9},     {14, 16, 16},
                      {15, 17, 17},  {13, 383, 17},  {97, 385, 9},   {113, 40, 33}, {12, 769, 31},
                      {3, 40, 1025}, {191, 64, 130}, {64, 128, 128}, {300, 40, 20}, {1540, 257, 9}};

const char* name(GemmKernel kernel) {
  switch (kernel) {
    case GemmKernel::Best:
      return "Best";
    case GemmKernel::Avx512:
      return "Avx512";
    case GemmKernel::Avx2:
      return "Avx2";
    case GemmKernel::Portable:
      return "Portable";
  }
  return "?";
}

class GemmKernels : public testing::TestWithParam<GemmKernel> {
 protected:
  void SetUp() override {
    if (!gemm_kernel_available(GetParam())) GTEST_SKIP() << "this CPU lacks the " << name(GetParam()) << " kernel";
  }
};

TEST_P(GemmKernels, FollowTheFmaChainBitForBitOnAnyThreadCount) {
  for (const Dims& d : kDims) {
    const RowMatrix A = random_matrix(d.M, d.K, "A"), B = random_matrix(d.K, d.N, "B");
    const RowMatrix want = fma_chain(A, B, nullptr);
    for (const int threads : {1, 3}) {
      RowMatrix C = RowMatrix::Constant(d.M, d.N, std::nan(""));  // a plain product ignores what C held
      gemm(view(A), view(B), mutable_view(C), {.threads = threads, .kernel = GetParam()});
      EXPECT_TRUE(same_bits(C, want)) << d.M << "x" << d.K << "x" << d.N << " threads " << threads;
    }
  }
}

TEST_P(GemmKernels, ContinueTheChainFromCAndSkipATrianglesZeros) {
  for (const Dims& d : kDims) {
    const RowMatrix B = random_matrix(d.K, d.N, "B"), C0 = random_matrix(d.M, d.N, "C");
    for (const Triangle t : {Triangle::Full, Triangle::Lower, Triangle::Upper}) {
      RowMatrix A = random_matrix(d.M, d.K, "A");
      for (Eigen::Index i = 0; i < A.rows(); ++i)
        for (Eigen::Index k = 0; k < A.cols(); ++k)
          if (t == Triangle::Lower ? k > i : t == Triangle::Upper && k < i) A(i, k) = 0;
      RowMatrix C = C0;
      gemm(view(A), view(B), mutable_view(C), {.accumulate = true, .threads = 2, .a = t, .kernel = GetParam()});
      EXPECT_TRUE(same_bits(C, fma_chain(A, B, &C0)))
          << d.M << "x" << d.K << "x" << d.N << " triangle " << static_cast<int>(t);
    }
  }
}

// Values whose chains meet the subnormal range the way the chunked core's decays do, and worse: binades
// from 2^-1090 (below the smallest subnormal, so 0) up to 2^8, exact zeros, rows of A built to cancel
// a neighbour's chain exactly or to within a few ulps, and for an accumulating product a C of subnormals.
RowMatrix wide_range_matrix(std::int64_t rows, std::int64_t cols, const char* stream) {
  RowMatrix m(rows, cols);
  const Rng rng(11, stream);
  for (std::int64_t i = 0; i < m.size(); ++i) {
    const auto u = static_cast<std::uint64_t>(i) * 3;
    const double binade = std::floor(rng.uniform(u, -1090, 9));
    m.data()[i] = rng.uniform(u + 1) < 0.1 ? 0.0 : std::ldexp(rng.uniform(u + 2, -2, 2), static_cast<int>(binade));
  }
  return m;
}

// e^{-30 |i - k|}: the decay matrices' profile, subnormal a band away from the diagonal.
RowMatrix decay_like(std::int64_t rows, std::int64_t cols, const char* stream) {
  RowMatrix m = random_matrix(rows, cols, stream);
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index k = 0; k < m.cols(); ++k) m(i, k) *= std::exp(-30.0 * std::abs(static_cast<double>(i - k)));
  return m;
}

TEST_P(GemmKernels, KeepTheChainsBitsThroughSubnormalsZerosAndCancellation) {
  for (const Dims& d : {Dims{64, 128, 128}, Dims{29, 385, 33}, Dims{14, 16, 16}, Dims{113, 64, 47}}) {
    for (int form = 0; form < 3; ++form) {
      RowMatrix A = form == 0 ? wide_range_matrix(d.M, d.K, "A") : decay_like(d.M, d.K, "A");
      // Form 1's B reaches 2^708: beside A's subnormals, too large for the exact path's scaled range.
      const RowMatrix B = form == 2   ? decay_like(d.K, d.N, "B")
                          : form == 1 ? RowMatrix(wide_range_matrix(d.K, d.N, "B") * 0x1p700)
                                      : wide_range_matrix(d.K, d.N, "B");
      for (Eigen::Index i = 1; i < A.rows(); i += 5) A.row(i) = -A.row(i - 1);                  // cancels exactly
      for (Eigen::Index i = 3; i < A.rows(); i += 7) A.row(i) = -A.row(i - 1) * (1 + 0x1p-52);  // cancels to a few ulps
      const RowMatrix C0 = wide_range_matrix(d.M, d.N, "C") * 0x1p-60;
      RowMatrix C = C0;
      gemm(view(A), view(B), mutable_view(C), {.accumulate = true, .threads = 2, .kernel = GetParam()});
      EXPECT_TRUE(same_bits(C, fma_chain(A, B, &C0))) << d.M << "x" << d.K << "x" << d.N << " form " << form;
      for (const Triangle t : {Triangle::Full, Triangle::Lower}) {
        RowMatrix At = A;
        if (t == Triangle::Lower) At = At.triangularView<Eigen::Lower>();
        RowMatrix P(d.M, d.N);
        gemm(view(At), view(B), mutable_view(P), {.a = t, .kernel = GetParam()});
        EXPECT_TRUE(same_bits(P, fma_chain(At, B, nullptr)))
            << d.M << "x" << d.K << "x" << d.N << " form " << form << " triangle " << static_cast<int>(t);
      }
    }
  }
}

// fma(0, b, -0) is +0 for b >= +0 and -0 for b < 0: the zeros a triangular A's panels skip decide the
// sign of a -0 chain. B's column j is positive only in the rows the other triangle's panels skip (the
// first four for an upper A, the last four for a lower one), so every kernel must settle those signs as
// the whole chain does, whatever its tile height.
TEST_P(GemmKernels, SettleTheSignedZerosATrianglesSkippedZerosWouldGive) {
  const std::int64_t M = 40, K = 40, N = 24;
  const RowMatrix A = RowMatrix::Zero(M, K), C0 = RowMatrix::Constant(M, N, -0.0);
  for (const Triangle t : {Triangle::Lower, Triangle::Upper}) {
    RowMatrix B = RowMatrix::Constant(K, N, -1.0);
    (t == Triangle::Upper ? B.topRows(4) : B.bottomRows(4)).setOnes();
    RowMatrix C = C0;
    gemm(view(A), view(B), mutable_view(C), {.accumulate = true, .a = t, .kernel = GetParam()});
    const RowMatrix want = fma_chain(A, B, &C0);
    EXPECT_TRUE(same_bits(C, want)) << (t == Triangle::Lower ? "lower" : "upper");
    EXPECT_FALSE(same_bits(want, C0)) << "the test lost its point: no chain's sign changed";
  }
}

// A chain that cancels in one step from a normal value of ~2^-968 to a subnormal: at the larger scale
// acc' + M with |acc'| >> M is inexact, so the exact path rounds the step from fl(a' b' + acc'), or declines
// the tile where that lands on a midpoint of the subnormal grid with an inexact remainder.
TEST_P(GemmKernels, KeepTheBitsOfAChainThatCancelsFromNormalIntoSubnormal) {
  const Rng rng(13, "cancel");
  int cases = 0;
  for (std::uint64_t i = 0; i < 2000; ++i) {
    const double acc = std::ldexp(1 + rng.uniform(3 * i), -968), b2 = 1 + std::ldexp(rng.uniform(3 * i + 1), -20);
    const double a2 = -acc / b2;
    if (std::fpclassify(std::fma(a2, b2, acc)) != FP_SUBNORMAL) continue;
    ++cases;
    RowMatrix A(1, 2), B = RowMatrix::Constant(2, 16, b2);
    A << acc, a2;
    B.row(0).setOnes();
    RowMatrix C(1, 16);
    gemm(view(A), view(B), mutable_view(C), {.kernel = GetParam()});
    EXPECT_TRUE(same_bits(C, fma_chain(A, B, nullptr))) << std::hexfloat << acc << " " << a2 << " " << b2;
  }
  EXPECT_GT(cases, 20);
}

// Chains that cross from the lowest normal binade, [DBL_MIN, 2 DBL_MIN), into the subnormals in one step,
// as the chunked core's decayed rows do: with an odd acc the exact path's acc' + M is inexact, so the step
// is rounded from fl(a b + acc). Exact halfway results (ties to even), and results a hair off halfway,
// which fl(a b + acc) rounds onto the midpoint, so only the remainder's sign decides.
TEST_P(GemmKernels, KeepTheBitsOfAChainCrossingFromTheLowestBinadeIntoSubnormal) {
  const Rng rng(17, "crossing");
  for (std::uint64_t i = 0; i < 600; ++i) {
    const auto m = static_cast<std::int64_t>(rng.uniform(4 * i, 0x1p52, 0x1p53)) | 1;  // acc = m 2^-1074, odd
    // m - k - 1/2 < 2^52: the result is subnormal; 2 k + 1 < 2^53: a2 is exact.
    const auto k = static_cast<std::int64_t>(rng.uniform(4 * i + 1, static_cast<double>(m) - 0x1p52, 0x1p52 - 1));
    const double acc = std::ldexp(static_cast<double>(m), -1074);
    const double a2 = -std::ldexp(static_cast<double>(2 * k + 1), -1069);  // a2 b2 = -(k + 1/2) 2^-1074 ...
    const double b2 = i % 3 == 0 ? 0x1p-6 : i % 3 == 1 ? 0x1p-6 * (1 + 0x1p-52) : 0x1p-6 * (1 - 0x1p-53);
    RowMatrix A(1, 2), B = RowMatrix::Constant(2, 16, b2);  // ... times 1, 1 + 2^-52 or 1 - 2^-53
    A << acc, a2;
    B.row(0).setOnes();
    RowMatrix C(1, 16);
    gemm(view(A), view(B), mutable_view(C), {.kernel = GetParam()});
    ASSERT_TRUE(same_bits(C, fma_chain(A, B, nullptr))) << std::hexfloat << acc << " " << a2 << " " << b2;
    ASSERT_EQ(std::fpclassify(C(0, 0)), FP_SUBNORMAL);
  }
}

// The same crossings straight through the exact path (gemm_detail::subnormal_tile_avx512), whose
// decline the product above would hide behind the plain kernel: it takes each tile, on panels scaled by
// 2^500 each, and gives the chain's bits.
TEST(Gemm, ExactPathTakesAChainCrossingFromTheLowestBinadeIntoSubnormal) {
  if (!gemm_kernel_available(GemmKernel::Avx512)) GTEST_SKIP() << "this CPU lacks the AVX-512 kernel";
  const Rng rng(19, "crossing tile");
  for (std::uint64_t i = 0; i < 300; ++i) {
    const auto m = static_cast<std::int64_t>(rng.uniform(4 * i, 0x1p52, 0x1p53)) | 1;
    const auto k = static_cast<std::int64_t>(rng.uniform(4 * i + 1, static_cast<double>(m) - 0x1p52, 0x1p52 - 1));
    const double acc = std::ldexp(static_cast<double>(m), -1074);
    const double a2 = -std::ldexp(static_cast<double>(2 * k + 1), -1069);
    const double b2 = i % 3 == 0 ? 0x1p-6 : i % 3 == 1 ? 0x1p-6 * (1 + 0x1p-52) : 0x1p-6 * (1 - 0x1p-53);
    double a[2 * 14] = {}, b[2 * 16], tile[14 * 16];
    a[0] = std::ldexp(acc, 500);  // step 0, row 0: the chain's first term, acc x 1
    a[14] = std::ldexp(a2, 500);  // step 1, row 0
    for (int j = 0; j < 16; ++j) {
      b[j] = 0x1p500;
      b[16 + j] = std::ldexp(b2, 500);
    }
    ASSERT_TRUE(gemm_detail::subnormal_tile_avx512(2, a, b, tile, 16, true, 1000)) << "declined, case " << i;
    const double want = std::fma(a2, b2, std::fma(acc, 1.0, 0.0));
    ASSERT_EQ(tile[0], want) << std::hexfloat << acc << " " << a2 << " " << b2;
    ASSERT_EQ(std::fpclassify(tile[0]), FP_SUBNORMAL);
  }
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmKernels,
                         testing::Values(GemmKernel::Best, GemmKernel::Avx512, GemmKernel::Avx2, GemmKernel::Portable),
                         [](const auto& param_info) { return std::string(name(param_info.param)); });

// The benches print the kernel Best resolves to: the widest the CPU has, with its tile.
TEST(Gemm, BestKernelsNameIsTheWidestTheCpuHas) {
  EXPECT_EQ(gemm_kernel_name(GemmKernel::Portable), "portable std::fma 6x8");
  if (gemm_kernel_available(GemmKernel::Avx2)) {
    EXPECT_EQ(gemm_kernel_name(GemmKernel::Avx2), "AVX2+FMA 6x8");
  }
  const GemmKernel widest = gemm_kernel_available(GemmKernel::Avx512) ? GemmKernel::Avx512
                            : gemm_kernel_available(GemmKernel::Avx2) ? GemmKernel::Avx2
                                                                      : GemmKernel::Portable;
  EXPECT_EQ(gemm_kernel_name(), gemm_kernel_name(widest));
}

TEST(Gemm, NamingAKernelTheCpuLacksIsAnError) {
  if (gemm_kernel_available(GemmKernel::Avx512)) GTEST_SKIP() << "this CPU has every kernel";
  const RowMatrix A(2, 2), B(2, 2);
  RowMatrix C(2, 2);
  try {
    gemm(view(A), view(B), mutable_view(C), {.kernel = GemmKernel::Avx512});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "gemm: this CPU lacks the instructions of the kernel asked for");
  }
}

TEST(Gemm, ReadsTransposesAndBlocksThroughTheirStrides) {
  const RowMatrix X = random_matrix(300, 70, "X"), Y = random_matrix(300, 50, "Y");
  // X^T Y: both operands transposed views of row-major storage.
  EXPECT_TRUE(same_bits(product(X.transpose(), Y), fma_chain(X.transpose(), Y, nullptr)));
  // A block of rows and columns written into a block of a larger matrix; the rest is untouched.
  RowMatrix big = RowMatrix::Zero(20, 30);
  product_into(X.block(3, 5, 10, 40), Y.block(7, 2, 40, 12), big.block(4, 6, 10, 12));
  EXPECT_TRUE(same_bits(big.block(4, 6, 10, 12), fma_chain(X.block(3, 5, 10, 40), Y.block(7, 2, 40, 12), nullptr)));
  big.block(4, 6, 10, 12).setZero();
  EXPECT_TRUE((big.array() == 0.0).all());
}

// Several threads split C into blocks of rows and columns (up to four per thread, multiples of the tile;
// a wide B split by columns, 7 x 1025, a tall A by rows, 1500 x 20, both, 390 x 1030; products under
// 2^21 multiply-adds whole, 289 x 17): every block edge, a triangular A whose diagonal crosses blocks,
// accumulation, and the layer's x W^T (B a transposed view), against the chain written out, up to a
// product larger than one cache block each way.
TEST(Gemm, BlocksOnAnyThreadCountKeepEveryChainOnAwkwardShapes) {
  const Dims dims[] = {{289, 257, 17}, {145, 513, 9}, {7, 300, 1025}, {1500, 200, 20}, {390, 260, 1030}};
  for (const Dims& d : dims) {
    const RowMatrix B = random_matrix(d.K, d.N, "B"), C0 = random_matrix(d.M, d.N, "C");
    const RowMatrix Wt = random_matrix(d.N, d.K, "W");  // B = W^T, read through its strides
    for (const Triangle t : {Triangle::Full, Triangle::Lower, Triangle::Upper}) {
      RowMatrix A = random_matrix(d.M, d.K, "A");
      for (Eigen::Index i = 0; i < A.rows(); ++i)
        for (Eigen::Index k = 0; k < A.cols(); ++k)
          if (t == Triangle::Lower ? k > i : t == Triangle::Upper && k < i) A(i, k) = 0;
      const RowMatrix want = fma_chain(A, B, &C0), want_t = fma_chain(A, Wt.transpose(), nullptr);
      for (const int threads : {2, 3, 5}) {
        const std::string what = std::to_string(d.M) + "x" + std::to_string(d.K) + "x" + std::to_string(d.N) +
                                 " triangle " + std::to_string(static_cast<int>(t)) + " threads " +
                                 std::to_string(threads);
        RowMatrix C = C0;
        gemm(view(A), view(B), mutable_view(C), {.accumulate = true, .threads = threads, .a = t});
        EXPECT_TRUE(same_bits(C, want)) << what;
        EXPECT_TRUE(same_bits(product(A, Wt.transpose(), {.threads = threads, .a = t}), want_t)) << what << " B^T";
      }
    }
  }
}

TEST(Gemm, AgreesWithEigensProductToRounding) {
  const RowMatrix A = random_matrix(97, 513, "A"), B = random_matrix(513, 33, "B");
  const RowMatrix eigen = A * B;
  // Two sums of 513 products in different orders: each is within ~K eps |A||B| of the exact value.
  const double bound = 513 * 2.3e-16 * (A.cwiseAbs() * B.cwiseAbs()).maxCoeff();
  EXPECT_LE((product(A, B) - eigen).cwiseAbs().maxCoeff(), bound);
}

TEST(Gemm, EmptyDepthGivesZeroOrLeavesC) {
  const RowMatrix A(4, 0), B(0, 3);
  RowMatrix C = RowMatrix::Constant(4, 3, 2.0);
  gemm(view(A), view(B), mutable_view(C), {.accumulate = true});
  EXPECT_TRUE((C.array() == 2.0).all());
  gemm(view(A), view(B), mutable_view(C));
  EXPECT_TRUE((C.array() == 0.0).all());
}

// The subnormal path's panel scan (gemm_detail::panel_range) against the plain loop over magnitudes:
// zeros of both signs skipped for the smallest, subnormals counted, every length's vector body and tail.
TEST(Gemm, PanelRangeIsThePlainScansRange) {
  const double values[] = {0.0, -0.0, 5e-324, -3e-310, 2.5e-300, -1.0, 7.0, -DBL_MAX, 0x1p-1022, 1e300};
  for (const std::int64_t n : {0, 1, 7, 8, 9, 16, 23, 64}) {
    for (const double bad : {0.0, HUGE_VAL, -HUGE_VAL, std::nan("")}) {
      std::vector<double> p(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i)
        p[i] = values[hash64(3, 0, static_cast<std::uint64_t>(i)) % std::size(values)];
      if (n > 0 && bad != 0.0) p[static_cast<std::size_t>(n * 5 / 7)] = bad;
      double lo = INFINITY, hi = 0;
      bool finite = true;
      for (const double v : p) {
        finite &= std::isfinite(v);
        if (std::isfinite(v)) hi = std::max(hi, std::fabs(v));
        if (v != 0) lo = std::min(lo, std::fabs(v));
      }
      const gemm_detail::PanelRange r = gemm_detail::panel_range(p.data(), n);
      SCOPED_TRACE("n " + std::to_string(n) + ", planted " + std::to_string(bad));
      EXPECT_EQ(r.finite, finite);
      if (!finite) continue;
      EXPECT_EQ(r.min_nonzero, lo);
      EXPECT_EQ(r.max, hi);
    }
  }
}

TEST(Gemm, NonconformingShapesAreRejected) {
  const RowMatrix A(4, 5), B(6, 3);
  RowMatrix C(4, 3);
  try {
    gemm(view(A), view(B), mutable_view(C));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "gemm: C [4, 3] = A [4, 5] B [6, 3] does not conform");
  }
}

}  // namespace
}  // namespace gdnv
