// CPU backend kernels at the CP bench size (THD lengths [4096, 4096], hidden 512, Hk=4, Hv=8,
// dk=dv=64, conv width 4): the chunked gated delta rule forward and forward+backward (target: well
// under 1 s fwd+bwd in fp32), the conv and the in_proj GEMM, per storage dtype (arg 0 fp32, 1 bf16,
// 2 fp64).
#include <benchmark/benchmark.h>

#include <cmath>

#include "core/rng.hpp"
#include "cpu/backend.hpp"

namespace {

using namespace gdnv;
using namespace gdnv::cp;

constexpr std::int64_t kTokens = 8192, kHidden = 512, kHk = 4, kHv = 8, kD = 64, kWidth = 4;
const std::vector<std::int64_t> kCu{0, 4096, 8192};

DType storage_of(const benchmark::State& state) {
  return state.range(0) == 0 ? DType::F32 : state.range(0) == 1 ? DType::BF16 : DType::F64;
}

// N(0, scale^2) values, then `map` applied elementwise (seeded by name).
Tensor random(const Shape& shape, const char* name, double scale = 1.0, double (*map)(double) = nullptr) {
  Tensor t(DType::F64, shape);
  const Rng rng(20261202, name);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    const double x = scale * rng.normal(static_cast<std::uint64_t>(i));
    t.set(i, map ? map(x) : x);
  }
  return t;
}

double log_sigmoid(double x) { return std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x))); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct GdrData {
  std::unique_ptr<Backend> be;
  Buffer q, k, v, g, beta, d_o, none;
  Varlen seqs;

  explicit GdrData(DType storage) : be(cpu::make_backend(storage)) {
    const DType act = be->dtype(), st = be->state_dtype();
    q = be->upload(random({kTokens, kHk, kD}, "q"), act);
    k = be->upload(random({kTokens, kHk, kD}, "k"), act);
    v = be->upload(random({kTokens, kHv, kD}, "v"), act);
    g = be->upload(random({kTokens, kHv}, "g", 1.0, log_sigmoid), st);
    beta = be->upload(random({kTokens, kHv}, "beta", 1.0, sigmoid), st);
    d_o = be->upload(random({kTokens, kHv, kD}, "do"), act);
    seqs = {kCu, be->upload(Tensor::from(kCu, {3}), DType::I64)};
  }
  GdrArgs args() const { return {q, k, v, g, beta, seqs, none, 1.0 / std::sqrt(double(kD))}; }
};

void BM_GdrForward(benchmark::State& state) {
  GdrData d(storage_of(state));
  for (auto _ : state) benchmark::DoNotOptimize(d.be->gdr(d.args()).o.data());
  state.SetLabel(d.be->name());
}
// The kernel runs (sequence, key head) tasks on several threads: wall time, CPU time of all threads.
BENCHMARK(BM_GdrForward)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MeasureProcessCPUTime();

void BM_GdrForwardBackward(benchmark::State& state) {
  GdrData d(storage_of(state));
  for (auto _ : state) {
    benchmark::DoNotOptimize(d.be->gdr(d.args()).o.data());
    benchmark::DoNotOptimize(d.be->gdr_backward(d.args(), d.d_o, d.none).dq.data());
  }
  state.SetLabel(d.be->name());
}
BENCHMARK(BM_GdrForwardBackward)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime();

void BM_ConvForwardBackward(benchmark::State& state) {
  const auto be = cpu::make_backend(storage_of(state));
  const std::int64_t D = 2 * kHk * kD + kHv * kD;
  const Buffer x = be->upload(random({kTokens, D}, "x"), be->dtype());
  const Buffer w = be->upload(random({D, kWidth}, "w", 0.5), be->dtype());
  const Buffer dy = be->upload(random({kTokens, D}, "dy"), be->dtype()), none;
  const Varlen seqs{kCu, be->upload(Tensor::from(kCu, {3}), DType::I64)};
  const ConvArgs args{x, w, nullptr, seqs, none};
  for (auto _ : state) {
    benchmark::DoNotOptimize(be->conv1d(args).data());
    benchmark::DoNotOptimize(be->conv1d_backward(args, dy).dx.data());
  }
  state.SetLabel(be->name());
}
BENCHMARK(BM_ConvForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_InProjForwardBackward(benchmark::State& state) {
  const auto be = cpu::make_backend(storage_of(state));
  const std::int64_t out = 2 * kHk * kD + 2 * kHv * kD + 2 * kHv;
  const Buffer x = be->upload(random({kTokens, kHidden}, "x"), be->dtype());
  const Buffer w = be->upload(random({out, kHidden}, "w", 0.05), be->dtype());
  const Buffer dy = be->upload(random({kTokens, out}, "dy"), be->dtype());
  for (auto _ : state) {
    benchmark::DoNotOptimize(be->linear(x, w).data());
    benchmark::DoNotOptimize(be->linear_backward(dy, x, w).dw.data());
  }
  state.SetLabel(be->name());
}
BENCHMARK(BM_InProjForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
