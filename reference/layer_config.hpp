#pragma once
// Geometry of the Megatron-Core GatedDeltaNet layer (docs/DESIGN.md §1.3), under Megatron's config names.
#include <cstdint>
#include <string>

#include "core/safetensors.hpp"

namespace gdnv::ref {

class LayerConfig {
 public:
  // Megatron TransformerConfig names; conv_bias is GatedDeltaNet's constructor argument.
  struct Values {
    std::int64_t hidden_size = 0;
    std::int64_t linear_num_key_heads = 0;    // Hk
    std::int64_t linear_num_value_heads = 0;  // Hv
    std::int64_t linear_key_head_dim = 0;     // dk
    std::int64_t linear_value_head_dim = 0;   // dv
    std::int64_t linear_conv_kernel_dim = 4;  // W
    double layernorm_epsilon = 1e-6;          // eps of both RMSNorms
    bool conv_bias = false;
  };

  // Throws ConfigError naming the bad value and the fix (zero dims, Hv % Hk != 0, eps <= 0).
  explicit LayerConfig(const Values& values);

  const Values& values() const { return v_; }
  std::int64_t hidden() const { return v_.hidden_size; }
  std::int64_t Hk() const { return v_.linear_num_key_heads; }
  std::int64_t Hv() const { return v_.linear_num_value_heads; }
  std::int64_t dk() const { return v_.linear_key_head_dim; }
  std::int64_t dv() const { return v_.linear_value_head_dim; }
  std::int64_t W() const { return v_.linear_conv_kernel_dim; }
  double eps() const { return v_.layernorm_epsilon; }
  bool conv_bias() const { return v_.conv_bias; }

  std::int64_t qk_dim() const { return Hk() * dk(); }
  std::int64_t v_dim() const { return Hv() * dv(); }
  std::int64_t conv_dim() const { return 2 * qk_dim() + v_dim(); }              // channels q, k, v
  std::int64_t in_proj_dim() const { return conv_dim() + v_dim() + 2 * Hv(); }  // + z, beta, alpha

 private:
  Values v_;
};

// The config from file metadata under Megatron's names (docs/DESIGN.md §5). The head and size keys are
// required; linear_conv_kernel_dim defaults to 4 and layernorm_epsilon to 1e-6. conv_bias is not read
// here: a layer file has it exactly when it holds conv1d.bias. FormatError names `source` and the key.
LayerConfig layer_config_from_metadata(const Metadata& metadata, bool conv_bias, const std::string& source);
void write_layer_config(const LayerConfig& config, Metadata& metadata);

}  // namespace gdnv::ref
