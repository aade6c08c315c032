#pragma once
// fp64 oracle of FLA's causal depthwise conv1d (docs/DESIGN.md §1.2).
#include <cstdint>
#include <optional>
#include <vector>

#include "core/tensor.hpp"

namespace gdnv::ref {

enum class Activation { None, Silu };

struct Conv1dInputs {
  Tensor x;                                             // [B, T, D]  F64
  Tensor weight;                                        // [D, W]     F64; weight[:, W-1] hits the current token
  std::optional<Tensor> bias;                           // [D]
  std::optional<Tensor> initial_state;                  // [N, D, W]; slot j in [1, W-1] = token at j - W
  std::optional<std::vector<std::int64_t>> cu_seqlens;  // [N + 1], only with B == 1
  Activation activation = Activation::Silu;
};

struct Conv1dGrads {
  Tensor dx;                    // [B, T, D]
  Tensor dweight;               // [D, W]
  std::optional<Tensor> dbias;  // [D] when bias is given
  std::optional<Tensor> dh0;    // [N, D, W] when initial_state is given (slot 0 is zero)
};

Tensor conv1d_forward(const Conv1dInputs& in);  // y [B, T, D]
Conv1dGrads conv1d_backward(const Conv1dInputs& in, const Tensor& dy);

}  // namespace gdnv::ref
