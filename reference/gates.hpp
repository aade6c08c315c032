#pragma once
// The gates of the GatedDeltaNet layer (docs/DESIGN.md §1.3), fp64, forward and backward:
//   g    = -exp(A_log) * softplus(a + dt_bias)   (log decay; Megatron computes it in fp32)
//   beta = sigmoid(b)
#include "core/tensor.hpp"

namespace gdnv::ref {

struct Gates {
  Tensor g;     // [..., Hv]
  Tensor beta;  // [..., Hv]
};
Gates gates_forward(const Tensor& a,         // [..., Hv] alpha section of in_proj
                    const Tensor& b,         // [..., Hv] beta section of in_proj
                    const Tensor& A_log,     // [Hv]
                    const Tensor& dt_bias);  // [Hv]

struct GateGrads {
  Tensor da, db;            // [..., Hv]
  Tensor dA_log, ddt_bias;  // [Hv]
};
GateGrads gates_backward(const Tensor& a, const Tensor& b, const Tensor& A_log, const Tensor& dt_bias,
                         const Tensor& dg,      // [..., Hv]
                         const Tensor& dbeta);  // [..., Hv]

// log(1 + e^x) without overflow (torch's softplus threshold of 20 is a float shortcut; this is exact).
double softplus(double x);

}  // namespace gdnv::ref
