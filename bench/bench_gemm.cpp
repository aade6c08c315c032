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

// in_proj of the layer bench (T = 4096 tokens, hidden 1024 -> 3088), and a 64-token chunk's W S.
BENCHMARK(BM_Gemm)->Args({4096, 1024, 3088})->Args({64, 128, 128})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenProduct)->Args({4096, 1024, 3088})->Args({64, 128, 128})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gdnv
