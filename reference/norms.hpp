#pragma once
// The two RMSNorms of the GatedDeltaNet layer (docs/DESIGN.md §1.3), fp64, forward and backward:
// the pre-norm fused into in_proj, and the per-head output norm gated by silu(z).
#include "core/tensor.hpp"

namespace gdnv::ref {

// Over the last dimension n: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps). `threads` split the rows
// (and dw's columns) between them: each element's arithmetic is the same for any count (0: one per core).
struct RmsNorm {
  Tensor y;     // like x
  Tensor rstd;  // [rows] (rows = numel / n)
};
RmsNorm rmsnorm_forward(const Tensor& x,  // [..., n]
                        const Tensor& w,  // [n]
                        double eps, int threads = 1);
// Rows [r0, r0 + count) of x [rows, n] alone: y [count, n] and rstd [count], each row's bits as above.
RmsNorm rmsnorm_forward_rows(const Tensor& x, std::int64_t r0, std::int64_t count, const Tensor& w, double eps,
                             int threads = 1);

struct RmsNormGrads {
  Tensor dx;  // like x
  Tensor dw;  // [n]
};
RmsNormGrads rmsnorm_backward(const Tensor& x,     // [..., n]
                              const Tensor& w,     // [n]
                              const Tensor& rstd,  // [rows] from the forward
                              const Tensor& dy,    // like x
                              int threads = 1);

// Megatron's _apply_gated_norm: y = rmsnorm(o) * w * silu(z), one row per token and value head.
struct GatedNorm {
  Tensor y;     // like o
  Tensor rstd;  // [rows]
};
GatedNorm gated_rmsnorm_forward(const Tensor& o,  // [..., dv]
                                const Tensor& z,  // numel of o, same row-major order
                                const Tensor& w,  // [dv]
                                double eps, int threads = 1);

struct GatedNormGrads {
  Tensor d_o;  // like o
  Tensor dz;   // like z
  Tensor dw;   // [dv]
};
// With dw_terms: also each row's term of dw ([rows, dv] like o): dw is their sum over rows in order,
// so a caller that splits the rows can still form dw with the same bits.
GatedNormGrads gated_rmsnorm_backward(const Tensor& o, const Tensor& z, const Tensor& w,
                                      const Tensor& rstd,  // [rows] from the forward
                                      const Tensor& dy,    // like o
                                      Tensor* dw_terms = nullptr, int threads = 1);

double sigmoid(double x);
double silu(double x);
double silu_grad(double x);  // d silu / dx

}  // namespace gdnv::ref
