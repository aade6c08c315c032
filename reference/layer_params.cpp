#include "reference/layer_params.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace gdnv::ref {

std::vector<std::string> param_names(const LayerConfig& config) {
  std::vector<std::string> names = {kInProjNorm, kInProj, kConvWeight};
  if (config.conv_bias()) names.emplace_back(kConvBias);
  for (const char* name : {kALog, kDtBias, kOutNorm, kOutProj}) names.emplace_back(name);
  return names;
}

Shape param_shape(const LayerConfig& config, const std::string& name) {
  if (name == kInProjNorm) return {config.hidden()};
  if (name == kInProj) return {config.in_proj_dim(), config.hidden()};
  if (name == kConvWeight) return {config.conv_dim(), 1, config.W()};
  if (name == kConvBias) return {config.conv_dim()};
  if (name == kALog || name == kDtBias) return {config.Hv()};
  if (name == kOutNorm) return {config.dv()};
  if (name == kOutProj) return {config.hidden(), config.v_dim()};
  throw ConfigError("unknown GatedDeltaNet parameter '" + name + "'");
}

void validate_params(const LayerConfig& config, const LayerParams& params) {
  const auto names = param_names(config);
  for (const auto& name : names) {
    const auto it = params.find(name);
    const Shape want = param_shape(config, name);
    if (it == params.end())
      throw ConfigError("parameter '" + name + "' " + shape_str(want) + " is missing" +
                        (name == kConvBias ? " (the config has conv_bias = true)" : ""));
    if (it->second.dtype() != DType::F64)
      throw ConfigError("parameter '" + name + "' has dtype " + std::string(dtype_name(it->second.dtype())) +
                        "; the oracle computes in fp64: convert it with Tensor::to(DType::F64)");
    if (it->second.shape() != want)
      throw ConfigError("parameter '" + name + "' has shape " + shape_str(it->second.shape()) + ", expected " +
                        shape_str(want) + " for hidden_size=" + std::to_string(config.hidden()) +
                        " Hk=" + std::to_string(config.Hk()) + " Hv=" + std::to_string(config.Hv()) +
                        " dk=" + std::to_string(config.dk()) + " dv=" + std::to_string(config.dv()) +
                        " W=" + std::to_string(config.W()));
  }
  for (const auto& [name, tensor] : params)
    if (std::find(names.begin(), names.end(), name) == names.end())
      throw ConfigError("unexpected parameter '" + name + "'" +
                        (name == kConvBias ? " (the config has conv_bias = false)" : "") +
                        "; GatedDeltaNet parameters are those of docs/DESIGN.md §1.3");
}

Tensor seeded_normal(std::uint64_t seed, std::string_view name, Shape shape, double std) {
  Tensor t(DType::F64, std::move(shape));
  const Rng rng(seed, name);
  double* p = t.data<double>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = std * rng.normal(static_cast<std::uint64_t>(i));
  return t;
}

namespace {

Tensor filled(Shape shape, double value) {
  Tensor t(DType::F64, std::move(shape));
  std::fill_n(t.data<double>(), t.numel(), value);
  return t;
}

}  // namespace

LayerParams init_params(const LayerConfig& config, std::uint64_t seed) {
  constexpr double init_method_std = 0.02;
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(config.W()));  // fan_in = 1 channel * W taps
  const auto conv_uniform = [&](double u) { return conv_bound * (2.0 * u - 1.0); };
  const auto log_uniform_1_16 = [](double u) { return det_log(1.0 + 15.0 * u); };
  LayerParams p;
  for (const auto& name : param_names(config)) {
    const Shape shape = param_shape(config, name);
    if (name == kInProjNorm || name == kOutNorm || name == kDtBias) p[name] = filled(shape, 1.0);
    else if (name == kInProj) p[name] = seeded_normal(seed, name, shape, init_method_std);
    else if (name == kOutProj) p[name] = seeded_normal(seed, name, shape, init_method_std / std::sqrt(2.0));
    else if (name == kConvWeight || name == kConvBias) p[name] = seeded_uniform(seed, name, shape, conv_uniform);
    else if (name == kALog) p[name] = seeded_uniform(seed, name, shape, log_uniform_1_16);
    else throw Error("init_params: no initialiser for parameter '" + name + "'");
  }
  return p;
}

}  // namespace gdnv::ref
