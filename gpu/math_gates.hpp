#pragma once
// The gates (docs/DESIGN.md §1.3) in fp32: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b); forward
// and backward per element, parameter gradients per head.
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

GDNV_HD float gate_bias(const GateParams& p, i64 h) { return p.dt_bias ? load(p.dt_bias, h, p.bf16) : 0.0f; }

GDNV_HD float gate_softplus(const GateParams& p, float x) {
  return p.naive_softplus ? logf(1.0f + exp_f(x)) : softplus(x);
}

// dg/d(a + dt_bias) = -exp(A_log) sigmoid(a + dt_bias) (softplus' = sigmoid), before the chain rule.
GDNV_HD float gate_da(const GateParams& p, i64 j) {
  const i64 h = j % p.Hv;
  return p.dg[j] * -exp_f(load(p.A_log, h, p.bf16)) * sigmoid(load(p.a, j, p.bf16) + gate_bias(p, h));
}

// A gate as stored: fp32, or under the planted fault GateBf16BeforeExp rounded to bf16.
GDNV_HD float stored_gate(const GateParams& p, float x) { return p.bf16_gates ? round_bf16(x) : x; }

GDNV_HD void gates_forward_item(const GateParams& p, i64 j) {
  const i64 h = j % p.Hv;
  p.g[j] = stored_gate(p, -exp_f(load(p.A_log, h, p.bf16)) * gate_softplus(p, load(p.a, j, p.bf16) + gate_bias(p, h)));
  p.beta[j] = stored_gate(p, sigmoid(load(p.b, j, p.bf16)));
}

// da and db at element j; dbeta/db = beta (1 - beta).
GDNV_HD void gates_backward_item(const GateParams& p, i64 j) {
  store(p.da, j, gate_da(p, j), p.bf16);
  const float beta = sigmoid(load(p.b, j, p.bf16));
  store(p.db, j, p.dbeta[j] * beta * (1.0f - beta), p.bf16);
}

// Head h: dA_log = sum_rows dg g (dg/dA_log = g), ddt_bias = sum_rows of the unrounded da; 64-row blocks.
GDNV_HD void gates_param_grad(const GateParams& p, i64 h) {
  const float A = exp_f(load(p.A_log, h, p.bf16)), bias = gate_bias(p, h);
  float dA = 0, ddt = 0;
  for (i64 r0 = 0; r0 < p.N; r0 += kRowBlock) {
    float part_A = 0, part_dt = 0;
    for (i64 r = r0; r < r0 + kRowBlock && r < p.N; ++r) {
      const i64 j = r * p.Hv + h;
      part_A += p.dg[j] * -A * gate_softplus(p, load(p.a, j, p.bf16) + bias);
      part_dt += gate_da(p, j);
    }
    dA += part_A;
    ddt += part_dt;
  }
  p.dA_log[h] = dA;
  p.ddt_bias[h] = ddt;
}

}  // namespace gdnv::gpu
