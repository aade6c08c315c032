// The oracle's fixed-order GEMM (core/gemm) beside Eigen's product, at the oracle's two typical shapes:
// a layer projection and one chunk of the chunked gated delta rule. One thread each. Then against MKL,
// torch's CPU GEMM, in the same process (BM_GemmAgainstMkl).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "core/eigen.hpp"
#include "core/gemm.hpp"

namespace gdnv {
namespace {

struct Operands {
  RowMatrix A, B, C;
  Operands(std::int64_t M, std::int64_t K, std::int64_t N)
      : A(RowMatrix::Ones(M, K) * 0.5), B(RowMatrix::Ones(K, N) * 0.25), C(M, N) {}
};

void report(benchmark::State& state, const Operands& x) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * static_cast<double>(x.A.rows() * x.A.cols() * x.B.cols()) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_Gemm(benchmark::State& state) {
  Operands x(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    gemm(view(x.A), view(x.B), mutable_view(x.C));
    benchmark::DoNotOptimize(x.C.data());
  }
  report(state, x);
}

void BM_EigenProduct(benchmark::State& state) {
  Operands x(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    x.C.noalias() = x.A * x.B;
    benchmark::DoNotOptimize(x.C.data());
  }
  report(state, x);
}

// Square sizes; in_proj of the small layer bench (T = 4096 tokens, hidden 1024 -> 3088); a 64-token
// chunk's W S.
BENCHMARK(BM_Gemm)
    ->Args({512, 512, 512})
    ->Args({1024, 1024, 1024})
    ->Args({2048, 2048, 2048})
    ->Args({4096, 1024, 3088})
    ->Args({64, 128, 128})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenProduct)->Args({4096, 1024, 3088})->Args({64, 128, 128})->Unit(benchmark::kMillisecond);

// A chunk's product with subnormal operands, as the chunked core's decays make them (one row in four of
// A subnormal, the rest normal): the AVX-512 kernel's exact path (core/gemm_subnormal.hpp) against the
// AVX2 kernel, which takes a microcode assist per vector FMA touching one. Arg: 0 Best, 1 AVX2.
void BM_GemmSubnormal(benchmark::State& state) {
  const GemmKernel kernel = state.range(0) == 0 ? GemmKernel::Best : GemmKernel::Avx2;
  if (!gemm_kernel_available(kernel)) {
    state.SkipWithError("this CPU lacks the kernel");
    return;
  }
  Operands x(64, 128, 128);
  for (Eigen::Index i = 0; i < x.A.rows(); i += 4) x.A.row(i).setConstant(0x1p-1060);
  for (auto _ : state) {
    gemm(view(x.A), view(x.B), mutable_view(x.C), {.kernel = kernel});
    benchmark::DoNotOptimize(x.C.data());
  }
  report(state, x);
}
BENCHMARK(BM_GemmSubnormal)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The chunked core's dA += d_bk W^T: B's columns (W's rows, the chunk's tokens) fall by 2^-1 a column from
// 2^-1002 into the subnormals, and C, already holding d_bv U^T, is too large for both panels' scales
// together, so the exact path scales one panel: B's, or B's subnormals take an assist in every FMA.
void BM_GemmSubnormalOnePanelScaled(benchmark::State& state) {
  Operands x(64, 128, 64);
  for (Eigen::Index j = 0; j < x.B.cols(); ++j) x.B.col(j) *= std::ldexp(1.0, -1000 - static_cast<int>(j));
  x.C.setConstant(20.0);
  for (auto _ : state) {
    gemm(view(x.A), view(x.B), mutable_view(x.C), {.accumulate = true, .threads = 1});
    benchmark::DoNotOptimize(x.C.data());
  }
  report(state, x);
}
BENCHMARK(BM_GemmSubnormalOnePanelScaled)->Unit(benchmark::kMicrosecond);

// The three products of a layer's linear y = x W^T over T tokens (x [T, in], W [out, in]) as the
// oracle runs them, on every core: forward y = x W^T, dx = dy W and dW = dy^T x, through transposed
// views. Args: T, in, out.
void BM_GemmLinearAllCores(benchmark::State& state) {
  const std::int64_t T = state.range(0), in = state.range(1), out = state.range(2);
  const RowMatrix x = RowMatrix::Ones(T, in) * 0.5, W = RowMatrix::Ones(out, in) * 0.25;
  const RowMatrix dy = RowMatrix::Ones(T, out) * 0.125;
  RowMatrix y(T, out), dx(T, in), dW(out, in);
  const GemmOptions all_cores{.threads = 0};
  for (auto _ : state) {
    product_into(x, W.transpose(), y, all_cores);
    product_into(dy, W, dx, all_cores);
    product_into(dy.transpose(), x, dW, all_cores);
    benchmark::DoNotOptimize(dW.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(3 * 2e-9 * static_cast<double>(T * in * out) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
// The scale layer's out_proj (T = 4096, Hv*dv = 4096 -> hidden 4096).
BENCHMARK(BM_GemmLinearAllCores)->Args({4096, 4096, 4096})->Unit(benchmark::kMillisecond)->UseRealTime();

// MKL's DGEMM from the library GDNV_MKL names (torch's lib/libtorch_cpu.so carries it), or why not.
struct Mkl {
  using Dgemm = void (*)(const char* ta, const char* tb, const int* m, const int* n, const int* k, const double* alpha,
                         const double* a, const int* lda, const double* b, const int* ldb, const double* beta,
                         double* c, const int* ldc);
  using SetThreads = int (*)(int);
  Dgemm dgemm = nullptr;
  SetThreads set_threads = nullptr;
  std::string error;
};

const Mkl& mkl() {
  static const Mkl loaded = [] {
    Mkl m;
    const char* path = std::getenv("GDNV_MKL");
    if (!path) {
      m.error =
          "set GDNV_MKL to a library with MKL's DGEMM, e.g. .venv/lib/python3.12/site-packages/torch/lib/"
          "libtorch_cpu.so (./run bench sets it where .venv has torch)";
      return m;
    }
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      m.error = std::string("GDNV_MKL: ") + dlerror();
      return m;
    }
    m.dgemm = reinterpret_cast<Mkl::Dgemm>(dlsym(library, "DGEMM"));
    m.set_threads = reinterpret_cast<Mkl::SetThreads>(dlsym(library, "MKL_Set_Num_Threads_Local"));
    if (!m.dgemm || !m.set_threads)
      m.error = std::string("GDNV_MKL: ") + path + " lacks DGEMM or MKL_Set_Num_Threads_Local";
    return m;
  }();
  return loaded;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// core/gemm and MKL in turn on the same operands, one call of each per iteration, on the same threads:
// "ratio" is the median of the pairs' speed ratios (ours / MKL's). Where other work shares the cores
// (a VM's neighbour), the machine's speed moves from second to second and separate timings of the two
// swing by 30-40%; a pair's two calls meet nearly the same machine. Args: M, K, N, threads.
void BM_GemmAgainstMkl(benchmark::State& state) {
  const Mkl& m = mkl();
  if (!m.error.empty()) {
    state.SkipWithError(m.error.c_str());
    return;
  }
  const int M = static_cast<int>(state.range(0)), K = static_cast<int>(state.range(1)),
            N = static_cast<int>(state.range(2)), threads = static_cast<int>(state.range(3));
  // Small integers, so that every sum is exact in any order: the two Cs must be the same bits, and one
  // from a transposed or misread operand would differ (constant operands would hide that).
  Operands x(M, K, N);
  for (Eigen::Index i = 0; i < x.A.size(); ++i) x.A.data()[i] = static_cast<double>(i % 7) - 3;
  for (Eigen::Index i = 0; i < x.B.size(); ++i) x.B.data()[i] = static_cast<double>(i % 5) - 2;
  RowMatrix C_mkl(M, N);
  const double one = 1, zero = 0;
  m.set_threads(threads);
  // Row-major C = A B is column-major C^T = B^T A^T.
  const auto theirs = [&] {
    m.dgemm("N", "N", &N, &M, &K, &one, x.B.data(), &N, x.A.data(), &K, &zero, C_mkl.data(), &N);
  };
  const auto ours = [&] { gemm(view(x.A), view(x.B), mutable_view(x.C), {.threads = threads}); };
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](auto f) {
    const auto start = Clock::now();
    f();
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<double> ours_s, theirs_s, ratios;
  for (auto _ : state) {
    ours_s.push_back(seconds(ours));
    theirs_s.push_back(seconds(theirs));
    ratios.push_back(theirs_s.back() / ours_s.back());
  }
  if (x.C != C_mkl) {
    state.SkipWithError("MKL's C differs from core/gemm's: the DGEMM call's arguments are wrong");
    return;
  }
  const double flop = 2.0 * M * K * N;
  state.counters["GFLOP/s"] = 1e-9 * flop / median(ours_s);
  state.counters["MKL GFLOP/s"] = 1e-9 * flop / median(theirs_s);
  state.counters["ratio"] = median(ratios);
}
// A square product on one thread and on two; the scale layer's in_proj for one key head's GVA group (2048
// of its 4096 rows at a time, hidden 4096, 772 columns) on two.
BENCHMARK(BM_GemmAgainstMkl)
    ->Args({1536, 1536, 1536, 1})
    ->Args({2048, 2048, 2048, 2})
    ->Args({2048, 4096, 772, 2})
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace gdnv
