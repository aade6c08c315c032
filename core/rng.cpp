#include "core/rng.hpp"

#include <cmath>

namespace gdnv {

std::uint64_t hash64(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull ^ (stream + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
  x += index * 0x94d049bb133111ebull;
  for (int round = 0; round < 2; ++round) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
  }
  return x;
}

std::uint64_t stream_of(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

double det_log(double x) {
  int e = 0;
  double m = std::frexp(x, &e);   // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752) {  // centre m on 1 so the series below converges fast
    m *= 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);  // log m = 2 atanh(s), |s| < 0.172
  const double s2 = s * s;
  double series = 0.0;
  for (int k = 23; k >= 1; k -= 2) series = series * s2 + 1.0 / k;
  constexpr double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
  return e * ln2_hi + (2.0 * s * series + e * ln2_lo);
}

double Rng::uniform(std::uint64_t i) const { return static_cast<double>(hash64(seed_, stream_, i) >> 11) * 0x1.0p-53; }

double Rng::uniform(std::uint64_t i, double lo, double hi) const { return lo + (hi - lo) * uniform(i); }

double Rng::normal(std::uint64_t i) const {
  // Attempt a uses the counter pair (2i, a) folded into one index; the accept rate is pi/4.
  for (std::uint64_t a = 0;; ++a) {
    const std::uint64_t base = hash64(seed_ ^ 0x5bd1e995ull, stream_, i) + a * 2;
    const double u = 2.0 * static_cast<double>(hash64(seed_, stream_, base) >> 11) * 0x1.0p-53 - 1.0;
    const double v = 2.0 * static_cast<double>(hash64(seed_, stream_, base + 1) >> 11) * 0x1.0p-53 - 1.0;
    const double r2 = u * u + v * v;
    if (r2 > 0.0 && r2 < 1.0) return u * std::sqrt(-2.0 * det_log(r2) / r2);
  }
}

}  // namespace gdnv
