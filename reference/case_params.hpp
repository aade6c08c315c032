#pragma once
// The parameters of every test case (docs/DESIGN.md §1.3 "Test-case parameters").
#include <cstdint>

#include "reference/layer_params.hpp"

namespace gdnv::ref {

// The parameters every case runs on (harness cases, fixtures, the gate, ctest's layer tests, the PyTorch
// bridge's gdn_verify.cases.case_params): init_params, with every parameter Megatron sets to a constant,
// and those that may sit near 0 or 1, drawn away from both, so a dropped or misplaced parameter moves
// the result. From Rng(seed, name), element i from counter i:
//   in_proj.layer_norm_weight, out_norm.weight, dt_bias   [0.5, 0.8) u [1.2, 1.5)
//   conv1d.bias                                           +-[0.25, 1) / sqrt(W), random sign
//   A_log = log A, A uniform in [2, 16)
// the projections and conv1d.weight as init_params.
LayerParams case_params(const LayerConfig& config, std::uint64_t seed);

}  // namespace gdnv::ref
