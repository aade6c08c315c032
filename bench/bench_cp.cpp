// bench_cp: GdnCpLayer fwd+bwd per CP mode on in-process ranks (CPU backend), with the collectives
// rank 0 performed (calls and MB sent per kind). Geometries: issue 7's THD [4096, 4096], hidden 512,
// Hk 4, Hv 8, dk = dv = 64 at W = 4, and at W = 8 the same with Hk 8, Hv 16 (headwise needs 8 | Hk);
// fp32. Only forward + backward are timed (layer construction and the micro-batch plan are not).
#include <chrono>

#include <benchmark/benchmark.h>

#include "comm/inprocess.hpp"
#include "core/memory.hpp"
#include "cp/cpu_backend.hpp"
#include "cp/harness.hpp"
#include "cp/layer.hpp"
#include "layouts/partition.hpp"

namespace gdnv::cp {
namespace {

void BM_CpLayerFwdBwd(benchmark::State& state, CpMode mode) {
  const int W = static_cast<int>(state.range(0));
  const std::int64_t Hk = W == 8 ? 8 : 4;
  RunSpec spec;
  spec.layer = {512, Hk, 2 * Hk, 64, 64, 4, 1e-6, false};
  spec.cp.mode = mode;
  spec.cp.cp = W;
  spec.dtype = DType::F32;
  spec.lengths = {4096, 4096};
  const Case k = make_case(spec);
  Counters fwd, bwd;
  for (auto _ : state) {
    double seconds = 0;
    run_world(W, [&](Communicator& world) {
      auto be = make_cpu_backend(spec.dtype);
      const GdnCpLayer layer(k.config, spec.cp, k.params, *be, world);
      auto mb = layer.prepare({Format::Thd, *k.cu_seqlens});
      const auto rows = layouts::thd_partition(layouts::Layout::zigzag, *k.cu_seqlens, W, world.rank()).positions();
      Tensor h(DType::F32, {static_cast<std::int64_t>(rows.size()), 1, 512}), g = h;
      for (std::size_t i = 0; i < rows.size(); ++i)
        for (std::int64_t c = 0; c < 512; ++c) {
          h.set(static_cast<std::int64_t>(i) * 512 + c, k.hidden.get(rows[i] * 512 + c));
          g.set(static_cast<std::int64_t>(i) * 512 + c, k.grad_output.get(rows[i] * 512 + c));
        }
      const Buffer hb = be->upload(h, DType::F32), gb = be->upload(g, DType::F32);
      world.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      Context ctx;
      ScopedCounter f(world.accounting());
      const Buffer out = layer.forward(mb, hb, ctx);
      const Counters forward = f.delta();
      ScopedCounter b(world.accounting());
      benchmark::DoNotOptimize(layer.backward(ctx, gb));
      const Counters backward = b.delta();
      world.barrier();
      if (world.rank() == 0) {
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fwd = forward;
        bwd = backward;
      }
    });
    state.SetIterationTime(seconds);
  }
  const Counters total = fwd + bwd;
  state.counters["calls"] = static_cast<double>(total.calls());
  state.counters["MB_sent"] = static_cast<double>(total.bytes_sent()) / 1e6;
  const std::pair<const char*, Collective> kinds[] = {{"a2a", Collective::AllToAllV},
                                                      {"allgather", Collective::AllGather},
                                                      {"reduce_scatter", Collective::ReduceScatter},
                                                      {"all_reduce", Collective::AllReduce}};
  for (const auto& [name, kind] : kinds) {
    state.counters[name] = static_cast<double>(total[kind].calls);
    state.counters[std::string(name) + "_MB"] = static_cast<double>(total[kind].bytes_sent) / 1e6;
  }
}

void register_modes() {
  for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
    benchmark::RegisterBenchmark((std::string("BM_CpLayerFwdBwd/") + std::string(mode_name(mode))).c_str(),
                                 BM_CpLayerFwdBwd, mode)
        ->Arg(4)
        ->Arg(8)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2);
}

}  // namespace
}  // namespace gdnv::cp

int main(int argc, char** argv) {
  gdnv::keep_freed_memory();
  gdnv::cp::register_modes();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
