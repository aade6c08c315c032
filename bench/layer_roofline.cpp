// layer_roofline HIDDEN HK HV DK DV LEN...: the limit the real-size layer is measured against
// (bench/layer_vs_hf.sh), from this machine, now: its CPU, the GEMM kernel the oracle runs on it, its fp64
// FMA peak on every core (bench/fp64_peak.hpp), the layer's forward + backward FLOPs (cost::layer_flops),
// and the roofline time FLOPs / peak. One "name  value" line each; the roofline line's second field is
// the seconds, for the script's arithmetic.
//   layer_roofline 4096 16 32 128 128 1024 2048 1024
#include <cstdio>
#include <iostream>

#include "bench/fp64_peak.hpp"
#include "bench/layer_args.hpp"
#include "core/gemm.hpp"
#include "core/parallel.hpp"
#include "cost/cost.hpp"

namespace {

int layer_roofline(int argc, char** argv) {
  using namespace gdnv;
  if (argc < 7) {
    std::cerr << "usage: layer_roofline HIDDEN HK HV DK DV LEN...\n";
    return 3;
  }
  const bench::LayerArgs args = bench::parse_layer_args(argc, argv, 1);
  const int threads = hardware_threads();
  const bench::Fp64Peak peak = bench::fp64_peak(threads);
  const double flops = cost::layer_flops(args.config, args.lengths);
  std::printf("cpu                    %s, %d threads\n", bench::cpu_model().c_str(), threads);
  std::printf("gemm kernel            %s\n", gemm_kernel_name().c_str());
  if (peak.gflops <= 0) {
    std::printf("fp64 peak              not measured: this CPU has no FMA instructions\n");
    return 0;
  }
  std::printf("fp64 peak              %.1f GFLOP/s (%s chains on %d threads, measured now)\n", peak.gflops,
              peak.isa.c_str(), threads);
  std::printf("layer                  %.3f TFLOP (forward + backward, every gradient: cost::layer_flops)\n",
              flops * 1e-12);
  std::printf("roofline               %6.1f s (FLOPs / peak)\n", flops / (peak.gflops * 1e9));
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return gdnv::bench::run_tool("layer_roofline", layer_roofline, argc, argv); }
