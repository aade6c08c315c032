// The fp64 gated delta rule oracle, forward + backward, at B=1, Hk=Hv=4, K=V=128 (the targets:
// chunked under 1.5 s at T=4096 and >= 20x faster than the recurrent form). GFLOP/s counts each form's
// own arithmetic (below), so the two rates say how well each form uses the machine.
#include <benchmark/benchmark.h>

#include <cmath>

#include "core/rng.hpp"
#include "reference/gated_delta_rule.hpp"

namespace gdnv::ref {
namespace {

constexpr std::int64_t kHeads = 4, kDim = 128, kChunk = 64;

struct Case {
  GdrInputs in;
  Tensor d_o, dht;
};

Tensor normal(const Shape& shape, const char* stream) {
  Tensor t(DType::F64, shape);
  const Rng rng(0, stream);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = rng.normal(static_cast<std::uint64_t>(i));
  return t;
}

// FLA-like inputs: unit-norm k, g = logsigmoid(x), beta = sigmoid(x), an initial state and dht.
Case make_case(std::int64_t T) {
  Case c{{normal({1, T, kHeads, kDim}, "q"), normal({1, T, kHeads, kDim}, "k"), normal({1, T, kHeads, kDim}, "v"),
          normal({1, T, kHeads}, "g"), normal({1, T, kHeads}, "beta"), normal({1, kHeads, kDim, kDim}, "h0"),
          std::nullopt, std::nullopt, false},
         normal({1, T, kHeads, kDim}, "do"),
         normal({1, kHeads, kDim, kDim}, "dht")};
  for (std::int64_t r = 0; r < T * kHeads; ++r) {
    double* k = c.in.k.data<double>() + r * kDim;
    double n2 = 0;
    for (std::int64_t i = 0; i < kDim; ++i) n2 += k[i] * k[i];
    for (std::int64_t i = 0; i < kDim; ++i) k[i] /= std::sqrt(n2);
    double& g = c.in.g.data<double>()[r];
    g = std::min(g, 0.0) - std::log1p(std::exp(-std::abs(g)));
    double& beta = c.in.beta.data<double>()[r];
    beta = 1 / (1 + std::exp(-beta));
  }
  return c;
}

// Recurrent form, per token and head: forward 7KV (decay, S^T k, k u^T, S^T q); backward 28KV (the
// checkpoint pass and the in-segment recompute, 5KV each, and 18KV of gradient products).
double recurrent_flops(std::int64_t T) { return 35.0 * kDim * kDim * T * kHeads; }

// Chunked form, per chunk of c tokens and head (K = V = D): forward 8 c^2 D + 6 c D^2 (K K^T, Q K^T,
// T (beta V), T (beta e^gamma K), W S, Q S, P V_new, K^T V_new); backward 28 c^2 D + 18 c D^2
// (checkpoint pass, recompute, and the gradient GEMMs). Products with a triangular factor count whole, though core/gemm
// skips their zero half.
double chunked_flops(std::int64_t T) {
  const double c = kChunk, D = kDim;
  return (36 * c * c * D + 24 * c * D * D) * (static_cast<double>(T) / kChunk) * kHeads;
}

void report(benchmark::State& state, double flops_per_iteration, std::int64_t T) {
  state.counters["GFLOP/s"] = benchmark::Counter(flops_per_iteration * 1e-9 * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * T);
}

// Args: T, threads. Both forms split the work the same way, by (sequence, key head).
void BM_GdrChunkedForwardBackward(benchmark::State& state) {
  const Case c = make_case(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    benchmark::DoNotOptimize(gdr_chunked_forward(c.in, kChunk, threads));
    benchmark::DoNotOptimize(gdr_chunked_backward(c.in, c.d_o, c.dht, kChunk, threads));
  }
  report(state, chunked_flops(state.range(0)), state.range(0));
}
BENCHMARK(BM_GdrChunkedForwardBackward)
    ->ArgsProduct({{1024, 4096}, {1, 2}})
    ->ArgNames({"T", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_GdrRecurrentForwardBackward(benchmark::State& state) {
  const Case c = make_case(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  for (auto _ : state) {
    benchmark::DoNotOptimize(gdr_recurrent_forward(c.in, threads));
    benchmark::DoNotOptimize(gdr_recurrent_backward(c.in, c.d_o, c.dht, threads));
  }
  report(state, recurrent_flops(state.range(0)), state.range(0));
}
BENCHMARK(BM_GdrRecurrentForwardBackward)
    ->ArgsProduct({{1024, 4096}, {1, 2}})
    ->ArgNames({"T", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace gdnv::ref
