// bench_cp: GdnCpLayer fwd+bwd per CP mode on in-process ranks, with the collectives rank 0 performed
// (calls and MB sent per kind) and the host syncs of one step (the target is 0). --backend selects cpu
// (default), emu (the gpu/ kernels on host streams) or cuda (W ranks sharing one GPU through their own
// streams). Geometries:
//   cpu, emu  THD [4096, 4096], hidden 512, Hk 4, Hv 8, dk = dv = 64 at W = 4, and at W = 8
//             the same with Hk 8, Hv 16 (headwise needs 8 | Hk); fp32.
//   cuda      production THD [8192, 8192], hidden 2048, Hk 16, Hv 32, dk = dv = 128 at W = 4, fp32 and
//             bf16; plus BM_ChunkedCore, one rank's chunked gated delta rule (fwd + bwd) at that size,
//             whose counter TFLOP_s is the achieved rate (cost/op_cost.hpp's FLOPs over the time).
// Only forward + backward are timed, up to the step's end on the device (one download, outside the
// sync count); layer construction and the micro-batch plan are not.
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <string>

#include <benchmark/benchmark.h>

#include "comm/inprocess.hpp"
#include "core/memory.hpp"
#include "core/rng.hpp"
#include "cost/op_cost.hpp"
#include "cp/layer.hpp"
#include "cpu/backend.hpp"
#include "gpu/cuda_backend.hpp"
#include "gpu/kernel_backend.hpp"
#include "harness/world.hpp"
#include "layouts/apply.hpp"

