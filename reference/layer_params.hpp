#pragma once
// Parameters of the GatedDeltaNet layer by their Megatron names (docs/DESIGN.md §1.3), their validation,
// and deterministic generation of parameters and inputs.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "reference/layer_config.hpp"

namespace gdnv::ref {

// Name -> F64 tensor. Also used for parameter gradients (same names and shapes).
using LayerParams = std::map<std::string, Tensor>;

inline constexpr const char* kInProjNorm = "in_proj.layer_norm_weight";  // [hidden]
inline constexpr const char* kInProj = "in_proj.weight";     // [in_proj_dim, hidden]; rows q,k,v,z,beta,alpha
inline constexpr const char* kConvWeight = "conv1d.weight";  // [conv_dim, 1, W]; channels q,k,v
inline constexpr const char* kConvBias = "conv1d.bias";      // [conv_dim], only with conv_bias
inline constexpr const char* kALog = "A_log";                // [Hv]
inline constexpr const char* kDtBias = "dt_bias";            // [Hv]
inline constexpr const char* kOutNorm = "out_norm.weight";   // [dv]
inline constexpr const char* kOutProj = "out_proj.weight";   // [hidden, Hv*dv]

// The parameter names of `config` in table order (conv1d.bias only when config.conv_bias()).
std::vector<std::string> param_names(const LayerConfig& config);
Shape param_shape(const LayerConfig& config, const std::string& name);

// A parameter drawn from its own seeded stream: element i = f(Rng(seed, name).uniform(i)).
template <class F>
Tensor seeded_uniform(std::uint64_t seed, const std::string& name, Shape shape, F f) {
  Tensor t(DType::F64, std::move(shape));
  const Rng rng(seed, name);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = f(rng.uniform(static_cast<std::uint64_t>(i)));
  return t;
}

// Every name of param_names present, F64, with its shape, and nothing else. ConfigError
// naming the parameter, its shape and the expected one.
void validate_params(const LayerConfig& config, const LayerParams& params);

// Megatron's initialisation, every parameter seeded by its own name (Rng(seed, name), element i from
// counter i), so adding a parameter shifts no other and a TP shard is a slice of the full tensor:
//   in_proj.layer_norm_weight, out_norm.weight = 1        (RMSNorm weights)
//   in_proj.weight  ~ N(0, 0.02^2)                        (init_method_normal(init_method_std=0.02))
//   out_proj.weight ~ N(0, (0.02/sqrt(2))^2)              (scaled_init_method_normal for one layer)
//   conv1d.weight, conv1d.bias ~ U(-1/sqrt(W), 1/sqrt(W)) (torch Conv1d default; Megatron's conv_init=None)
//   A_log = log U(1, 16), dt_bias = 1                     (GatedDeltaNet.reset_parameters)
LayerParams init_params(const LayerConfig& config, std::uint64_t seed);

// Flat element i ~ N(0, std^2) from Rng(seed, name) counter i: bit-identical on every machine and a
// function of (seed, name, i) only. For hidden_states, grad_output and test perturbations.
Tensor seeded_normal(std::uint64_t seed, std::string_view name, Shape shape, double std = 1.0);

}  // namespace gdnv::ref
