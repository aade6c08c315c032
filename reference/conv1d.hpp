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
  std::optional<Tensor> dh0;    // [N, D, W] when initial_state is given (slot 0 is zero unless read by final_state)
};

Tensor conv1d_forward(const Conv1dInputs& in);  // y [B, T, D]
// The final conv state [N, D, W]: slot s holds token len - W + s of each sequence, read through the
// initial_state (or zeros) before the sequence's start (docs/DESIGN.md §1.2); the initial_state of a next call.
Tensor conv1d_final_state(const Conv1dInputs& in);
// With dht [N, D, W] (the final state's gradient), slot s's gradient flows to the token it holds.
Conv1dGrads conv1d_backward(const Conv1dInputs& in, const Tensor& dy, const std::optional<Tensor>& dht = std::nullopt);

}  // namespace gdnv::ref
