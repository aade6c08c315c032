#pragma once
// The projection GEMM y = x w^T and its backward, one output element per call, fp32 accumulation: the
// host emulation's GEMM (the CUDA backend runs cuBLAS with fp32 compute instead).
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

// y[r, o] = sum_i x[r, i] w[o, i].
GDNV_HD void linear_forward_item(const LinearParams& p, i64 item) {
  const i64 r = item / p.out, o = item % p.out;
  float acc = 0;
  for (i64 i = 0; i < p.in; ++i) acc += load(p.x, r * p.in + i, p.bf16) * load(p.w, o * p.in + i, p.bf16);
  store(p.y, item, acc, p.bf16);
}

// dx[r, i] = sum_o dy[r, o] w[o, i].
GDNV_HD void linear_dx_item(const LinearParams& p, i64 item) {
  const i64 r = item / p.in, i = item % p.in;
  float acc = 0;
  for (i64 o = 0; o < p.out; ++o) acc += load(p.dy, r * p.out + o, p.bf16) * load(p.w, o * p.in + i, p.bf16);
  store(p.y, item, acc, p.bf16);
}

// The planted fault GpuLinearDxAccumulates: dx added into whatever the output holds.
GDNV_HD void linear_dx_accumulate_item(const LinearParams& p, i64 item) {
  const i64 r = item / p.in, i = item % p.in;
  float acc = load(p.y, item, p.bf16);
  for (i64 o = 0; o < p.out; ++o) acc += load(p.dy, r * p.out + o, p.bf16) * load(p.w, o * p.in + i, p.bf16);
  store(p.y, item, acc, p.bf16);
}

// dw[o, i] = sum_r dy[r, o] x[r, i], in 64-row blocked partial sums.
GDNV_HD void linear_dw_item(const LinearParams& p, i64 item) {
  const i64 o = item / p.in, i = item % p.in;
  float total = 0;
  for (i64 r0 = 0; r0 < p.N; r0 += kRowBlock) {
    float part = 0;
    for (i64 r = r0; r < r0 + kRowBlock && r < p.N; ++r)
      part += load(p.dy, r * p.out + o, p.bf16) * load(p.x, r * p.in + i, p.bf16);
    total += part;
  }
  p.dw[item] = total;
}

}  // namespace gdnv::gpu
