// The subnormal-exact path of the AVX-512 GEMM (core/gemm_subnormal.hpp). Why it is exact:
// - Scaling by a power of two 2^s is exact upwards. A step acc' = fma(a', b', acc') on values 2^s
//   larger rounds to the same bits, scaled, as the original step wherever the original result is
//   normal: 53-bit rounding does not depend on the binade, and no value reaches the overflow range.
// - Where the result is below thr = 2^s DBL_MIN (subnormal at the original scale), the original rounds
//   to the grid u' = 2^s 2^-1074 instead. With acc' already on that grid and |acc'| < thr, and M = thr
//   with the result's sign, acc' + M is exact and x + M for |x| < thr lies in [thr, 2 thr), a binade
//   whose spacing is u': fma(a', b', acc' + M) rounds the exact a' b' + acc' to the grid, ties to even
//   (M is an even multiple of u'), and subtracting M is exact (Sterbenz). A result that rounds to 0
//   keeps the sign of the exact value, as the original's underflow does.
// - Where |acc'| >= thr makes acc' + M inexact (a chain crossing from the lowest binades into the
//   subnormal range), that lane's step is rounded from w = fl(a' b' + acc') instead (round_crossing),
//   and the tile is declined only where w is a midpoint of the grid and acc' - w is inexact.
#include "core/gemm_subnormal.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GDNV_GEMM_X86 1
#endif

