#pragma once
// Tensor comparison metrics (docs/DESIGN.md §4), computed in fp64 over the whole tensor.
#include <cstdint>
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

}  // namespace gdnv
