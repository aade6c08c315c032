// The fp64 GatedDeltaNet layer oracle at two production-like shapes, forward + backward, whole and by
// stage. Registered into bench_reference.
//   small:  hidden 1024, Hk 4, Hv 8, dk = dv = 128, one sequence of T = 4096
//   scale:  hidden 4096, Hk 16, Hv 32, dk = dv = 128, conv 4, T = 4096 packed as [1024, 2048, 1024]
//           (the upstream training run's head counts; `gdn-verify reference` on it is the scale target)
// Every benchmark reports GFLOP/s (2 flops per multiply-add, the stage's forward + backward arithmetic
// as counted below) and "peak %", its share of the fp64 FMA peak of the threads it ran on, measured at
// start-up by bench/fp64_peak.hpp.
#include <benchmark/benchmark.h>

#include "bench/fp64_peak.hpp"
#include "core/parallel.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/layer.hpp"

namespace gdnv::ref {
namespace {

void report_flops(benchmark::State& state, double flops) {
  static const double peak = bench::fp64_peak(hardware_threads()).gflops;
  const double n = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9 * n, benchmark::Counter::kIsRate);
  if (peak > 0)
    state.counters["peak %"] = benchmark::Counter(flops * 1e-9 * n / peak * 100, benchmark::Counter::kIsRate);
}

// ---- the two shapes -----------------------------------------------------------------------------
struct LayerBenchCase {
  LayerConfig config;
  LayerParams params;
  Tensor hidden, grad_output;
  CuSeqlens cu_seqlens;

