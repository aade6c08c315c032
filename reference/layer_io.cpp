#include "reference/layer_io.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/metadata.hpp"
#include "reference/kernel_io.hpp"
#include "reference/oracle_version.hpp"

namespace gdnv::ref {
namespace {

constexpr const char* kHidden = "hidden_states";
constexpr const char* kGradOutput = "grad_output";
constexpr const char* kCuSeqlens = "cu_seqlens";
constexpr const char* kGradPrefix = "grad::";

// The named float tensor as F64, taken out of the file (an F64 one is moved, not copied: a layer file's
// weights and activations are most of the oracle's memory); FormatError for an integer dtype or a
// NaN/Inf element.
Tensor take_float_tensor(TensorFile& file, const std::string& name, const std::string& source) {
  file.at(name, source);  // FormatError naming it when missing
  Tensor& t = file.tensors.at(name);
  if (!is_float(t.dtype()))
    throw FormatError(source + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype())) +
                      "; it must be floating point (F64, F32, BF16 or F16)");
  Tensor f = t.dtype() == DType::F64 ? std::move(t) : t.to(DType::F64);
  if (const std::int64_t i = first_non_finite(f); i < f.numel())
    throw FormatError(source + ": tensor '" + name + "' holds " + (std::isnan(f.get(i)) ? "NaN" : "Inf") +
                      " at flat index " + std::to_string(i) + "; the oracle needs finite inputs");
  return f;
}

std::vector<std::int64_t> read_cu_seqlens(const TensorFile& file, const std::string& source) {
  const Tensor& t = file.at(kCuSeqlens, source);
  if (t.rank() != 1 || (t.dtype() != DType::I32 && t.dtype() != DType::I64))
    throw FormatError(source + ": tensor 'cu_seqlens' is " + std::string(dtype_name(t.dtype())) + " " +
                      shape_str(t.shape()) + "; it must be a 1-d I32 or I64 tensor [N + 1]");
  return t.to_i64();
}

template <class F>
auto with_source(const std::string& source, F f) {
  try {
    return f();
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
}

}  // namespace

bool is_layer_file(const TensorFile& file) { return file.has(kHidden); }

LayerCase read_layer_case(const TensorFile& file, const std::string& source) {
  return read_layer_case(TensorFile(file), source);
}

LayerCase read_layer_case(TensorFile&& file, const std::string& source) {
  const LayerConfig config = layer_config_from_metadata(file.metadata, file.has(kConvBias), source);
  const auto names = param_names(config);
  for (const auto& [name, tensor] : file.tensors)
    if (name != kHidden && name != kGradOutput && name != kCuSeqlens &&
        std::find(names.begin(), names.end(), name) == names.end())
      throw FormatError(source + ": unknown tensor '" + name +
                        "' in a layer file; expected hidden_states, grad_output, cu_seqlens and the parameters "
                        "of docs/DESIGN.md §1.3 (in_proj.layer_norm_weight, in_proj.weight, conv1d.weight, "
                        "conv1d.bias, A_log, dt_bias, out_norm.weight, out_proj.weight)");
  LayerCase c{config, {}, take_float_tensor(file, kHidden, source), std::nullopt, std::nullopt};
  for (const auto& name : names) {
    if (!file.has(name))
      throw FormatError(source + ": parameter '" + name + "' " + shape_str(param_shape(config, name)) +
                        " is missing from the layer file");
    c.params[name] = take_float_tensor(file, name, source);
  }
  if (file.has(kCuSeqlens)) c.cu_seqlens = read_cu_seqlens(file, source);
  if (file.has(kGradOutput)) c.grad_output = take_float_tensor(file, kGradOutput, source);
  c.chunk_size = chunk_size_of(file.metadata, source);
  with_source(source, [&] {
    validate_params(config, c.params);
    validate_layer_input(config, c.hidden_states, c.cu_seqlens);
    if (c.grad_output && c.grad_output->shape() != c.hidden_states.shape())
      throw ConfigError("grad_output has shape " + shape_str(c.grad_output->shape()) +
                        "; it must have the shape of hidden_states " + shape_str(c.hidden_states.shape()));
  });
  return c;
}

TensorFile write_layer_case(const LayerCase& layer_case) {
  TensorFile f;
  write_layer_config(layer_case.config, f.metadata);
  f.tensors = layer_case.params;
  f.tensors[kHidden] = layer_case.hidden_states;
  if (layer_case.cu_seqlens) {
    const auto& cu = *layer_case.cu_seqlens;
    f.tensors[kCuSeqlens] = Tensor::from(cu, {static_cast<std::int64_t>(cu.size())});
  }
  if (layer_case.grad_output) f.tensors[kGradOutput] = *layer_case.grad_output;
  return f;
}

namespace {

// The result file's metadata: the oracle, the core's form and the layer's config.
TensorFile result_file(const LayerCase& c, CoreForm form) {
  TensorFile out;
  const bool chunked = form == CoreForm::Chunked;
  const std::string form_name =
      chunked ? "chunked WY/UT core, C=" + std::to_string(c.chunk_size) : std::string("recurrent core");
  out.metadata = {{"source", "gdn-verify fp64 reference oracle " + std::string(kOracleVersion) +
                                 ", GatedDeltaNet layer (" + form_name + ")"},
                  {"oracle_version", kOracleVersion},
                  {"form", chunked ? "chunked" : "recurrent"}};
  if (chunked) out.metadata["chunk_size"] = std::to_string(c.chunk_size);
  write_layer_config(c.config, out.metadata);
  return out;
}

// Forward and backward without stages: one key head's GVA group at a time, for the memory of one
// group's activations instead of the whole mixer's (the same bits).
TensorFile grouped_run(LayerCase c, const std::string& source, CoreForm form) {
  TensorFile out = result_file(c, form);
  GroupedRun run = with_source(source, [&] {
    return layer_run_grouped(c.config, c.params, std::move(c.hidden_states), std::move(*c.grad_output), c.cu_seqlens,
                             {form, c.chunk_size}, c.config.Hk());
  });
  out.tensors["grad_hidden"] = std::move(run.grads.grad_hidden);
  for (auto& [name, g] : run.grads.params) out.tensors[kGradPrefix + name] = std::move(g);
  out.tensors["out"] = std::move(run.out);
  return out;
}

}  // namespace

TensorFile run_layer_file(const TensorFile& file, const std::string& source, CoreForm form, bool stages) {
  return run_layer_file(TensorFile(file), source, form, stages);
}

TensorFile run_layer_file(TensorFile&& file, const std::string& source, CoreForm form, bool stages) {
  LayerCase c = read_layer_case(std::move(file), source);
  const LayerOptions options{form, c.chunk_size};
  if (c.grad_output && !stages) return grouped_run(std::move(c), source, form);
  LayerForward fwd =
      with_source(source, [&] { return layer_forward(c.config, c.params, c.hidden_states, c.cu_seqlens, options); });
  c.hidden_states = Tensor();  // the forward keeps its own copy (fwd.h)
  TensorFile out = result_file(c, form);
  if (stages) out.tensors.merge(forward_stages(c.config, fwd));
  if (c.grad_output) {
    StageTensors grad_stages;
    LayerGrads grads = layer_backward_freeing(c.config, c.params, fwd, *c.grad_output, stages ? &grad_stages : nullptr);
    out.tensors.merge(grad_stages);
    out.tensors["grad_hidden"] = std::move(grads.grad_hidden);
    for (auto& [name, g] : grads.params) out.tensors[kGradPrefix + name] = std::move(g);
  }
  out.tensors["out"] = std::move(fwd.out);
  return out;
}

}  // namespace gdnv::ref
