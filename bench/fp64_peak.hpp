#pragma once
// The machine's fp64 FMA peak, measured: the limit the benches report the oracle against (bench_reference's
// "peak %", bench/layer_roofline's roofline). Measured rather than taken from a table: the clock under
// vector load, and whether the CPU runs its widest FMA at full rate (Zen 4 runs AVX-512 as 2 x 256 bits),
// are what the GEMM sees.
#include <string>

namespace gdnv::bench {

struct Fp64Peak {
  double gflops = 0;  // 2 flops per multiply-add, every thread together; 0 without FMA instructions
  std::string isa;    // the instructions that reached it: "AVX2 FMA" or "AVX-512 FMA"
};

// FMA chains on `threads` threads at once, best of 3, with each vector width the CPU has; the faster.
Fp64Peak fp64_peak(int threads);

// /proc/cpuinfo's "model name", or "unknown CPU".
std::string cpu_model();

}  // namespace gdnv::bench