namespace gdnv::cp {
using namespace harness;
namespace {

BackendFactory g_factory = cpu::make_backend;

struct Geometry {
  std::int64_t hidden, Hk, Hv, dk, length;
};

void BM_CpLayerFwdBwd(benchmark::State& state, CpMode mode, Geometry geo, DType dtype) {
  const int W = static_cast<int>(state.range(0));
  RunSpec spec;
  spec.layer = {geo.hidden, geo.Hk, geo.Hv, geo.dk, geo.dk, 4, 1e-6, false};
  spec.cp.mode = mode;
  spec.cp.cp = W;
  spec.dtype = dtype;
  spec.lengths = {geo.length, geo.length};
  const Case k = make_case(spec);
  comm::Counters fwd, bwd;
  for (auto _ : state) {
    double seconds = 0;
    RankBackends ranks = make_rank_backends(W, g_factory, dtype);
    comm::run_world(
        W,
        [&](comm::Communicator& world) {
          Backend& be = *ranks.backends[static_cast<std::size_t>(world.rank())];
          be.count_host_syncs(world.shared_accounting());
          const GdnCpLayer layer(k.config, spec.cp, k.params, be, world);
          const CheckedMicroBatch checked = layer.check({Format::Thd, *k.cu_seqlens});
          auto mb = layer.prepare(checked);
          const auto rows = zigzag_rows(checked, world.rank());
          const Buffer hb = be.upload(layouts::gather_rows(k.hidden, rows), dtype);
          const Buffer gb = be.upload(layouts::gather_rows(k.grad_output, rows), dtype);
          (void)be.download(gb);  // the uploads have landed
          world.barrier();
          const auto t0 = std::chrono::steady_clock::now();
          Context ctx;
          comm::ScopedCounter f(world.accounting());
          const Buffer out = layer.forward(mb, hb, ctx);
          const comm::Counters forward = f.delta();
          comm::ScopedCounter b(world.accounting());
          const LayerBackward back = layer.backward(ctx, gb);
          const comm::Counters backward = b.delta();
          (void)be.download(back.grad_hidden);  // the step has finished on the device
          world.barrier();
          if (world.rank() == 0) {
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            fwd = forward;
            bwd = backward;
          }
        },
        ranks.options);
    state.SetIterationTime(seconds);
  }
  const comm::Counters total = fwd + bwd;
  state.counters["calls"] = static_cast<double>(total.calls());
  state.counters["MB_sent"] = static_cast<double>(total.bytes_sent()) / 1e6;
  state.counters["host_syncs"] = static_cast<double>(total.host_syncs);
  const std::pair<const char*, comm::Collective> kinds[] = {{"a2a", comm::Collective::AllToAllV},
                                                            {"allgather", comm::Collective::AllGather},
                                                            {"reduce_scatter", comm::Collective::ReduceScatter},
                                                            {"all_reduce", comm::Collective::AllReduce}};
  for (const auto& [name, kind] : kinds) {
    state.counters[name] = static_cast<double>(total[kind].calls);
    state.counters[std::string(name) + "_MB"] = static_cast<double>(total[kind].bytes_sent) / 1e6;
  }
}

// One rank's chunked core under headwise at W = 4 (Hk / 4 key heads, Hv / 4 value heads, every token):
// gdr + gdr_backward, timed to a download of one gradient.
void BM_ChunkedCore(benchmark::State& state, Geometry geo, DType dtype) {
  const std::int64_t Hk = geo.Hk / 4, Hv = geo.Hv / 4, N = 2 * geo.length, K = geo.dk;
  const auto be = g_factory(dtype);
  std::uint64_t stream = 0;
  const auto random = [&](Shape shape, double lo, double hi) {
    const Rng rng(11, ++stream);
    Tensor t(DType::F64, shape);
    for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(static_cast<std::uint64_t>(i), lo, hi));
    return t;
  };
  const Buffer q = be->upload(random({N, Hk, K}, -1, 1), dtype), kk = be->upload(random({N, Hk, K}, -1, 1), dtype);
  const Buffer v = be->upload(random({N, Hv, K}, -1, 1), dtype), d_o = be->upload(random({N, Hv, K}, -1, 1), dtype);
  const Buffer g = be->upload(random({N, Hv}, -0.1, -0.01), DType::F32);
  const Buffer beta = be->upload(random({N, Hv}, 0.1, 0.9), DType::F32);
  const std::vector<std::int64_t> cu{0, geo.length, N};
  const Varlen seqs{cu, upload_index(*be, cu)};
  const GdrArgs args{q, kk, v, g, beta, seqs, Buffer{}, 1.0 / std::sqrt(static_cast<double>(K))};
  (void)be->download(beta);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const GdrOut out = be->gdr(args);
    const GdrGrads grads = be->gdr_backward(args, d_o, Buffer{});
    (void)be->download(grads.dh0);
    benchmark::DoNotOptimize(out.o.data());
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const std::int64_t lengths[] = {geo.length, geo.length};
  const double flops = cost::gdr_cost({0, 0}, lengths, Hk, Hv, K, K).flops +
                       cost::gdr_backward_cost({0, 0}, lengths, Hk, Hv, K, K).flops;
  state.counters["TFLOP_s"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

template <class Fn, class... Args>
benchmark::internal::Benchmark* add(const std::string& name, Fn fn, Args... args) {
  return benchmark::RegisterBenchmark(name.c_str(), fn, args...)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2);
}

void register_benchmarks(const std::string& backend) {
  if (backend != "cuda") {
    for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
      for (int W : {4, 8}) {
        const std::int64_t Hk = W == 8 ? 8 : 4;
        add("BM_CpLayerFwdBwd/" + std::string(mode_name(mode)), BM_CpLayerFwdBwd, mode,
            Geometry{512, Hk, 2 * Hk, 64, 4096}, DType::F32)
            ->Arg(W);
      }
    return;
  }
  const Geometry large{2048, 16, 32, 128, 8192};
  for (DType dtype : {DType::F32, DType::BF16}) {
    const std::string suffix = "/" + std::string(dtype_option_name(dtype));
    for (CpMode mode : {CpMode::Headwise, CpMode::Chunkwise, CpMode::AllGather})
      add("BM_CpLayerFwdBwd/" + std::string(mode_name(mode)) + suffix, BM_CpLayerFwdBwd, mode, large, dtype)->Arg(4);
    add("BM_ChunkedCore" + suffix, BM_ChunkedCore, large, dtype)->Iterations(5);
  }
}

// --backend=NAME, removed from argv; exits 3 naming the fix for a bad name or a missing device.
std::string take_backend_flag(int& argc, char** argv) {
  std::string backend = "cpu";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--backend=", 10) == 0) backend = argv[i] + 10;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  if (backend == "cpu") g_factory = cpu::make_backend;
  else if (backend == "emu") g_factory = gpu::make_emulated_backend;
  else if (backend == "cuda") g_factory = gpu::make_cuda_backend;
  else {
    std::cerr << "bench_cp: --backend=" << backend << " is not supported: use cpu, emu or cuda\n";
    std::exit(3);
  }
  if (backend == "cuda")
    if (const std::string reason = gpu::cuda_backend_unavailable_reason(); !reason.empty()) {
      std::cerr << "bench_cp: --backend=cuda: no CUDA device: " << reason << "; run on a machine with an NVIDIA GPU\n";
      std::exit(3);
    }
  return backend;
}

}  // namespace
}  // namespace gdnv::cp

int main(int argc, char** argv) {
  gdnv::keep_freed_memory();
  gdnv::cp::register_benchmarks(gdnv::cp::take_backend_flag(argc, argv));
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
