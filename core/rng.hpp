#pragma once
// Counter-based random numbers: every value is a pure function of (seed, stream, index), so the full
// tensor the oracle sees and each rank's shard are bit-identical without communication, on any machine.
// Only integer ops and IEEE +,-,*,/,sqrt are used (no libm, no std::*_distribution), and the project
// compiles with -ffp-contract=off, so the bits do not depend on the standard library or the CPU.
#include <cstdint>
#include <string_view>

namespace gdnv {

// 64-bit mix of the three counters (SplitMix64 finaliser over a Weyl combination).
std::uint64_t hash64(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
// Stable stream id of a name (FNV-1a), so e.g. each parameter is seeded by its name.
std::uint64_t stream_of(std::string_view name);
// Natural logarithm from IEEE arithmetic only (relative error < 4e-16 for finite x > 0).
double det_log(double x);

class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream) : seed_(seed), stream_(stream) {}
  Rng(std::uint64_t seed, std::string_view stream) : Rng(seed, stream_of(stream)) {}

  double uniform(std::uint64_t i) const;                        // [0, 1), 53 random bits
  double uniform(std::uint64_t i, double lo, double hi) const;  // [lo, hi)
  double normal(std::uint64_t i) const;                         // N(0, 1), Marsaglia polar method

 private:
  std::uint64_t seed_, stream_;
};

}  // namespace gdnv
