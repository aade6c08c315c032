#pragma once
// The AVX-512 GEMM's exact path for tiles whose chains can meet subnormal numbers (docs/DESIGN.md §7).
// The hardware takes a microcode assist, ~100x an FMA's time, for each vector FMA with a subnormal
// operand or result; the chunked core's decays (e^{gamma} down to 1e-308 and below) feed it millions.
// Here every chain is run 2^s times larger, where its values are normal, and any step whose result
// falls below 2^s DBL_MIN is rounded to the subnormal grid 2^s 2^-1074 in one FMA, so each C(i, j) is
// still the bits of its FMA chain at the original scale.
#include <cstdint>

namespace gdnv::gemm_detail {

// The magnitudes in a packed panel: the smallest nonzero and the largest, and whether all are finite.
struct PanelRange {
  double min_nonzero, max;
  bool finite;
};
PanelRange panel_range(const double* p, std::int64_t n);

// True when no product of a value of `a` and one of `b`, and no partial sum of a chain that starts from
// 0 or a normal number, can be subnormal: each product is 0 or >= 2^-900 in magnitude, so a sum is 0 or
// a nonzero multiple of >= 2^-1005 (its terms' granularity), and normal.
bool never_subnormal(const PanelRange& a, const PanelRange& b);

// The exponent s >= 0 that scales a panel's largest magnitude to at most 2^501 (at most 1000).
int panel_scale(const PanelRange& r);

// True when the panel's values are finite and below 2^501, the bound panel_scale scales them to: scaled
// or not, beside another such panel no step of a chain overflows.
bool fits_exact_path(const PanelRange& r);

// out = in 2^s exactly, without arithmetic on subnormals where s >= 52.
void scale_panel(const double* in, std::int64_t n, int s, double* out);

// The 14 x 16 tile t (row stride ld) advanced by kc steps of panels scaled by 2^s in all (from 0 when
// zero). False, t untouched, where it cannot be done exactly this way (s < 52, t non-finite or too
// large to scale, or a chain crossing into the subnormal range onto a midpoint of its grid with an
// inexact remainder): the caller then runs the plain kernel.
bool subnormal_tile_avx512(std::int64_t kc, const double* a, const double* b, double* t, std::int64_t ld, bool zero,
                           int s);

}  // namespace gdnv::gemm_detail
