#pragma once
// Causal depthwise conv1d + SiLU over packed sequences (docs/DESIGN.md §1.2) with the halo of the first
// sequence (the W-1 tokens before it on earlier ranks, oldest first), per (row, channel) in fp32.
// Token r reads `back` in [0, W-1] tokens behind it: inside its own sequence, in the halo (first
// sequence only) or zero. Each thread finds its sequence from the device-resident offsets.
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

// Channel d of the token `back` rows behind row r, and whether it exists (false: a zero token).
GDNV_HD bool conv_tap(const ConvParams& p, i64 r, i64 back, i64 d, float& x) {
  const i64 start = p.bleed ? 0 : p.cu[sequence_of(p.cu, p.n, r)];
  if (r - back >= start) {
    x = load(p.x, (r - back) * p.D + d, p.bf16);
    return true;
  }
  if (p.halo && r < p.cu[1]) {
    x = load(p.halo, (r - back + p.W - 1) * p.D + d, p.bf16);
    return true;
  }
  return false;
}

// bias + sum_i w[d, i] x[r - (W-1) + i]; w[d, W-1] multiplies the current token.
GDNV_HD float conv_pre(const ConvParams& p, i64 r, i64 d) {
  float pre = p.bias ? load(p.bias, d, p.bf16) : 0.0f;
  for (i64 i = 0; i < p.W; ++i) {
    float x;
    if (conv_tap(p, r, p.W - 1 - i, d, x)) pre += load(p.weight, d * p.W + i, p.bf16) * x;
  }
  return pre;
}

GDNV_HD void conv_forward_item(const ConvParams& p, i64 item) {
  store(p.y, item, silu(conv_pre(p, item / p.D, item % p.D)), p.bf16);
}

// d_pre = dy silu'(pre): the gradient entering the window sum (backward pass 1).
GDNV_HD void conv_dpre_item(const ConvParams& p, i64 item) {
  p.d_pre[item] = load(p.dy, item, p.bf16) * silu_grad(conv_pre(p, item / p.D, item % p.D));
}

// Sum of d_pre[r] w[d, W-1-(r-pos)] over the tokens r of sequence [.., end) whose window reads the
// position `pos` (a row, or a negative halo position before row 0), nearest first.
GDNV_HD float conv_window_grad(const ConvParams& p, i64 pos, i64 end, i64 d) {
  float acc = 0;
  for (i64 back = 0; back < p.W; ++back) {
    const i64 r = pos + back;
    if (r >= 0 && r < end) acc += p.d_pre[r * p.D + d] * load(p.weight, d * p.W + p.W - 1 - back, p.bf16);
  }
  return acc;
}

// dx at (row, channel): from the later tokens of its own sequence (backward pass 2).
GDNV_HD void conv_dx_item(const ConvParams& p, i64 item) {
  const i64 t = item / p.D, d = item % p.D;
  store(p.y, item, conv_window_grad(p, t, p.cu[sequence_of(p.cu, p.n, t) + 1], d), p.bf16);
}

// dhalo at (halo row, channel): halo row j is position j - (W-1), read by the first sequence only.
GDNV_HD void conv_dhalo_item(const ConvParams& p, i64 item) {
  const i64 j = item / p.D, d = item % p.D;
  store(p.dhalo, item, conv_window_grad(p, j - (p.W - 1), p.halo_grad_past_first ? p.N : p.cu[1], d), p.bf16);
}

// dw[d, i] = sum over tokens of d_pre * the tap it read, dbias[d] (at i == 0) = sum of d_pre; 64-row blocks.
GDNV_HD void conv_weight_grad_item(const ConvParams& p, i64 item) {
  const i64 d = item / p.W, i = item % p.W;
  float total = 0, total_bias = 0;
  for (i64 r0 = 0; r0 < p.N; r0 += kRowBlock) {
    float part = 0, part_bias = 0;
    for (i64 r = r0; r < r0 + kRowBlock && r < p.N; ++r) {
      float x;
      if (conv_tap(p, r, p.W - 1 - i, d, x)) part += p.d_pre[r * p.D + d] * x;
      part_bias += p.d_pre[r * p.D + d];
    }
    total += part;
    total_bias += part_bias;
  }
  p.dw[item] = total;
  if (p.dbias && i == 0) p.dbias[d] = total_bias;
}

}  // namespace gdnv::gpu
