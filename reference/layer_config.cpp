#include "reference/layer_config.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/metadata.hpp"

namespace gdnv::ref {
namespace {

void require_positive(const char* name, std::int64_t value) {
  if (value <= 0)
    throw ConfigError("layer config: " + std::string(name) + " = " + std::to_string(value) +
                      " must be a positive integer");
}

}  // namespace

LayerConfig::LayerConfig(const Values& values) : v_(values) {
  require_positive("hidden_size", v_.hidden_size);
  require_positive("linear_num_key_heads", v_.linear_num_key_heads);
  require_positive("linear_num_value_heads", v_.linear_num_value_heads);
  require_positive("linear_key_head_dim", v_.linear_key_head_dim);
  require_positive("linear_value_head_dim", v_.linear_value_head_dim);
  require_positive("linear_conv_kernel_dim", v_.linear_conv_kernel_dim);
  if (Hv() % Hk() != 0)
    throw ConfigError("layer config: linear_num_value_heads = " + std::to_string(Hv()) +
                      " is not a multiple of linear_num_key_heads = " + std::to_string(Hk()) +
                      "; GVA maps Hv/Hk value heads onto each key head, so choose Hv divisible by Hk");
  if (!(v_.layernorm_epsilon > 0) || !std::isfinite(v_.layernorm_epsilon))
    throw ConfigError("layer config: layernorm_epsilon = " + format_number(v_.layernorm_epsilon) +
                      " must be a finite positive number such as 1e-06");
}

LayerConfig layer_config_from_metadata(const Metadata& metadata, bool conv_bias, const std::string& source) {
  const auto required = [&](const char* key) -> std::int64_t {
    const auto v = meta_int(metadata, key, source);
    if (!v)
      throw FormatError(source + ": metadata '" + key +
                        "' is missing; a layer file carries its config under Megatron's names (docs/DESIGN.md §5)");
    return *v;
  };
  LayerConfig::Values v;
  v.hidden_size = required("hidden_size");
  v.linear_num_key_heads = required("linear_num_key_heads");
  v.linear_num_value_heads = required("linear_num_value_heads");
  v.linear_key_head_dim = required("linear_key_head_dim");
  v.linear_value_head_dim = required("linear_value_head_dim");
  v.linear_conv_kernel_dim = meta_int(metadata, "linear_conv_kernel_dim", source).value_or(4);
  v.layernorm_epsilon = meta_number(metadata, "layernorm_epsilon", source).value_or(1e-6);
  v.conv_bias = conv_bias;
  try {
    return LayerConfig(v);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
}

void write_layer_config(const LayerConfig& config, Metadata& metadata) {
  const auto& v = config.values();
  metadata["hidden_size"] = std::to_string(v.hidden_size);
  metadata["linear_num_key_heads"] = std::to_string(v.linear_num_key_heads);
  metadata["linear_num_value_heads"] = std::to_string(v.linear_num_value_heads);
  metadata["linear_key_head_dim"] = std::to_string(v.linear_key_head_dim);
  metadata["linear_value_head_dim"] = std::to_string(v.linear_value_head_dim);
  metadata["linear_conv_kernel_dim"] = std::to_string(v.linear_conv_kernel_dim);
  metadata["layernorm_epsilon"] = format_number(v.layernorm_epsilon);
}

}  // namespace gdnv::ref