namespace gdnv::gemm_detail {
namespace {

constexpr int kMaxScale = 1000, kMinScale = 52;  // 2^-1074 2^52 = DBL_MIN: the grid itself is normal
constexpr int kPanelTop = 501;                   // 2^501 2^501 384 < 2^1011: no step overflows
constexpr int kTileTop = 1010;
constexpr std::uint64_t kMantissa = (std::uint64_t{1} << 52) - 1, kSign = std::uint64_t{1} << 63;

std::uint64_t bits_of(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

double from_bits(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// 2^e for e in [-1022, 1023], from its bits.
double pow2(int e) { return from_bits(static_cast<std::uint64_t>(e + 1023) << 52); }

// x 2^s exactly (for |x| 2^s finite, 0 <= s <= 2045): a subnormal x is its mantissa m times 2^-1074, so
// for s >= 52 m 2^(s-1074) multiplies two normal numbers; 2^s itself in two factors.
double scaled(double x, int s) {
  if (std::fpclassify(x) != FP_SUBNORMAL) return x * pow2(s / 2) * pow2(s - s / 2);
  if (s < kMinScale) return std::ldexp(x, s);
  return std::copysign(static_cast<double>(bits_of(x) & kMantissa) * pow2(s - 1074), x);
}

#ifdef GDNV_GEMM_X86
// x - y, with whether it is exact (Knuth's TwoSum error is 0).
double difference(double x, double y, bool& exact) {
  const double d = x - y, back = d - x;
  exact = (x - (d - back)) + (-y - back) == 0;
  return d;
}

// One step acc + a b of a chain crossing from |acc| >= thr into the subnormal range, where acc + M is
// inexact: rounded to the grid u = thr 2^-52. w = fl(acc + a b) lies below thr on a finer grid, and
// rounding to a finer grid cannot cross a midpoint of u, so w rounds to u as the exact value does, unless
// w is such a midpoint; there the sign of the exact value less w decides, exact where acc - w is (false
// where it is not). A result that rounds to 0 keeps w's sign, the exact value's.
bool round_crossing(double a, double b, double acc, double w, double thr, double& out) {
  const double M = std::copysign(thr, w), half = thr * 0x1p-53;
  const double nearest = (w + M) - M;  // w + M lies in [thr, 2 thr), whose grid is u: ties to even
  if (std::fabs(nearest - w) != half) {
    out = std::copysign(std::fabs(nearest), w);
    return true;
  }
  bool exact = false;
  const double d = difference(acc, w, exact);
  if (!exact) return false;
  const double beyond = std::fma(a, b, d);  // acc + a b - w, its sign exact
  out = beyond == 0 ? std::copysign(std::fabs(nearest), w) : w + std::copysign(half, beyond);
  return true;
}

// round_crossing on the lanes of `lanes`, into those of `out`.
__attribute__((target("avx512f"))) bool round_crossings(__mmask8 lanes, double a, __m512d b, __m512d acc, __m512d w,
                                                        double thr, __m512d& out) {
  alignas(64) double bs[8], accs[8], ws[8], outs[8];
  _mm512_store_pd(bs, b);
  _mm512_store_pd(accs, acc);
  _mm512_store_pd(ws, w);
  _mm512_store_pd(outs, out);
  for (int l = 0; l < 8; ++l)
    if ((lanes >> l & 1) && !round_crossing(a, bs[l], accs[l], ws[l], thr, outs[l])) return false;
  out = _mm512_load_pd(outs);
  return true;
}

// R rows of the 14-row tile (c: R x 16, row stride 16), kc steps. False where a chain crossing from
// |acc| >= thr into the subnormal range cannot be rounded exactly (round_crossing).
template <int R>
__attribute__((target("avx512f,avx512dq"))) bool subnormal_rows(std::int64_t kc, const double* a, const double* b,
                                                                double* c, double thr) {
  const __m512d thr_v = _mm512_set1_pd(thr), zero = _mm512_setzero_pd();
  const __m512d magnitude = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(~kSign)));
  const __m512d sign = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kSign)));
  // The loops over rows and vectors unrolled, so that the 2 R accumulators live in registers: rolled,
  // GCC kept them in memory, and each step's FMA waited on the last step's store (8x the plain kernel's time).
  __m512d acc[R][2];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) acc[i][v] = _mm512_loadu_pd(c + i * 16 + 8 * v);
  for (std::int64_t k = 0; k < kc; ++k, a += 14, b += 16) {
    const __m512d bv[2] = {_mm512_loadu_pd(b), _mm512_loadu_pd(b + 8)};
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
      __m512d r[2];
      __mmask8 below[2];
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        r[v] = _mm512_fmadd_pd(ai, bv[v], acc[i][v]);
        below[v] = _mm512_mask_cmp_pd_mask(_mm512_cmp_pd_mask(r[v], zero, _CMP_NEQ_UQ), _mm512_and_pd(r[v], magnitude),
                                           thr_v, _CMP_LT_OQ);
      }
      // One test and branch for the row's two vectors, not one each (BM_GemmSubnormal/0 10% faster).
      if (below[0] | below[1]) {
#pragma GCC unroll 2
        for (int v = 0; v < 2; ++v) {
          if (!below[v]) continue;
          // M - M is +0, but a nonzero x that rounds to 0 is a zero of its sign: r's.
          const __m512d r_sign = _mm512_and_pd(r[v], sign), M = _mm512_or_pd(thr_v, r_sign);
          const __m512d shifted = _mm512_add_pd(acc[i][v], M);
          // Exact for |acc| < thr; above, Fast2Sum (|acc| >= |M|) gives the addition's rounding error.
          const __mmask8 large =
              _mm512_mask_cmp_pd_mask(below[v], _mm512_and_pd(acc[i][v], magnitude), thr_v, _CMP_GE_OQ);
          __mmask8 crossing = 0;
          if (large) {
            const __m512d error = _mm512_sub_pd(M, _mm512_sub_pd(shifted, acc[i][v]));
            crossing = _mm512_mask_cmp_pd_mask(large, error, zero, _CMP_NEQ_UQ);
          }
          const __m512d on_grid = _mm512_sub_pd(_mm512_fmadd_pd(ai, bv[v], shifted), M);
          __m512d next = _mm512_mask_blend_pd(below[v], r[v], _mm512_or_pd(on_grid, r_sign));
          if (crossing && !round_crossings(crossing, a[i], bv[v], acc[i][v], r[v], thr, next)) return false;
          r[v] = next;
        }
      }
      acc[i][0] = r[0];
      acc[i][1] = r[1];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < 2; ++v) _mm512_storeu_pd(c + i * 16 + 8 * v, acc[i][v]);
  return true;
}

