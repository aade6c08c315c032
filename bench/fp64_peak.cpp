#include "bench/fp64_peak.hpp"

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <vector>

#include "core/parallel.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GDNV_PEAK_X86 1
#include <immintrin.h>
#endif

namespace gdnv::bench {
namespace {

#ifdef GDNV_PEAK_X86
// 12 independent FMA chains of 4 (AVX2) or 8 (AVX-512) doubles: 2 FMA units x 4 cycles of latency keep
// both units busy. Every chain feeds the result: one that did not would be dead code, and the count too high.
__attribute__((target("avx2,fma"))) double fma_chains_avx2(std::int64_t n) {
  __m256d c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_pd(i);
  const __m256d a = _mm256_set1_pd(0.999999), b = _mm256_set1_pd(1e-9);
  for (std::int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) c[i] = _mm256_fmadd_pd(a, c[i], b);
  }
  __m256d sum = c[0];
  for (int i = 1; i < 12; ++i) sum = _mm256_add_pd(sum, c[i]);
  double out[4];
  _mm256_storeu_pd(out, sum);
  return out[0];
}

__attribute__((target("avx512f"))) double fma_chains_avx512(std::int64_t n) {
  __m512d c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_pd(i);
  const __m512d a = _mm512_set1_pd(0.999999), b = _mm512_set1_pd(1e-9);
  for (std::int64_t k = 0; k < n; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) c[i] = _mm512_fmadd_pd(a, c[i], b);
  }
  __m512d sum = c[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_pd(sum, c[i]);
  double out[8];
  _mm512_storeu_pd(out, sum);
  return out[0];
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// GFLOP/s of `threads` threads each running chains(kSteps) at once, best of 3. Each thread's rate is
// over its own CPU time, so other processes taking turns on the cores (a shared machine) do not lower it;
// threads sharing a core's FMA units (SMT) still do.
double chains_gflops(double (*chains)(std::int64_t), int lanes, int threads) {
  constexpr std::int64_t kSteps = 50'000'000;
  const double flops_per_thread = 12.0 * lanes * 2 * kSteps;
  std::vector<double> sink(static_cast<std::size_t>(threads)), seconds(sink.size());
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    parallel_for(threads, threads, [&](std::int64_t t) {
      const double t0 = thread_cpu_seconds();
      sink[static_cast<std::size_t>(t)] = chains(kSteps);
      seconds[static_cast<std::size_t>(t)] = thread_cpu_seconds() - t0;
    });
    double gflops = 0;
    for (double s : seconds) gflops += flops_per_thread * 1e-9 / s;
    best = std::max(best, gflops);
  }
  // The chains' results are read, so no compiler may drop them (they are finite: each converges to 1e-3).
  volatile double keep = 0;
  for (double x : sink) keep = keep + x;
  return best;
}
#endif

}  // namespace

Fp64Peak fp64_peak(int threads) {
  Fp64Peak peak;
#ifdef GDNV_PEAK_X86
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return peak;
  peak = {chains_gflops(fma_chains_avx2, 4, threads), "AVX2 FMA"};
  if (__builtin_cpu_supports("avx512f")) {
    const double wide = chains_gflops(fma_chains_avx512, 8, threads);
    if (wide > peak.gflops) peak = {wide, "AVX-512 FMA"};
  }
#else
  (void)threads;
#endif
  return peak;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      const auto start = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
      if (start != std::string::npos) return line.substr(start);
    }
  return "unknown CPU";
}

}  // namespace gdnv::bench
