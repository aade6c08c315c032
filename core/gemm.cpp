// Packed, blocked GEMM in the style of BLIS: A is packed in blocks of about kPackRows rows and KC columns
// as MR-row panels, B in [KC, NC] blocks of NR-column panels (each thread its own), and a micro-kernel
// advances one MR x NR tile of C by KC steps of its fused multiply-add chains. A tile enters the kernel
// holding C (or 0 on the first block of a plain product), so each chain runs unbroken over k in order
// whatever the blocking.
#include "core/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "core/gemm_subnormal.hpp"
#include "core/parallel.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GDNV_GEMM_X86 1
#include <immintrin.h>
#endif

namespace gdnv {
namespace {

std::int64_t round_up(std::int64_t x, std::int64_t to) { return (x + to - 1) / to * to; }

// Advances the mr x nr tile t (row stride ld) by kc steps; it starts from 0 instead of t when zero.
// False, with t untouched, where the kernel declines the tile (AVX-512: t holds a subnormal).
using KernelFn = bool (*)(std::int64_t kc, const double* a, const double* b, double* t, std::int64_t ld, bool zero);

// A micro-kernel with its tile (mr x nr) and the blocking that suits it: a [kc, mr] panel of A, whose
// elements the kernel broadcasts, stays in L1 while the kernel walks a row of tiles through B's [kc, nc]
// block in L2, loading each of its [kc, nr] panels as whole vectors; nc is set by the L2 size
// (block_columns).
// `run` may decline a tile whose C holds a subnormal; `plain` takes any tile. `exact_subnormal` (AVX-512)
// advances tiles whose chains can meet subnormals on scaled panels (core/gemm_subnormal.hpp).
using PackAFn = void (*)(const MatrixView<const double>& A, std::int64_t i0, std::int64_t m, std::int64_t k0,
                         std::int64_t kc, double* out);
using PackBFn = void (*)(const MatrixView<const double>& B, std::int64_t k0, std::int64_t kc, std::int64_t j0,
                         std::int64_t n, double* out);
struct Kernel {
  KernelFn run, plain;
  PackAFn pack_a;
  PackBFn pack_b;
  std::int64_t mr, nr, kc, nc;
  bool exact_subnormal = false;
  const char* isa = "";
};
constexpr std::int64_t kMaxTile = 14 * 16;  // the largest tile below

// 6 x 8, one std::fma at a time.
bool kernel_portable(std::int64_t kc, const double* a, const double* b, double* t, std::int64_t ld, bool zero) {
  constexpr int MR = 6, NR = 8;
  double acc[MR][NR];
  for (std::int64_t i = 0; i < MR; ++i)
    for (std::int64_t j = 0; j < NR; ++j) acc[i][j] = zero ? 0.0 : t[i * ld + j];
  for (std::int64_t k = 0; k < kc; ++k, a += MR, b += NR)
    for (std::int64_t i = 0; i < MR; ++i)
      for (std::int64_t j = 0; j < NR; ++j) acc[i][j] = std::fma(a[i], b[j], acc[i][j]);
  for (std::int64_t i = 0; i < MR; ++i)
    for (std::int64_t j = 0; j < NR; ++j) t[i * ld + j] = acc[i][j];
  return true;
}

#ifdef GDNV_GEMM_X86
// 6 x 8: 12 ymm accumulators of the 16.
__attribute__((target("avx2,fma"))) bool kernel_avx2(std::int64_t kc, const double* a, const double* b, double* t,
                                                     std::int64_t ld, bool zero) {
  constexpr int MR = 6;
  __m256d c[MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    c[i][0] = zero ? _mm256_setzero_pd() : _mm256_loadu_pd(t + i * ld);
    c[i][1] = zero ? _mm256_setzero_pd() : _mm256_loadu_pd(t + i * ld + 4);
  }
#pragma GCC unroll 4
  for (std::int64_t k = 0; k < kc; ++k, a += MR, b += 8) {
    const __m256d b0 = _mm256_loadu_pd(b), b1 = _mm256_loadu_pd(b + 4);
#pragma GCC unroll 6
    for (int i = 0; i < MR; ++i) {
      const __m256d ai = _mm256_broadcast_sd(a + i);
      c[i][0] = _mm256_fmadd_pd(ai, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_pd(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_pd(t + i * ld, c[i][0]);
    _mm256_storeu_pd(t + i * ld + 4, c[i][1]);
  }
  return true;
}

// MR x 8V: MR * V zmm accumulators of the 32. With `decline`, a C holding a subnormal is left alone.
template <int MR, int V, bool decline>
__attribute__((target("avx512f,avx512dq"))) bool kernel_avx512(std::int64_t kc, const double* a, const double* b,
                                                               double* t, std::int64_t ld, bool zero) {
  __m512d c[MR][V];
  __mmask8 subnormal = 0;
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      c[i][v] = zero ? _mm512_setzero_pd() : _mm512_loadu_pd(t + i * ld + 8 * v);
      if (decline) subnormal |= _mm512_fpclass_pd_mask(c[i][v], 0x20);
    }
  if (subnormal) return false;
#pragma GCC unroll 2
  for (std::int64_t k = 0; k < kc; ++k, a += MR, b += 8 * V) {
    __m512d bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) bv[v] = _mm512_loadu_pd(b + 8 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512d ai = _mm512_set1_pd(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) c[i][v] = _mm512_fmadd_pd(ai, bv[v], c[i][v]);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_storeu_pd(t + i * ld + 8 * v, c[i][v]);
  return true;
}
#endif

// A[i0 : i0+m, k0 : k0+kc] as MR-row panels, each k-major: panel p holds A(i0 + p*MR + r, k0 + k) at
// [p][k][r], zero-padded past m. MR is a compile-time constant so that each step's MR moves unroll: with
// a run-time MR they ran as a loop of one element per turn, 11% of a layer's time.
template <std::int64_t MR>
void pack_a(const MatrixView<const double>& A, std::int64_t i0, std::int64_t m, std::int64_t k0, std::int64_t kc,
            double* out) {
  for (std::int64_t p = 0; p < m; p += MR, out += MR * kc) {
    const std::int64_t rows = std::min(MR, m - p);
    const double* src = &A(i0 + p, k0);
    if (rows < MR) {
      std::fill_n(out, MR * kc, 0.0);
      for (std::int64_t k = 0; k < kc; ++k)
        for (std::int64_t r = 0; r < rows; ++r) out[k * MR + r] = src[r * A.row_stride + k * A.col_stride];
      continue;
    }
    // k outer: the panel's rows are read side by side, as MR sequential streams the hardware prefetches
    // together (row after row, each row's start would wait on memory).
    if (A.row_stride == 1) {
      for (std::int64_t k = 0; k < kc; ++k)
        for (std::int64_t r = 0; r < MR; ++r) out[k * MR + r] = src[r + k * A.col_stride];
      continue;
    }
    for (std::int64_t k = 0; k < kc; ++k)
      for (std::int64_t r = 0; r < MR; ++r) out[k * MR + r] = src[r * A.row_stride + k * A.col_stride];
  }
}

// B[k0 : k0+kc, j0 : j0+n] as NR-column panels: panel p holds B(k0 + k, j0 + p*NR + c) at [p][k][c],
// zero-padded past n. A row-major B is read a few rows at a time across all panels: panel by panel, each
// step of k would land on another row (another page, for a wide B) for 64 bytes. Any other B is read as
// NR column streams side by side, k outer, for the reason pack_a reads A's rows so.
template <std::int64_t NR>
void pack_b(const MatrixView<const double>& B, std::int64_t k0, std::int64_t kc, std::int64_t j0, std::int64_t n,
            double* out) {
  if (B.col_stride == 1) {
    constexpr std::int64_t kRows = 8;
    for (std::int64_t kb = 0; kb < kc; kb += kRows)
      for (std::int64_t p = 0; p < n; p += NR) {
        const std::int64_t cols = std::min(NR, n - p);
        double* panel = out + p * kc;
        for (std::int64_t k = kb; k < std::min(kb + kRows, kc); ++k) {
          const double* src = &B(k0 + k, j0 + p);
          if (cols == NR) {
            for (std::int64_t c = 0; c < NR; ++c) panel[k * NR + c] = src[c];
            continue;
          }
          for (std::int64_t c = 0; c < NR; ++c) panel[k * NR + c] = c < cols ? src[c] : 0.0;
        }
      }
    return;
  }
  for (std::int64_t p = 0; p < n; p += NR, out += NR * kc) {
    const std::int64_t cols = std::min(NR, n - p);
    const double* src = &B(k0, j0 + p);
    if (cols < NR) {
      std::fill_n(out, NR * kc, 0.0);
      for (std::int64_t c = 0; c < cols; ++c)
        for (std::int64_t k = 0; k < kc; ++k) out[k * NR + c] = src[k * B.row_stride + c * B.col_stride];
      continue;
    }
    for (std::int64_t k = 0; k < kc; ++k)
      for (std::int64_t c = 0; c < NR; ++c) out[k * NR + c] = src[k * B.row_stride + c * B.col_stride];
  }
}

// A kernel with its MR x NR tile and the packing routines instantiated for that tile.
template <std::int64_t MR, std::int64_t NR>
constexpr Kernel tile_kernel(KernelFn run, KernelFn plain, std::int64_t kc, bool exact_subnormal, const char* isa) {
  return {run, plain, pack_a<MR>, pack_b<NR>, MR, NR, kc, 0, exact_subnormal, isa};
}

// Blocking by kernel: the A panel the kernel broadcasts from takes 12 KiB (AVX2, kc 256) or 28 KiB
// (AVX-512, kc 256) of L1, and the B panels stream through the rest. This is how MKL's and BLIS's AVX-512
// kernels keep their operands: the broadcast one stays, the vector-loaded one streams. Kept the other
// way round (a 48 KiB B panel in a 48 KiB L1, the A panel streaming), 14 x 16 at kc 384 ran at 0.75-0.84
// of MKL's speed on a 1536^3 product on one core of an Intel Xeon, measured in turn with MKL in one
// process (bench_gemm's BM_GemmAgainstMkl); this way, at 0.84-0.91 (kc 192-320 alike).
#ifdef GDNV_GEMM_X86
constexpr Kernel kAvx512 =
    tile_kernel<14, 16>(kernel_avx512<14, 2, true>, kernel_avx512<14, 2, false>, 256, true, "AVX-512");
constexpr Kernel kAvx2 = tile_kernel<6, 8>(kernel_avx2, kernel_avx2, 256, false, "AVX2+FMA");
#endif
constexpr Kernel kPortable = tile_kernel<6, 8>(kernel_portable, kernel_portable, 384, false, "portable std::fma");

std::optional<Kernel> find(GemmKernel which) {
#ifdef GDNV_GEMM_X86
  static const bool has_avx512 = __builtin_cpu_supports("avx512f");
  static const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (which == GemmKernel::Avx512 || which == GemmKernel::Best) {
    if (has_avx512) return kAvx512;
    if (which == GemmKernel::Avx512) return std::nullopt;
  }
  if (which == GemmKernel::Avx2 || which == GemmKernel::Best) {
    if (has_avx2) return kAvx2;
    if (which == GemmKernel::Avx2) return std::nullopt;
  }
#endif
  if (which == GemmKernel::Best || which == GemmKernel::Portable) return kPortable;
  return std::nullopt;
}

// B's [kc, nc] block takes half of L2 (glibc reads its size from cpuid; 512 KiB where unknown), at most
// 512 columns: 1 MiB of a Xeon's 2 MiB at kc 256, where 256 and 768 columns ran no faster.
std::int64_t block_columns(const Kernel& kernel) {
  static const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const std::int64_t half_l2 = (l2 > 0 ? l2 : 512 << 10) / 2;
  const std::int64_t panels = half_l2 / (kernel.kc * kernel.nr * std::int64_t{sizeof(double)});
  return std::clamp<std::int64_t>(panels, 4, 512 / kernel.nr) * kernel.nr;
}

Kernel pick(GemmKernel which) {
  std::optional<Kernel> kernel = find(which);
  if (!kernel) throw Error("gemm: this CPU lacks the instructions of the kernel asked for");
  kernel->nc = block_columns(*kernel);
  return *kernel;
}

// Runs op(t, ld) on the tile of C at (i, j) with `rows` x `cols` valid entries: in place when it is whole
// and row-major, else through a padded copy. op returns false where it left t untouched.
// op is taken by reference: a copy of it, stored and then read back in wider moves, made each call wait
// until the previous tile's stores of C had left the store buffer (7% of a product's samples, on the
// instruction that read the copy back).
template <class Op>
bool on_tile(const Kernel& kernel, const MatrixView<double>& C, std::int64_t i, std::int64_t j, std::int64_t rows,
             std::int64_t cols, bool zero, const Op& op) {
  const std::int64_t NR = kernel.nr;
  if (rows == kernel.mr && cols == NR && C.col_stride == 1) return op(&C(i, j), C.row_stride);
  double tile[kMaxTile] = {};
  for (std::int64_t r = 0; r < rows && !zero; ++r)
    for (std::int64_t c = 0; c < cols; ++c) tile[r * NR + c] = C(i + r, j + c);
  if (!op(tile, NR)) return false;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) C(i + r, j + c) = tile[r * NR + c];
  return true;
}

// A packed block's panels as the subnormal path sees them: each one's range, and its copy scaled by
// panel_scale, made when a tile first needs it.
class ScaledPanels {
 public:
  void reset(const double* pack, std::int64_t panels, std::int64_t panel_size) {
    pack_ = pack;
    size_ = panel_size;
    ranges_.resize(static_cast<std::size_t>(panels));
    scales_.assign(static_cast<std::size_t>(panels), -1);
    scaled_.resize(static_cast<std::size_t>(panels * panel_size));
    for (std::int64_t p = 0; p < panels; ++p) ranges_[p] = gemm_detail::panel_range(pack + p * panel_size, panel_size);
  }
  const gemm_detail::PanelRange& range(std::int64_t p) const { return ranges_[static_cast<std::size_t>(p)]; }
  // The panel times 2^scale(p).
  const double* scaled(std::int64_t p) {
    double* out = scaled_.data() + p * size_;
    if (scales_[p] < 0) {
      scales_[p] = gemm_detail::panel_scale(range(p));
      gemm_detail::scale_panel(pack_ + p * size_, size_, scales_[p], out);
    }
    return out;
  }
  int scale(std::int64_t p) const { return scales_[static_cast<std::size_t>(p)]; }

 private:
  const double* pack_ = nullptr;
  std::int64_t size_ = 0;
  std::vector<gemm_detail::PanelRange> ranges_;
  std::vector<int> scales_;
  std::vector<double> scaled_;
};

// Advances C's tile at (i, j) by the `steps` steps from `skip` of A's panel pa and B's panel pb. Where
// the two panels' values could make a chain subnormal (and the kernel has an exact path for that), the
// tile runs on the scaled panels; where the path declines, on the plain kernel.
struct TileJob {
  std::int64_t pa, pb, skip, steps, i, j, rows, cols;
  bool zero;
};
void advance_tile(const Kernel& kernel, const double* a_pack, const double* b_pack, std::int64_t kc,
                  ScaledPanels& a_panels, ScaledPanels& b_panels, const MatrixView<double>& C, const TileJob& t) {
  const std::int64_t a_at = t.pa * kernel.mr * kc + t.skip * kernel.mr,
                     b_at = t.pb * kernel.nr * kc + t.skip * kernel.nr;
  const auto with = [&](KernelFn f) {
    return on_tile(kernel, C, t.i, t.j, t.rows, t.cols, t.zero, [&](double* tile, std::int64_t ld) {
      return f(t.steps, a_pack + a_at, b_pack + b_at, tile, ld, t.zero);
    });
  };
  // Both panels scaled, else one of them (a C too large for the whole scale can take part of it): first the
  // one with the smaller values, which holds any subnormals. Left unscaled, those take an assist in every
  // FMA they enter: with the other panel scaled first, dA += d_bk W^T in the chunked core's backward (W's
  // late rows subnormal) took 0.94 ms a call instead of 0.1 ms, 29% of the core's GEMM time.
  const auto exact = [&] {
    const gemm_detail::PanelRange &ra = a_panels.range(t.pa), &rb = b_panels.range(t.pb);
    if (!gemm_detail::fits_exact_path(ra) || !gemm_detail::fits_exact_path(rb)) return false;
    const double *a = a_panels.scaled(t.pa) + t.skip * kernel.mr, *b = b_panels.scaled(t.pb) + t.skip * kernel.nr;
    const int sa = a_panels.scale(t.pa), sb = b_panels.scale(t.pb);
    struct Choice {
      const double *a, *b;
      int s;
    };
    const Choice a_only{a, b_pack + b_at, sa}, b_only{a_pack + a_at, b, sb};
    const bool b_smaller = rb.min_nonzero < ra.min_nonzero;
    const Choice choices[] = {{a, b, sa + sb}, b_smaller ? b_only : a_only, b_smaller ? a_only : b_only};
    for (const auto& c : choices)
      if (on_tile(kernel, C, t.i, t.j, t.rows, t.cols, t.zero, [&](double* tile, std::int64_t ld) {
            return gemm_detail::subnormal_tile_avx512(t.steps, c.a, c.b, tile, ld, t.zero, c.s);
          }))
        return true;
    return false;
  };
  if (kernel.exact_subnormal) {
    if (gemm_detail::never_subnormal(a_panels.range(t.pa), b_panels.range(t.pb)) && with(kernel.run)) return;
    if (exact()) return;
  }
  with(kernel.plain);
}

// Asks the cache for the tile of C that follows the one at row i, column j in a block of columns
// [j_begin, j_end) and rows up to i_end (columns first): the kernel loads a tile before its first fma,
// and from memory each row would stall all of the tile's chains.
void prefetch_next_tile(const Kernel& kernel, const MatrixView<double>& C, std::int64_t j_begin, std::int64_t j_end,
                        std::int64_t i, std::int64_t j, std::int64_t i_end) {
  j += kernel.nr;
  if (j >= j_end) {
    j = j_begin;
    i += kernel.mr;
  }
  if (i >= i_end) return;
  for (std::int64_t r = 0; r < kernel.mr && i + r < i_end; ++r) {
    __builtin_prefetch(&C(i + r, j), 1);
    __builtin_prefetch(&C(i + r, std::min(j + kernel.nr, j_end) - 1), 1);
  }
}

// `count` doubles of `buffer` starting on a cache line, so that each packed row of B is one line.
double* aligned(std::vector<double>& buffer, std::int64_t count) {
  constexpr std::size_t kLine = 64;
  buffer.resize(static_cast<std::size_t>(count) + kLine / sizeof(double));
  void* p = buffer.data();
  std::size_t space = buffer.size() * sizeof(double);
  return static_cast<double*>(std::align(kLine, static_cast<std::size_t>(count) * sizeof(double), p, space));
}

// The steps [k0 + skip, k0 + skip + steps) of a K block that an MR-row panel of A starting at row r
// needs: a lower triangular row i stops at k = i, an upper one starts there.
std::pair<std::int64_t, std::int64_t> panel_steps(Triangle a, std::int64_t r, std::int64_t MR, std::int64_t k0,
                                                  std::int64_t kc) {
  if (a == Triangle::Lower) return {0, std::clamp(r + MR - k0, std::int64_t{0}, kc)};
  if (a == Triangle::Upper) {
    const std::int64_t skip = std::clamp(r - k0, std::int64_t{0}, kc);
    return {skip, kc - skip};
  }
  return {0, kc};
}

void check_shapes(const MatrixView<const double>& A, const MatrixView<const double>& B, const MatrixView<double>& C) {
  if (A.cols != B.rows || C.rows != A.rows || C.cols != B.cols)
    throw Error("gemm: C [" + std::to_string(C.rows) + ", " + std::to_string(C.cols) + "] = A [" +
                std::to_string(A.rows) + ", " + std::to_string(A.cols) + "] B [" + std::to_string(B.rows) + ", " +
                std::to_string(B.cols) + "] does not conform");
}

// The rows of A packed at a time, about: 2 MiB at kc 256, in L3 while B's blocks pass them. A block of C
// with M rows packs A in pack_blocks(M) even blocks of 683 to 1535 rows (M rounded to the nearest
// multiple of kPackRows, so that a block of C rounded up to whole tiles, e.g. 1036 rows, is one), and B
// once for each.
constexpr std::int64_t kPackRows = 1024;
std::int64_t pack_blocks(std::int64_t M) { return std::max<std::int64_t>((M + kPackRows / 2) / kPackRows, 1); }

// C = A B (or C += A B) on one thread, A's rows offset by `row0` in the whole product (for its triangle).
void gemm_slab(const Kernel& kernel, const MatrixView<const double>& A, const MatrixView<const double>& B,
               const MatrixView<double>& C, const GemmOptions& options, std::int64_t row0) {
  const std::int64_t M = C.rows, N = C.cols, K = A.cols;
  const std::int64_t MR = kernel.mr, NR = kernel.nr, KC = kernel.kc, NC = kernel.nc;
  thread_local std::vector<double> a_buffer, b_buffer;
  thread_local ScaledPanels a_panels, b_panels;
  const std::int64_t row_blocks = pack_blocks(M), rows = round_up((M + row_blocks - 1) / row_blocks, MR);
  double* const a_pack = aligned(a_buffer, rows * KC);
  double* const b_pack = aligned(b_buffer, round_up(std::min(N, NC), NR) * KC);
  for (std::int64_t i0 = 0; i0 < M; i0 += rows) {
    const std::int64_t m = std::min(rows, M - i0);
    for (std::int64_t k0 = 0; k0 < K; k0 += KC) {
      const std::int64_t kc = std::min(KC, K - k0);
      const bool from_zero = k0 == 0 && !options.accumulate;
      kernel.pack_a(A, i0, m, k0, kc, a_pack);
      if (kernel.exact_subnormal) a_panels.reset(a_pack, (m + MR - 1) / MR, MR * kc);
      for (std::int64_t j0 = 0; j0 < N; j0 += NC) {
        const std::int64_t n = std::min(NC, N - j0);
        kernel.pack_b(B, k0, kc, j0, n, b_pack);
        if (kernel.exact_subnormal) b_panels.reset(b_pack, (n + NR - 1) / NR, NR * kc);
        for (std::int64_t ip = 0; ip < m; ip += MR)
          for (std::int64_t jp = 0; jp < n; jp += NR) {
            prefetch_next_tile(kernel, C, j0, j0 + n, i0 + ip, j0 + jp, i0 + m);
            const auto [skip, steps] = panel_steps(options.a, row0 + i0 + ip, MR, k0, kc);
            const TileJob job{
                ip / MR, jp / NR, skip, steps, i0 + ip, j0 + jp, std::min(MR, m - ip), std::min(NR, n - jp), from_zero};
            advance_tile(kernel, a_pack, b_pack, kc, a_panels, b_panels, C, job);
          }
      }
    }
  }
}

bool is_negative_zero(double x) { return x == 0 && std::signbit(x); }

// The chain terms a triangular A's skipped zeros would have run, fma(0, B(k, j), acc) = acc + (+-0), change
// acc only where it is -0 and some such 0 B(k, j) is +0: then acc is +0. The kernels skip whole panels'
// zeros (a lower row i stops at the end of its mr-row panel, an upper one starts at the panel's start),
// so this settles those signs as the whole chain has them, whatever mr. Before the product for an upper
// A (its skipped terms come first; only an accumulated C can hold -0), after it for a lower one.
void settle_skipped_zeros(const MatrixView<const double>& B, const MatrixView<double>& C, Triangle a, std::int64_t mr) {
  const std::int64_t K = B.rows;
  for (std::int64_t i = 0; i < C.rows; ++i) {
    const std::int64_t panel = i / mr * mr;
    const std::int64_t k_begin = a == Triangle::Lower ? std::min(panel + mr, K) : 0;
    const std::int64_t k_end = a == Triangle::Lower ? K : std::min(panel, K);
    for (std::int64_t j = 0; j < C.cols; ++j) {
      if (!is_negative_zero(C(i, j))) continue;
      for (std::int64_t k = k_begin; k < k_end; ++k)
        if (!std::signbit(B(k, j))) {
          C(i, j) = 0.0;
          break;
        }
    }
  }
}

// C's blocks for the threads: `rows` x `cols` blocks of row_size x col_size (multiples of the tile).
struct Blocks {
  std::int64_t rows, cols, row_size, col_size;
};

// The least work worth a block of its own: a product of 2^20 multiply-adds (64x128x128) took 60-70 us on
// the calling thread and 90-100 us split over two, starting and joining a thread included.
constexpr std::int64_t kBlockWork = std::int64_t{1} << 20;

// Four blocks per thread, taken in turn, so that a thread slowed by other work on its core (a shared
// machine's neighbour) takes fewer: beside a thread at 70% speed, a product split two blocks per thread
// takes 22% longer than an even share of the work would, four per thread 6%. Fewer where the product
// is small: no block under kBlockWork, and a product under twice that stays whole on the calling thread.
// Each block packs its own A rows and B columns, so of the splits into that many blocks the one that
// packs the fewest elements: A once per column of blocks, B once per row of blocks and block of A's
// rows (pack_blocks; a wide B is split by columns, a tall A by rows).
Blocks split(const Kernel& kernel, std::int64_t M, std::int64_t K, std::int64_t N, int threads) {
  const std::int64_t tiles_m = (M + kernel.mr - 1) / kernel.mr, tiles_n = (N + kernel.nr - 1) / kernel.nr;
  const auto by_work =
      static_cast<std::int64_t>(static_cast<double>(M) * static_cast<double>(K) * static_cast<double>(N) / kBlockWork);
  const std::int64_t wanted =
      threads > 1 ? std::max<std::int64_t>(std::min({std::int64_t{4} * threads, by_work, tiles_m * tiles_n}), 1) : 1;
  Blocks best{1, 1, round_up(M, kernel.mr), round_up(N, kernel.nr)};
  // Exactly `wanted` blocks first: one more would give some threads a block more than the others.
  std::pair<bool, double> best_cost{true, INFINITY};
  for (std::int64_t rows = 1; rows <= std::min(wanted, tiles_m); ++rows) {
    const std::int64_t cols = std::min((wanted + rows - 1) / rows, tiles_n);
    if (rows * cols < wanted) continue;
    const std::int64_t row_size = (tiles_m + rows - 1) / rows * kernel.mr;
    const double packed =
        static_cast<double>(M * K) * cols + static_cast<double>(K * N) * rows * pack_blocks(std::min(row_size, M));
    const std::pair<bool, double> cost{rows * cols != wanted, packed};
    if (cost >= best_cost) continue;
    best_cost = cost;
    best = {rows, cols, row_size, (tiles_n + cols - 1) / cols * kernel.nr};
  }
  return best;
}

}  // namespace

bool gemm_kernel_available(GemmKernel kernel) { return find(kernel).has_value(); }

std::string gemm_kernel_name(GemmKernel kernel) {
  const Kernel k = pick(kernel);
  return std::string(k.isa) + " " + std::to_string(k.mr) + "x" + std::to_string(k.nr);
}

void gemm(MatrixView<const double> A, MatrixView<const double> B, MatrixView<double> C, GemmOptions options) {
  check_shapes(A, B, C);
  const std::int64_t M = C.rows, K = A.cols;
  if (K == 0) {
    for (std::int64_t i = 0; i < M && !options.accumulate; ++i)
      for (std::int64_t j = 0; j < C.cols; ++j) C(i, j) = 0;
    return;
  }
  const Kernel kernel = pick(options.kernel);
  if (options.a == Triangle::Upper && options.accumulate) settle_skipped_zeros(B, C, options.a, kernel.mr);
  const int threads = options.threads > 0 ? options.threads : hardware_threads();
  const Blocks blocks = split(kernel, M, K, C.cols, threads);
  parallel_for(blocks.rows * blocks.cols, threads, [&](std::int64_t task) {
    const std::int64_t i0 = task / blocks.cols * blocks.row_size, j0 = task % blocks.cols * blocks.col_size;
    if (i0 >= M || j0 >= C.cols) return;
    const std::int64_t m = std::min(blocks.row_size, M - i0), n = std::min(blocks.col_size, C.cols - j0);
    const MatrixView<const double> A_block{&A(i0, 0), m, K, A.row_stride, A.col_stride};
    const MatrixView<const double> B_block{&B(0, j0), K, n, B.row_stride, B.col_stride};
    const MatrixView<double> C_block{&C(i0, j0), m, n, C.row_stride, C.col_stride};
    gemm_slab(kernel, A_block, B_block, C_block, options, i0);
  });
  if (options.a == Triangle::Lower) settle_skipped_zeros(B, C, options.a, kernel.mr);
}

}  // namespace gdnv
