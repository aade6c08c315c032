#pragma once
// Tensor comparison metrics (docs/DESIGN.md §4), computed in fp64 over the whole tensor.
#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.hpp"

namespace gdnv {

struct Metrics {
  std::int64_t numel = 0;
  double max_abs = 0;  // max |a - b|
  std::int64_t max_abs_index = -1;
  double max_rel = 0;  // max |a - b| / |ref| over elements with ref != 0
  std::int64_t max_rel_index = -1;
  double rel_rms = 0;        // rms(a - b) / (rms(ref) + 1e-12)
  double one_minus_cos = 0;  // 1 - <a, b> / (|a| |b|); 0 when both are all-zero
  double snr_db = 0;         // 10 log10(sum ref^2 / sum (a - b)^2); +inf when equal
  std::int64_t nan_ref = 0, inf_ref = 0, nan_cand = 0, inf_cand = 0;
  bool bitwise = false;    // same dtype, shape and raw bytes
  double ref_rms = 0;      // rms(ref): a metric on an all-zero reference proves little
  double ref_max_abs = 0;  // max |ref| over finite elements: the scale of a norm-wise tolerance
};

// `ref` and `cand` must have the same shape (any float dtypes). Non-finite elements are counted and
// excluded from the numeric metrics.
Metrics compare(const Tensor& ref, const Tensor& cand);

// Elements with |cand - ref| > atol + rtol |ref| (a NaN/Inf on either side counts, unless both are the
// same non-finite value).
std::int64_t mismatches(const Tensor& ref, const Tensor& cand, double atol, double rtol);

// What it takes for `cand` to pass an elementwise |cand - ref| <= atol + rtol |ref| check, and how its
// errors spread: min_atol at rtol 0 (max |err|) and min_rtol at atol 0 (max |err| / |ref|), each +inf
// when no value passes (a non-finite mismatch; for min_rtol also an error where ref is 0).
struct Tolerances {
  double min_atol = 0, min_rtol = 0;
  std::int64_t exact = 0;               // |err| == 0
  std::map<int, std::int64_t> decades;  // k -> elements with 10^k <= |err| < 10^(k+1)
  std::int64_t nonfinite = 0;           // a NaN or Inf on either side, not the same on both
};
Tolerances tolerances(const Tensor& ref, const Tensor& cand);
// The decade histogram in one line: "0:12 1e-09:3 1e-08:40" (plus "nan/inf:N" when there are any).
std::string decade_histogram(const Tolerances& t);
// The same histogram as bars over decades lo..hi, one character each, its height the decade's count on a
// log scale against the largest decade's: "▁" one element .. "█" the most, a space none.
std::string decade_bars(const Tolerances& t, int lo, int hi);
// "1e-09": decade k's lower bound.
std::string decade_str(int k);

}  // namespace gdnv
