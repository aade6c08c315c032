#pragma once
// Kernel-level safetensors files (docs/DESIGN.md §5). The gated delta rule: q k v g beta in (initial_state,
// cu_seqlens, do, dht optional; metadata scale, use_qk_l2norm, chunk_size), o final_state and the
// gradients dq dk dv dg dbeta dh0 out. The causal conv1d: below.
#include <optional>
#include <string>

#include "core/safetensors.hpp"
#include "reference/conv1d.hpp"
#include "reference/gated_delta_rule.hpp"

namespace gdnv::ref {

struct GdrCase {
  GdrInputs in;
  std::optional<Tensor> d_o;  // [B, T, Hv, V]
  std::optional<Tensor> dht;  // [N, Hv, K, V]
  int chunk_size = 64;
};

enum class GdrForm { Chunked, Recurrent };

// Moves the kernel-level tensors out of `file` (F64 tensors are moved, other float dtypes upcast;
// other tensors are left alone) and validates them. FormatError/ConfigError messages start with
// `source`. Metadata scale "default 1/sqrt(K)" (the reference vectors' spelling) means the default.
GdrCase take_gdr_case(TensorFile& file, const std::string& source);

// Metadata 'chunk_size' (default 64); ConfigError naming `source` unless a positive int.
int chunk_size_of(const Metadata& metadata, const std::string& source);

// Runs the oracle: forward, then the backward when the case has do. Returns o, final_state and the
// gradients, all F64, with metadata naming the oracle (version, form, chunk size, scale, L2 norm).
TensorFile run_gdr_case(const GdrCase& c, GdrForm form);

// Kernel-level files of the causal conv1d (docs/DESIGN.md §5): x weight in (bias, initial_state,
// cu_seqlens, dy, dht optional; metadata activation "silu" (default) or "none"), y final_state and the
// gradients dx dweight [dbias] [dh0] out.
struct ConvCase {
  Conv1dInputs in;
  std::optional<Tensor> dy;   // [B, T, D]
  std::optional<Tensor> dht;  // [N, D, W]
};

bool is_conv_file(const TensorFile& file);  // holds x and weight
ConvCase take_conv_case(TensorFile& file, const std::string& source);
TensorFile run_conv_case(const ConvCase& c);

}  // namespace gdnv::ref
