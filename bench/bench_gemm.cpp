// The oracle's fixed-order GEMM (core/gemm) beside Eigen's product, at the oracle's two typical shapes:
// a layer projection and one chunk of the chunked gated delta rule. One thread each.
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

}  // namespace
}  // namespace gdnv