// scaled() on 8 lanes (s >= 52): the subnormal lanes from their integer mantissas, the others zeroed
// before the multiplications, so that no lane takes an assist.
__attribute__((target("avx512f,avx512dq"))) __m512d scaled8(__m512d x, int s) {
  const __mmask8 subnormal = _mm512_fpclass_pd_mask(x, 0x20);
  const __m512d normal = _mm512_maskz_mov_pd(static_cast<__mmask8>(~subnormal), x);
  __m512d r = _mm512_mul_pd(_mm512_mul_pd(normal, _mm512_set1_pd(pow2(s / 2))), _mm512_set1_pd(pow2(s - s / 2)));
  if (subnormal) {
    const __m512i mantissa = _mm512_and_si512(_mm512_castpd_si512(x), _mm512_set1_epi64(kMantissa));
    const __m512d m = _mm512_mul_pd(_mm512_cvtepi64_pd(mantissa), _mm512_set1_pd(pow2(s - 1074)));
    const __m512d sign = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kSign)));
    r = _mm512_mask_blend_pd(subnormal, r, _mm512_or_pd(m, _mm512_and_pd(x, sign)));
  }
  return r;
}

// r 2^-s exactly on 8 lanes, for r on the grid 2^(s-1074): at or above thr in two factors (each step
// stays normal); below it the result is subnormal, assembled from its integer mantissa
// |r| 2^(1074-s) < 2^52 and r's sign instead of multiplied into (an assist).
__attribute__((target("avx512f,avx512dq"))) __m512d unscaled8(__m512d r, int s, double thr) {
  const __m512d sign = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kSign)));
  const __m512d magnitude = _mm512_andnot_pd(sign, r);
  const __mmask8 small = _mm512_cmp_pd_mask(magnitude, _mm512_set1_pd(thr), _CMP_LT_OQ);
  const __m512d large = _mm512_maskz_mov_pd(static_cast<__mmask8>(~small), r);
  __m512d out = _mm512_mul_pd(_mm512_mul_pd(large, _mm512_set1_pd(pow2(-(s / 2)))), _mm512_set1_pd(pow2(-(s - s / 2))));
  if (small) {
    const __m512d m = _mm512_mul_pd(_mm512_maskz_mov_pd(small, magnitude), _mm512_set1_pd(pow2(1074 - s)));
    const __m512i bits = _mm512_or_si512(_mm512_cvttpd_epu64(m), _mm512_castpd_si512(_mm512_and_pd(r, sign)));
    out = _mm512_mask_blend_pd(small, out, _mm512_castsi512_pd(bits));
  }
  return out;
}
#endif

// Adds v to a range (the scalar tail of panel_range).
void include(PanelRange& r, double v) {
  const double x = std::fabs(v);
  r.finite &= x <= DBL_MAX;
  r.max = std::max(r.max, x);
  r.min_nonzero = std::min(r.min_nonzero, x == 0 ? INFINITY : x);
}

}  // namespace

