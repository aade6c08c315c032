#include "core/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace gdnv {

Metrics compare(const Tensor& ref, const Tensor& cand) {
  if (ref.shape() != cand.shape())
    throw Error("compare: shapes differ, " + shape_str(ref.shape()) + " vs " + shape_str(cand.shape()));
  Metrics m;
  m.numel = ref.numel();
  m.bitwise = ref.bitwise_equal(cand);
  double diff2 = 0, ref2 = 0, cand2 = 0, dot = 0;
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < m.numel; ++i) {
    const double r = ref.get(i), c = cand.get(i);
    m.nan_ref += std::isnan(r);
    m.inf_ref += std::isinf(r);
    m.nan_cand += std::isnan(c);
    m.inf_cand += std::isinf(c);
    if (!std::isfinite(r) || !std::isfinite(c)) continue;
    ++finite;
    m.ref_max_abs = std::max(m.ref_max_abs, std::abs(r));
    const double d = std::abs(c - r);
    if (m.max_abs_index < 0 || d > m.max_abs) {
      m.max_abs = d;
      m.max_abs_index = i;
    }
    if (r != 0 && d / std::abs(r) > m.max_rel) {
      m.max_rel = d / std::abs(r);
      m.max_rel_index = i;
    }
    diff2 += d * d;
    ref2 += r * r;
    cand2 += c * c;
    dot += r * c;
  }
  const double n = std::max<std::int64_t>(finite, 1);
  m.ref_rms = std::sqrt(ref2 / n);
  m.rel_rms = std::sqrt(diff2 / n) / (m.ref_rms + 1e-12);
  if (ref2 == 0 && cand2 == 0) m.one_minus_cos = 0;
  else if (ref2 == 0 || cand2 == 0) m.one_minus_cos = 1;
  else m.one_minus_cos = std::max(0.0, 1.0 - dot / (std::sqrt(ref2) * std::sqrt(cand2)));  // rounding can dip below 0
  m.snr_db = diff2 == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(ref2 / diff2);
  return m;
}

std::int64_t mismatches(const Tensor& ref, const Tensor& cand, double atol, double rtol) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), c = cand.get(i);
    if (!std::isfinite(r) || !std::isfinite(c)) {
      const bool same = (std::isnan(r) && std::isnan(c)) || r == c;
      count += !same;
      continue;
    }
    count += std::abs(c - r) > atol + rtol * std::abs(r);
  }
  return count;
}

Tolerances tolerances(const Tensor& ref, const Tensor& cand) {
  if (ref.shape() != cand.shape())
    throw Error("tolerances: shapes differ, " + shape_str(ref.shape()) + " vs " + shape_str(cand.shape()));
  constexpr double inf = std::numeric_limits<double>::infinity();
  Tolerances t;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double r = ref.get(i), c = cand.get(i);
    if (!std::isfinite(r) || !std::isfinite(c)) {
      if ((std::isnan(r) && std::isnan(c)) || r == c) {
        ++t.exact;
        continue;
      }
      ++t.nonfinite;
      t.min_atol = t.min_rtol = inf;
      continue;
    }
    const double d = std::abs(c - r);
    if (d == 0) {
      ++t.exact;
      continue;
    }
    ++t.decades[static_cast<int>(std::floor(std::log10(d)))];
    t.min_atol = std::max(t.min_atol, d);
    t.min_rtol = std::max(t.min_rtol, r == 0 ? inf : d / std::abs(r));
  }
  return t;
}

std::string decade_str(int k) {
  char decade[16];
  std::snprintf(decade, sizeof decade, "1e%+03d", k);
  return decade;
}

std::string decade_histogram(const Tolerances& t) {
  std::string out = "0:" + std::to_string(t.exact);
  for (const auto& [k, n] : t.decades) out += " " + decade_str(k) + ":" + std::to_string(n);
  if (t.nonfinite) out += " nan/inf:" + std::to_string(t.nonfinite);
  return out;
}

std::string decade_bars(const Tolerances& t, int lo, int hi) {
  static const char* const kBars[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  std::int64_t peak = 0;
  for (const auto& [k, n] : t.decades) peak = std::max(peak, n);
  std::string out;
  for (int k = lo; k <= hi; ++k) {
    const auto it = t.decades.find(k);
    if (it == t.decades.end() || it->second == 0) {
      out += " ";
      continue;
    }
    // Log height: one element is the lowest bar, the peak the highest.
    const double level =
        peak > 1 ? 7.0 * std::log(static_cast<double>(it->second)) / std::log(static_cast<double>(peak)) : 7.0;
    out += kBars[static_cast<int>(std::lround(level))];
  }
  return out;
}

}  // namespace gdnv
