#pragma once
// Layer-level files for `gdn-verify reference` (docs/DESIGN.md §5): hidden_states, the parameters of §1.3
// by name, optional cu_seqlens (THD) and grad_output in; config in metadata under Megatron's names.
#include <string>

#include "core/safetensors.hpp"
#include "reference/layer.hpp"

namespace gdnv::ref {

// A layer-level file is one holding hidden_states.
bool is_layer_file(const TensorFile& file);

struct LayerCase {
  LayerConfig config;
  LayerParams params;    // F64
  Tensor hidden_states;  // [S, B, hidden] F64
  CuSeqlens cu_seqlens;
  std::optional<Tensor> grad_output;  // [S, B, hidden] F64
  int chunk_size = 64;                // metadata chunk_size, for the chunked core
};

// Reads and validates a layer file; float tensors are converted to F64. FormatError / ConfigError
// naming `source`, the tensor or key, and the fix; unknown tensor names are rejected (a misspelt
// conv1d.bias would otherwise silently drop the bias).
// The rvalue form takes the tensors out of `file` instead of copying them.
LayerCase read_layer_case(const TensorFile& file, const std::string& source);
LayerCase read_layer_case(TensorFile&& file, const std::string& source);
TensorFile write_layer_case(const LayerCase& layer_case);

// Runs the oracle: `out`, and with grad_output also `grad_hidden` and `grad::<param>` for every
// parameter, all F64; metadata carries the config, the core form and the oracle version. With `stages`,
// also the named stages (docs/DESIGN.md §1.3): every stage::<s>, and with grad_output every stage_grad::<s>.
// The rvalue form takes the inputs out of `file` and frees each as soon as the oracle is done with it.
TensorFile run_layer_file(const TensorFile& file, const std::string& source, CoreForm form, bool stages = false);
TensorFile run_layer_file(TensorFile&& file, const std::string& source, CoreForm form, bool stages = false);

}  // namespace gdnv::ref
