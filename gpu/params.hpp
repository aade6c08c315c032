#pragma once
// Plain parameter structs of the kernels (apart from host launch code): raw pointers to where the backend computes
// (device memory for CUDA, host memory for the emulation) and sizes. One struct per op family; the
// math in gpu/math_*.hpp reads them, gpu/kernels.hpp launches over them.
#include <cstdint>

#include "core/span_map.hpp"

namespace gdnv::gpu {

// Set to `code` (the launch's number, from 1) by a kernel that meets an index outside its range; the
// backend reads it at its next host sync and names the op, as CUDA reports a kernel's fault late.
struct ErrorFlag {
  int* flag;
  int code;
};

// ---- data movement (element size in 16-bit units: every stored dtype is a multiple of 2 bytes) ----
struct RowCopyParams {
  const std::uint16_t* x;
  std::uint16_t* out;
  const std::int64_t* index;  // [M]
  std::int64_t M;             // indexed rows
  std::int64_t row_units;     // 16-bit units per row
  std::int64_t limit;         // rows of the indexed side (x for gather, out for scatter)
  bool gather;                // out[i] = x[index[i]], else out[index[i]] = x[i]
  ErrorFlag error;
};
struct ColumnCopyParams {
  const std::uint16_t* x;
  std::uint16_t* out;
  const std::int64_t* index;  // [E]
  std::int64_t rows, E;
  std::int64_t x_cols, out_cols;  // columns of x and out
  std::int64_t elem_units;        // 16-bit units per element
  bool gather;                    // out[:, j] = x[:, index[j]], else out[:, index[j]] = x[:, j]
  ErrorFlag error;
};
enum class Storage : std::uint8_t { F32, BF16, F64 };
struct AccumulateParams {
  void* y;
  const void* x;
  Storage y_type, x_type;
  std::int64_t n;
};

// ---- norms ----------------------------------------------------------------------------------------
// rmsnorm over rows of n: y = x rstd w; gated: y = rmsnorm(o) w silu(z).
struct NormParams {
  const void* x;         // [rows, n] activations (o for the gated norm)
  const void* z;         // [rows, n] gate, gated norm only (else nullptr)
  const void* w;         // [n]
  const void* dy;        // [rows, n] backward only
  const float* rstd_in;  // [rows] backward only
  void* y;               // [rows, n] forward; dx in backward
  void* dz;              // [rows, n] gated backward only
  float* rstd;           // [rows] forward
  float* dw;             // [n] backward
  std::int64_t rows, n;
  float eps;
  bool bf16;
  bool fast_rsqrt;  // planted fault RmsnormFastRsqrt: rstd by the fast approximation
};

// ---- projections (host emulation; CUDA runs cuBLAS) ----------------------------------------------
struct LinearParams {
  const void* x;   // [N, in]
  const void* w;   // [out, in]
  const void* dy;  // [N, out] backward only
  void* y;         // [N, out] forward; dx [N, in] backward
  float* dw;       // [out, in] backward
  std::int64_t N, in, out;
  bool bf16;
};

// ---- causal conv1d --------------------------------------------------------------------------------
struct ConvParams {
  const void* x;           // [N, D]
  const void* weight;      // [D, W]
  const void* bias;        // [D] or nullptr
  const void* halo;        // [W-1, D] or nullptr (zeros)
  const std::int64_t* cu;  // [n+1] device-resident sequence offsets
  std::int64_t n, N, D, W;
  const void* dy;  // [N, D] backward
  float* d_pre;    // [N, D] backward scratch: dy silu'(pre)
  void* y;         // [N, D] forward; dx in backward
  float* dw;       // [D, W]
  float* dbias;    // [D] or nullptr
  void* dhalo;     // [W-1, D] or nullptr
  bool bf16;
  bool bleed;                 // planted fault GpuConvBleedsAcrossSequences: windows ignore where their sequence starts
  bool halo_grad_past_first;  // planted fault GpuConvHaloGradPastFirstSequence: dhalo sums every local window
};

// ---- gates ----------------------------------------------------------------------------------------
struct GateParams {
  const void* a;        // [N, Hv]
  const void* b;        // [N, Hv]
  const void* A_log;    // [Hv]
  const void* dt_bias;  // [Hv], or nullptr for zero (planted fault GateSoftplusMissingDtBias)
  const float* dg;      // [N, Hv] backward
  const float* dbeta;   // [N, Hv] backward
  float* g;             // [N, Hv] forward
  float* beta;          // [N, Hv] forward
  void* da;             // [N, Hv] backward
  void* db;             // [N, Hv] backward
  float* dA_log;        // [Hv] backward
  float* ddt_bias;      // [Hv] backward
  std::int64_t N, Hv;
  bool bf16;
  bool naive_softplus;  // planted fault SoftplusOverflows: log(1 + e^x)
  bool bf16_gates;      // planted fault GateBf16BeforeExp: g and beta rounded to bf16
};

// ---- chunked gated delta rule -----------------------------------------------------------------------
// Tasks run per (sequence, key head) with their GVA group of value heads in order (so dq and dk sum
// over the group in one fixed order without atomics), or per value head for the span maps; each task
// owns `work_stride` floats of `work` (gpu/math_gdr.hpp sizes it).
struct GdrParams {
  const void* q;           // [N, Hk, K]  raw (the L2 norm runs first)
  const void* k;           // [N, Hk, K]
  const void* v;           // [N, Hv, V]
  const float* g;          // [N, Hv]
  const float* beta;       // [N, Hv]
  const float* h0;         // [Hv, K, V] initial state of the first sequence, or nullptr (zero)
  const float* dht;        // [Hv, K, V] gradient of the last sequence's final state, or nullptr
  const void* d_o;         // [N, Hv, V] backward and first_backward_span_map
  const std::int64_t* cu;  // [n+1] device-resident
  std::int64_t n, N, Hk, Hv, K, V;
  float scale;
  float l2_eps;       // q, k L2 norm: x / sqrt(sum x^2 + l2_eps)
  bool decay_cumsum;  // planted fault DecayCumsumFp32: decays from differences of fp32 cumsums
  bool bf16;
  // Scratch and results.
  float* qn;                 // [N, Hk, K]  normalised q
  float* kn;                 // [N, Hk, K]  normalised k
  float* rq;                 // [N, Hk]     1 / sqrt(sum q^2 + eps)
  float* rk;                 // [N, Hk]
  float* dqn;                // [N, Hk, K]  backward: gradient w.r.t. qn, zero-initialised
  float* dkn;                // [N, Hk, K]
  float* states;             // [Hv, chunk_slots, K, V] backward: the state entering each chunk
  std::int64_t chunk_slots;  // >= chunks of all sequences, see chunk_slot()
  float* work;               // [tasks, work_stride]
  std::int64_t work_stride;
  void* o;             // [N, Hv, V] forward
  float* final_state;  // [Hv, K, V] forward: the last sequence's
  void* dq;            // [N, Hk, K] backward (after the L2 backward)
  void* dk;            // [N, Hk, K]
  void* dv;            // [N, Hv, V]
  float* dg;           // [N, Hv]
  float* dbeta;        // [N, Hv]
  float* dh0;          // [Hv, K, V] the first sequence's
  float* maps;         // [Hv, K, V+K] span maps
};

// fold_span_maps: S = M_j S + h_j (Forward) or dS = M_j^T dS + h_j (Backward) over ranks j in [begin, end).
struct FoldParams {
  const float* maps;  // [cp, Hv, K, V+K]
  float* out;         // [Hv, K, V]
  float* work;        // [Hv, K*V]
  std::int64_t Hv, K, V;
  int begin, end;
  FoldDirection direction;
};

}  // namespace gdnv::gpu
