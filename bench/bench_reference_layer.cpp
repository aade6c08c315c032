// The fp64 GatedDeltaNet layer oracle at a production-like shape (the target: hidden=1024,
// Hk=4, Hv=8, dk=dv=128, T=4096, forward + backward under 4 s). Registered into bench_reference.
#include <benchmark/benchmark.h>

#include "reference/layer.hpp"

namespace gdnv::ref {
namespace {

struct LayerBenchCase {
  LayerConfig config{{.hidden_size = 1024,
                      .linear_num_key_heads = 4,
                      .linear_num_value_heads = 8,
                      .linear_key_head_dim = 128,
                      .linear_value_head_dim = 128}};
  LayerParams params = init_params(config, 0);
};

// The projections' share of the arithmetic: in_proj [T, hidden] x [hidden, in_proj_dim] and out_proj
// [T, Hv*dv] x [Hv*dv, hidden], 2 flops per multiply-add, three GEMMs each (forward, dx, dW).
double projection_flops(const LayerConfig& c, std::int64_t T) {
  return 3.0 * 2.0 * static_cast<double>(T) * static_cast<double>(c.hidden()) *
         static_cast<double>(c.in_proj_dim() + c.v_dim());
}

// One untimed layer first: the process's first layer also grows the heap to the layer's working set
// (~0.4 s of page faults at T = 4096) that every later layer reuses (core/memory.hpp).
void warm_up(const LayerBenchCase& c, const Tensor& hidden, const CuSeqlens& cu_seqlens, const Tensor* grad_output) {
  const LayerForward fwd = layer_forward(c.config, c.params, hidden, cu_seqlens);
  if (grad_output) benchmark::DoNotOptimize(layer_backward(c.config, c.params, fwd, *grad_output));
}

void BM_LayerForwardBackward(benchmark::State& state) {
  const LayerBenchCase c;
  const std::int64_t T = state.range(0);
  const Tensor hidden = seeded_normal(0, "hidden_states", {T, 1, c.config.hidden()});
  const Tensor grad_output = seeded_normal(0, "grad_output", {T, 1, c.config.hidden()});
  const CuSeqlens cu_seqlens = std::vector<std::int64_t>{0, T};
  warm_up(c, hidden, cu_seqlens, &grad_output);
  for (auto _ : state) {
    const LayerForward fwd = layer_forward(c.config, c.params, hidden, cu_seqlens);
    benchmark::DoNotOptimize(layer_backward(c.config, c.params, fwd, grad_output));
  }
  state.counters["projection GFLOP/s"] = benchmark::Counter(
      projection_flops(c.config, T) * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * T);
}
BENCHMARK(BM_LayerForwardBackward)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LayerForward(benchmark::State& state) {
  const LayerBenchCase c;
  const std::int64_t T = state.range(0);
  const Tensor hidden = seeded_normal(0, "hidden_states", {T, 1, c.config.hidden()});
  const CuSeqlens cu_seqlens = std::vector<std::int64_t>{0, T};
  warm_up(c, hidden, cu_seqlens, nullptr);
  for (auto _ : state) benchmark::DoNotOptimize(layer_forward(c.config, c.params, hidden, cu_seqlens));
  state.SetItemsProcessed(state.iterations() * T);
}
BENCHMARK(BM_LayerForward)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace gdnv::ref
