#pragma once
// RMSNorm and the gated per-head output norm (docs/DESIGN.md §1.3), forward and backward, per row and per
// weight column, in fp32: the arithmetic of cpu/kernels_norm.cpp in the same order.
#include "core/fast_rsqrt.hpp"
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

// Row r: rstd = 1 / sqrt(mean(x^2) + eps) (the fast approximation under planted fault RmsnormFastRsqrt);
// y = x rstd w (times silu(z) for the gated norm).
GDNV_HD void norm_forward_row(const NormParams& p, i64 r) {
  const i64 base = r * p.n;
  float ss = 0;
  for (i64 i = 0; i < p.n; ++i) {
    const float x = load(p.x, base + i, p.bf16);
    ss += x * x;
  }
  const float mean_eps = ss / static_cast<float>(p.n) + p.eps;
  const float rstd = p.fast_rsqrt ? fast_rsqrt(mean_eps) : 1.0f / sqrt_f(mean_eps);
  p.rstd[r] = rstd;
  for (i64 i = 0; i < p.n; ++i) {
    float y = load(p.x, base + i, p.bf16) * rstd * load(p.w, i, p.bf16);
    if (p.z) y *= silu(load(p.z, base + i, p.bf16));
    store(p.y, base + i, y, p.bf16);
  }
}

// The gradient reaching rmsnorm(x) * w at element i of row r: dy, or dy silu(z) behind the gate.
GDNV_HD float normed_grad(const NormParams& p, i64 j) {
  const float dy = load(p.dy, j, p.bf16);
  return p.z ? dy * silu(load(p.z, j, p.bf16)) : dy;
}

// Row r: with nrm = x rstd and d = the gradient of nrm w, dx = rstd (d w - nrm mean(d w nrm)); the
// gated norm also dz = dy x rstd w silu'(z).
GDNV_HD void norm_backward_row(const NormParams& p, i64 r) {
  const i64 base = r * p.n;
  const float rstd = p.rstd_in[r];
  float dot = 0;
  for (i64 i = 0; i < p.n; ++i)
    dot += normed_grad(p, base + i) * load(p.w, i, p.bf16) * load(p.x, base + i, p.bf16) * rstd;
  const float mean = dot / static_cast<float>(p.n);
  for (i64 i = 0; i < p.n; ++i) {
    const float x = load(p.x, base + i, p.bf16), w = load(p.w, i, p.bf16);
    store(p.y, base + i, rstd * (normed_grad(p, base + i) * w - x * rstd * mean), p.bf16);
    if (p.z) {
      const float z = load(p.z, base + i, p.bf16);
      store(p.dz, base + i, load(p.dy, base + i, p.bf16) * x * rstd * w * silu_grad(z), p.bf16);
    }
  }
}

// dw[i] = sum over rows of (gradient of nrm w) * nrm, in 64-row blocked partial sums.
GDNV_HD void norm_weight_grad(const NormParams& p, i64 i) {
  float total = 0;
  for (i64 r0 = 0; r0 < p.rows; r0 += kRowBlock) {
    float part = 0;
    for (i64 r = r0; r < r0 + kRowBlock && r < p.rows; ++r)
      part += normed_grad(p, r * p.n + i) * load(p.x, r * p.n + i, p.bf16) * p.rstd_in[r];
    total += part;
  }
  p.dw[i] = total;
}

}  // namespace gdnv::gpu
