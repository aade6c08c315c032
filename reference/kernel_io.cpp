#include "reference/kernel_io.hpp"

#include <cmath>
#include <limits>

#include "core/metadata.hpp"
#include "reference/gdr_common.hpp"

namespace gdnv::ref {
namespace {

// The named tensor taken out of `file` as F64; nullopt when absent.
std::optional<Tensor> take_f64(TensorFile& file, const std::string& name, const std::string& source) {
  auto node = file.tensors.extract(name);
  if (node.empty()) return std::nullopt;
  Tensor t = std::move(node.mapped());
  if (t.dtype() == DType::F64) return t;
  if (!is_float(t.dtype()))
    throw FormatError(source + ": tensor '" + name + "' has dtype " + std::string(dtype_name(t.dtype())) +
                      "; it must be a float dtype (F64, F32, BF16 or F16)");
  return t.to(DType::F64);
}

Tensor take_required(TensorFile& file, const std::string& name, const std::string& source,
                     const std::string& needs = "q k v g beta") {
  auto t = take_f64(file, name, source);
  if (!t)
    throw FormatError(source + ": tensor '" + name + "' is missing; a kernel-level input needs " + needs +
                      " (docs/DESIGN.md §5)");
  return std::move(*t);
}

std::vector<std::int64_t> take_cu_seqlens(TensorFile& file, const std::string& source) {
  const Tensor& t = file.tensors.at("cu_seqlens");
  if ((t.dtype() != DType::I64 && t.dtype() != DType::I32) || t.rank() != 1)
    throw FormatError(source + ": tensor 'cu_seqlens' is " + std::string(dtype_name(t.dtype())) + " " +
                      shape_str(t.shape()) + "; it must be a 1-d I32 or I64 tensor [N + 1]");
  return t.to_i64();
}

std::optional<double> scale_of(const Metadata& meta, const std::string& source) {
  const auto it = meta.find("scale");
  if (it == meta.end() || it->second == "default 1/sqrt(K)") return std::nullopt;
  return meta_number(meta, "scale", source);
}

}  // namespace

int chunk_size_of(const Metadata& metadata, const std::string& source) {
  const long long chunk = meta_int(metadata, "chunk_size", source).value_or(64);
  if (chunk < 1 || chunk > std::numeric_limits<int>::max())
    throw ConfigError(source + ": metadata 'chunk_size' = " + std::to_string(chunk) +
                      "; it must be a positive number of tokens (FLA uses 64)");
  return static_cast<int>(chunk);
}

GdrCase take_gdr_case(TensorFile& file, const std::string& source) {
  GdrCase c;
  c.in.q = take_required(file, "q", source);
  c.in.k = take_required(file, "k", source);
  c.in.v = take_required(file, "v", source);
  c.in.g = take_required(file, "g", source);
  c.in.beta = take_required(file, "beta", source);
  c.in.initial_state = take_f64(file, "initial_state", source);
  if (file.has("cu_seqlens")) c.in.cu_seqlens = take_cu_seqlens(file, source);
  c.d_o = take_f64(file, "do", source);
  c.dht = take_f64(file, "dht", source);
  if (c.dht && !c.d_o) throw FormatError(source + ": tensor 'dht' is given without 'do'; add do to get gradients");
  c.in.scale = scale_of(file.metadata, source);
  c.in.use_qk_l2norm = meta_bool(file.metadata, "use_qk_l2norm", source).value_or(false);
  c.chunk_size = chunk_size_of(file.metadata, source);
  try {  // all checks now, so that a bad do fails before any math
    const detail::GdrGeometry geo = detail::gdr_geometry(c.in);
    if (c.d_o) detail::check_grad_inputs(geo, *c.d_o, c.dht);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
  return c;
}

TensorFile run_gdr_case(const GdrCase& c, GdrForm form) {
  const bool chunked = form == GdrForm::Chunked;
  GdrOutputs out = chunked ? gdr_chunked_forward(c.in, c.chunk_size) : gdr_recurrent_forward(c.in);
  TensorFile file;
  file.tensors.emplace("o", std::move(out.o));
  file.tensors.emplace("final_state", std::move(out.final_state));
  if (c.d_o) {
    GdrGrads d =
        chunked ? gdr_chunked_backward(c.in, *c.d_o, c.dht, c.chunk_size) : gdr_recurrent_backward(c.in, *c.d_o, c.dht);
    for (auto& [name, t] :
         {std::pair{"dq", &d.dq}, {"dk", &d.dk}, {"dv", &d.dv}, {"dg", &d.dg}, {"dbeta", &d.dbeta}, {"dh0", &d.dh0}})
      file.tensors.emplace(name, std::move(*t));
  }
  const std::string form_name =
      chunked ? "chunked WY/UT form, C=" + std::to_string(c.chunk_size) : std::string("recurrent form");
  file.metadata = {
      {"source", "gdn-verify " GDNV_VERSION " fp64 reference oracle (" + form_name + ")"},
      {"oracle_version", GDNV_VERSION},
      {"form", chunked ? "chunked" : "recurrent"},
      {"scale", format_number(c.in.scale.value_or(1.0 / std::sqrt(static_cast<double>(c.in.k.dim(3)))))},
      {"use_qk_l2norm", format_bool(c.in.use_qk_l2norm)},
  };
  if (chunked) file.metadata["chunk_size"] = std::to_string(c.chunk_size);
  return file;
}

bool is_conv_file(const TensorFile& file) { return file.has("x") && file.has("weight"); }

ConvCase take_conv_case(TensorFile& file, const std::string& source) {
  ConvCase c;
  c.in.x = take_required(file, "x", source, "x weight");
  c.in.weight = take_required(file, "weight", source, "x weight");
  c.in.bias = take_f64(file, "bias", source);
  c.in.initial_state = take_f64(file, "initial_state", source);
  if (file.has("cu_seqlens")) c.in.cu_seqlens = take_cu_seqlens(file, source);
  c.dy = take_f64(file, "dy", source);
  c.dht = take_f64(file, "dht", source);
  if (c.dht && !c.dy) throw FormatError(source + ": tensor 'dht' is given without 'dy'; add dy to get gradients");
  const auto act = file.metadata.find("activation");
  const std::string name = act == file.metadata.end() ? "silu" : act->second;
  if (name != "silu" && name != "swish" && name != "none")
    throw ConfigError(source + ": metadata 'activation' = '" + name + "'; it must be silu (or swish) or none");
  c.in.activation = name == "none" ? Activation::None : Activation::Silu;
  try {  // all checks now, so that a bad dy or dht fails before any math
    conv1d_final_state(c.in);
    if (c.dy) conv1d_backward(c.in, *c.dy, c.dht);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
  return c;
}

TensorFile run_conv_case(const ConvCase& c) {
  TensorFile file;
  file.tensors.emplace("y", conv1d_forward(c.in));
  file.tensors.emplace("final_state", conv1d_final_state(c.in));
  if (c.dy) {
    Conv1dGrads d = conv1d_backward(c.in, *c.dy, c.dht);
    file.tensors.emplace("dx", std::move(d.dx));
    file.tensors.emplace("dweight", std::move(d.dweight));
    if (d.dbias) file.tensors.emplace("dbias", std::move(*d.dbias));
    if (d.dh0) file.tensors.emplace("dh0", std::move(*d.dh0));
  }
  file.metadata = {
      {"source", "gdn-verify " GDNV_VERSION " fp64 reference oracle (causal conv1d)"},
      {"oracle_version", GDNV_VERSION},
      {"activation", c.in.activation == Activation::Silu ? "silu" : "none"},
  };
  return file;
}

}  // namespace gdnv::ref