  LayerBenchCase(const LayerConfig::Values& v, std::vector<std::int64_t> cu)
      : config(v),
        params(init_params(config, 0)),
        hidden(seeded_normal(0, "hidden_states", {cu.back(), 1, v.hidden_size})),
        grad_output(seeded_normal(0, "grad_output", {cu.back(), 1, v.hidden_size})),
        cu_seqlens(std::move(cu)) {}
  std::int64_t T() const { return hidden.dim(0); }
};

const LayerBenchCase& small_case() {
  static const LayerBenchCase c({.hidden_size = 1024,
                                 .linear_num_key_heads = 4,
                                 .linear_num_value_heads = 8,
                                 .linear_key_head_dim = 128,
                                 .linear_value_head_dim = 128},
                                {0, 4096});
  return c;
}

const LayerBenchCase& scale_case() {
  static const LayerBenchCase c({.hidden_size = 4096,
                                 .linear_num_key_heads = 16,
                                 .linear_num_value_heads = 32,
                                 .linear_key_head_dim = 128,
                                 .linear_value_head_dim = 128,
                                 .linear_conv_kernel_dim = 4},
                                {0, 1024, 3072, 4096});
  return c;
}

const LayerBenchCase& bench_case(std::int64_t which) { return which == 0 ? small_case() : scale_case(); }

// ---- the arithmetic of each stage, forward + backward ---------------------------------------------
// in_proj [T, hidden] x [hidden, in_proj_dim] and out_proj [T, Hv*dv] x [Hv*dv, hidden], three GEMMs
// each (forward, dx, dW).
double projection_flops(const LayerConfig& c, std::int64_t T) {
  return 3.0 * 2.0 * static_cast<double>(T) * static_cast<double>(c.hidden()) *
         static_cast<double>(c.in_proj_dim() + c.v_dim());
}

// Depthwise conv over conv_dim channels, W taps: the forward's multiply-adds, twice more backward (dx, dw).
double conv_flops(const LayerConfig& c, std::int64_t T) {
  return 3.0 * 2.0 * static_cast<double>(T * c.conv_dim() * c.W());
}

// The chunked core per chunk of C tokens and value head, forward (reference/gdr_chunked.cpp): K K^T,
// Q K^T (2 C^2 K each), T (C^3 / 3), T beta V and T beta K (C^2 V and C^2 K, triangular), W S, q S and
// k^T V_new (2 C K V each), P V_new (C^2 V, triangular). The backward is counted as twice the forward.
double core_flops(const LayerConfig& c, std::int64_t T, double C = 64) {
  const double K = static_cast<double>(c.dk()), V = static_cast<double>(c.dv());
  const double per_chunk = 5 * C * C * K + 2 * C * C * V + 6 * C * K * V + C * C * C / 3;
  return 3.0 * per_chunk * static_cast<double>(c.Hv()) * static_cast<double>(T) / C;
}

// Pre-norm over hidden and gated output norm over Hv*dv per token: a few flops per element (for the
// rate; these stages are bound by memory, not arithmetic).
double norm_flops(const LayerConfig& c, std::int64_t T) {
  return 3.0 * 4.0 * static_cast<double>(T) * static_cast<double>(c.hidden() + c.v_dim());
}

double layer_flops(const LayerConfig& c, std::int64_t T) {
  return projection_flops(c, T) + conv_flops(c, T) + core_flops(c, T) + norm_flops(c, T);
}

// ---- the whole layer --------------------------------------------------------------------------------
// One untimed layer first: the process's first layer also grows the heap to the layer's working set
// that every later layer reuses (core/memory.hpp).
void warm_up(const LayerBenchCase& c, bool backward) {
  const LayerForward fwd = layer_forward(c.config, c.params, c.hidden, c.cu_seqlens);
  if (backward) benchmark::DoNotOptimize(layer_backward(c.config, c.params, fwd, c.grad_output));
}

void BM_LayerForwardBackward(benchmark::State& state) {
  const LayerBenchCase& c = bench_case(state.range(0));
  warm_up(c, true);
  for (auto _ : state) {
    const LayerForward fwd = layer_forward(c.config, c.params, c.hidden, c.cu_seqlens);
    benchmark::DoNotOptimize(layer_backward(c.config, c.params, fwd, c.grad_output));
  }
  report_flops(state, layer_flops(c.config, c.T()));
  state.SetItemsProcessed(state.iterations() * c.T());
}
// Arg 0: the small shape; 1: the scale shape.
BENCHMARK(BM_LayerForwardBackward)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerForward(benchmark::State& state) {
  const LayerBenchCase& c = bench_case(state.range(0));
  warm_up(c, false);
  for (auto _ : state) benchmark::DoNotOptimize(layer_forward(c.config, c.params, c.hidden, c.cu_seqlens));
  state.SetItemsProcessed(state.iterations() * c.T());
}
BENCHMARK(BM_LayerForward)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- the scale shape stage by stage, forward + backward each ------------------------------------------
// The stages' inputs, from one forward of the scale case.
struct ScaleStages {
  const LayerBenchCase& c = scale_case();
  LayerForward fwd = layer_forward(c.config, c.params, c.hidden, c.cu_seqlens);
  Tensor dout = c.grad_output.reshaped({c.T(), c.config.hidden()});
  Tensor dy = out_proj_backward(c.params, fwd.mixer.y.y.reshaped({c.T(), c.config.v_dim()}), dout).dy;
  std::int64_t T() const { return c.T(); }
};

const ScaleStages& scale_stages() {
  static const ScaleStages s;
  return s;
}

void BM_ScaleProjections(benchmark::State& state) {
  const ScaleStages& s = scale_stages();
  const LayerConfig& config = s.c.config;
  const Tensor h = s.c.hidden.reshaped({s.T(), config.hidden()});
  const Tensor y = s.fwd.mixer.y.y.reshaped({s.T(), config.v_dim()});
  const Tensor dp = seeded_normal(0, "dp", {s.T(), config.in_proj_dim()});
  for (auto _ : state) {
    benchmark::DoNotOptimize(in_proj_forward(config, s.c.params, h));
    benchmark::DoNotOptimize(in_proj_backward(s.c.params, h, s.fwd.in_proj, dp));
    benchmark::DoNotOptimize(out_proj_forward(s.c.params, y));
    benchmark::DoNotOptimize(out_proj_backward(s.c.params, y, s.dout));
  }
  report_flops(state, projection_flops(config, s.T()));
}
BENCHMARK(BM_ScaleProjections)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

void BM_ScaleConv(benchmark::State& state) {
  const ScaleStages& s = scale_stages();
  for (auto _ : state) {
    const Tensor y = conv1d_forward(s.fwd.mixer.conv_in);
    benchmark::DoNotOptimize(conv1d_backward(s.fwd.mixer.conv_in, y));
  }
  report_flops(state, conv_flops(s.c.config, s.T()));
}
BENCHMARK(BM_ScaleConv)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ScaleCore(benchmark::State& state) {
  const ScaleStages& s = scale_stages();
  const GdrInputs& in = s.fwd.mixer.core_in;
  for (auto _ : state) {
    benchmark::DoNotOptimize(gdr_chunked_forward(in));
    benchmark::DoNotOptimize(gdr_chunked_backward(in, s.dy.reshaped(s.fwd.mixer.o.shape()), std::nullopt));
  }
  report_flops(state, core_flops(s.c.config, s.T()));
}
BENCHMARK(BM_ScaleCore)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

void BM_ScaleNorms(benchmark::State& state) {
  const ScaleStages& s = scale_stages();
  const LayerConfig& config = s.c.config;
  const Tensor h = s.c.hidden.reshaped({s.T(), config.hidden()});
  const Tensor& w_in = s.c.params.at(kInProjNorm);
  const Tensor& w_out = s.c.params.at(kOutNorm);
  const Mixer& m = s.fwd.mixer;
  const Tensor dy = s.dy.reshaped(m.o.shape());
  for (auto _ : state) {
    const RmsNorm pre = rmsnorm_forward(h, w_in, config.eps());
    benchmark::DoNotOptimize(rmsnorm_backward(h, w_in, pre.rstd, h));
    const GatedNorm out = gated_rmsnorm_forward(m.o, m.z, w_out, config.eps());
    benchmark::DoNotOptimize(gated_rmsnorm_backward(m.o, m.z, w_out, out.rstd, dy));
  }
  report_flops(state, norm_flops(config, s.T()));
}
BENCHMARK(BM_ScaleNorms)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace gdnv::ref
