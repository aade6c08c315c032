#include "reference/case_params.hpp"

#include <cmath>

#include "core/rng.hpp"

namespace gdnv::ref {
namespace {

// u in [0, 1) -> sign (u < 1/2: -1) and a fresh uniform in [0, 1): 2u and 2u - 1 are exact, so the
// Python mirror (gdn_verify.cases) gives the same bits.
double sign_of(double u) { return u < 0.5 ? -1.0 : 1.0; }
double folded(double u) { return u < 0.5 ? 2.0 * u : 2.0 * u - 1.0; }
// m in [0, 1) -> [0.5, 0.8) u [1.2, 1.5): uniform on both, outside the band 1 +- 0.2.
double outside_one(double m) {
  const double t = 0.6 * m;
  return t < 0.3 ? 0.5 + t : 0.9 + t;
}

}  // namespace

LayerParams case_params(const LayerConfig& config, std::uint64_t seed) {
  LayerParams p = init_params(config, seed);
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(config.W()));
  const auto conv_bias = [&](double u) { return sign_of(u) * conv_bound * (0.25 + 0.75 * folded(u)); };
  const auto a_log_2_16 = [](double u) { return det_log(2.0 + 14.0 * u); };
  for (const auto& name : param_names(config)) {
    const Shape shape = param_shape(config, name);
    if (name == kInProjNorm || name == kOutNorm || name == kDtBias)
      p[name] = seeded_uniform(seed, name, shape, outside_one);
    else if (name == kConvBias) p[name] = seeded_uniform(seed, name, shape, conv_bias);
    else if (name == kALog) p[name] = seeded_uniform(seed, name, shape, a_log_2_16);
  }
  return p;
}

}  // namespace gdnv::ref