#ifdef GDNV_GEMM_X86
// On the magnitudes' bits, whose unsigned order is the doubles' order: the largest is the max (NaN and inf
// above every finite one), and the smallest of bits - 1 skips the zeros (0 - 1 wraps to the top). Three
// integer operations per vector, where the comparisons and blends on doubles took six.
__attribute__((target("avx512f"))) PanelRange panel_range(const double* p, std::int64_t n) {
  const __m512i magnitude = _mm512_set1_epi64(static_cast<long long>(~kSign)), one = _mm512_set1_epi64(1);
  __m512i lo = _mm512_set1_epi64(-1), hi = _mm512_setzero_si512();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512i x = _mm512_and_si512(_mm512_loadu_si512(p + i), magnitude);
    // The masked forms, all lanes set: GCC 12 warns that the plain ones read an undefined vector.
    hi = _mm512_mask_max_epu64(hi, 0xFF, hi, x);
    lo = _mm512_mask_min_epu64(lo, 0xFF, lo, _mm512_sub_epi64(x, one));
  }
  alignas(64) std::uint64_t lows[8], highs[8];
  _mm512_store_si512(lows, lo);
  _mm512_store_si512(highs, hi);
  const std::uint64_t top = *std::max_element(highs, highs + 8), bottom = *std::min_element(lows, lows + 8);
  PanelRange r{bottom == ~std::uint64_t{0} ? INFINITY : from_bits(bottom + 1), from_bits(top), top < bits_of(INFINITY)};
  for (; i < n; ++i) include(r, p[i]);
  return r;
}
#else
PanelRange panel_range(const double* p, std::int64_t n) {
  PanelRange r{INFINITY, 0, true};
  for (std::int64_t i = 0; i < n; ++i) include(r, p[i]);
  return r;
}
#endif

bool never_subnormal(const PanelRange& a, const PanelRange& b) {
  return a.finite && b.finite && a.min_nonzero >= DBL_MIN && b.min_nonzero >= DBL_MIN &&
         a.min_nonzero * b.min_nonzero >= 0x1p-900;
}

int panel_scale(const PanelRange& r) {
  if (r.max == 0) return kMaxScale;
  return std::clamp(kPanelTop - 1 - std::ilogb(r.max), 0, kMaxScale);
}

bool fits_exact_path(const PanelRange& r) { return r.finite && r.max < std::ldexp(1.0, kPanelTop); }

#ifdef GDNV_GEMM_X86
__attribute__((target("avx512f,avx512dq"))) void scale_panel(const double* in, std::int64_t n, int s, double* out) {
  std::int64_t i = 0;
  if (s >= kMinScale)
    for (; i + 8 <= n; i += 8) _mm512_storeu_pd(out + i, scaled8(_mm512_loadu_pd(in + i), s));
  for (; i < n; ++i) out[i] = scaled(in[i], s);
}
#else
void scale_panel(const double* in, std::int64_t n, int s, double* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = scaled(in[i], s);
}
#endif

#ifdef GDNV_GEMM_X86
__attribute__((target("avx512f,avx512dq"))) bool subnormal_tile_avx512(std::int64_t kc, const double* a,
                                                                       const double* b, double* t, std::int64_t ld,
                                                                       bool zero, int s) {
  if (s < kMinScale || s > 2 * kMaxScale) return false;
  const double thr = std::ldexp(DBL_MIN, s);
  // |C| 2^s below 2^(kTileTop + 1): no step overflows.
  const __m512d limit = _mm512_set1_pd(pow2(kTileTop + 1 - s));
  const __m512d sign = _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kSign)));
  alignas(64) double c[14 * 16];
  for (int i = 0; i < 14; ++i)
    for (int v = 0; v < 2; ++v) {
      __m512d x = _mm512_setzero_pd();
      if (!zero) {
        x = _mm512_loadu_pd(t + i * ld + 8 * v);
        if (_mm512_fpclass_pd_mask(x, 0x99) || _mm512_cmp_pd_mask(_mm512_andnot_pd(sign, x), limit, _CMP_GE_OQ))
          return false;
        x = scaled8(x, s);
      }
      _mm512_store_pd(c + i * 16 + 8 * v, x);
    }
  if (!subnormal_rows<7>(kc, a, b, c, thr) || !subnormal_rows<7>(kc, a + 7, b, c + 7 * 16, thr)) return false;
  for (int i = 0; i < 14; ++i)
    for (int v = 0; v < 2; ++v)
      _mm512_storeu_pd(t + i * ld + 8 * v, unscaled8(_mm512_load_pd(c + i * 16 + 8 * v), s, thr));
  return true;
}
#else
bool subnormal_tile_avx512(std::int64_t, const double*, const double*, double*, std::int64_t, bool, int) {
  return false;
}
#endif

}  // namespace gdnv::gemm_detail
