#include "reference/gdr_common.hpp"

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "reference/l2norm.hpp"

namespace gdnv::ref {
namespace detail {
namespace {

void check_f64(const Tensor& t, const char* name) {
  if (t.dtype() != DType::F64)
    throw ConfigError(std::string(name) + " is " + std::string(dtype_name(t.dtype())) +
                      "; the oracle takes F64 tensors (upcast with Tensor::to(DType::F64))");
}

void check_shape(const Tensor& t, const char* name, const Shape& want, const char* dims) {
  if (t.shape() != want)
    throw ConfigError(std::string(name) + " has shape " + shape_str(t.shape()) + ", expected " + dims + " = " +
                      shape_str(want));
}

void check_finite(const Tensor& t, const char* name) {
  if (const std::int64_t i = first_non_finite(t); i < t.numel())
    throw ConfigError(std::string(name) + " holds " + (std::isnan(t.get(i)) ? "NaN" : "Inf") + " at flat index " +
                      std::to_string(i) + "; the oracle needs finite inputs");
}

}  // namespace

GdrGeometry gdr_geometry(const GdrInputs& in) {
  for (auto [t, name] : {std::pair{&in.q, "q"}, {&in.k, "k"}, {&in.v, "v"}, {&in.g, "g"}, {&in.beta, "beta"}})
    check_f64(*t, name);
  if (in.q.rank() != 4) throw ConfigError("q has shape " + shape_str(in.q.shape()) + ", expected rank 4 [B, T, Hk, K]");
  if (in.v.rank() != 4) throw ConfigError("v has shape " + shape_str(in.v.shape()) + ", expected rank 4 [B, T, Hv, V]");
  GdrGeometry geo{in.q.dim(0), in.q.dim(1), in.q.dim(2), in.v.dim(2), in.q.dim(3), in.v.dim(3), 0, 0, {}};
  check_shape(in.k, "k", in.q.shape(), "[B, T, Hk, K] (the shape of q)");
  check_shape(in.v, "v", {geo.B, geo.T, geo.Hv, geo.V}, "[B, T, Hv, V] (B, T of q)");
  check_shape(in.g, "g", {geo.B, geo.T, geo.Hv}, "[B, T, Hv]");
  check_shape(in.beta, "beta", {geo.B, geo.T, geo.Hv}, "[B, T, Hv]");
  if (geo.Hk < 1 || geo.Hv < 1 || geo.K < 1 || geo.V < 1)
    throw ConfigError("q " + shape_str(in.q.shape()) + " / v " + shape_str(in.v.shape()) +
                      ": Hk, Hv, K and V must be at least 1");
  if (geo.Hv % geo.Hk != 0)
    throw ConfigError("Hv % Hk != 0 (Hv = " + std::to_string(geo.Hv) + ", Hk = " + std::to_string(geo.Hk) +
                      "): the value heads must be a multiple of the key heads (GVA)");
  geo.seqs = sequences_of(geo.B, geo.T, in.cu_seqlens);
  geo.N = static_cast<std::int64_t>(geo.seqs.size());
  if (in.initial_state) {
    check_f64(*in.initial_state, "initial_state");
    check_shape(*in.initial_state, "initial_state", {geo.N, geo.Hv, geo.K, geo.V}, "[N, Hv, K, V]");
  }
  geo.scale = in.scale ? *in.scale : 1.0 / std::sqrt(static_cast<double>(geo.K));
  if (!std::isfinite(geo.scale)) throw ConfigError("scale is " + std::to_string(geo.scale) + "; it must be finite");
  for (auto [t, name] : {std::pair{&in.q, "q"}, {&in.k, "k"}, {&in.v, "v"}, {&in.g, "g"}, {&in.beta, "beta"}})
    check_finite(*t, name);
  if (in.initial_state) check_finite(*in.initial_state, "initial_state");
  return geo;
}

void check_grad_inputs(const GdrGeometry& geo, const Tensor& d_o, const std::optional<Tensor>& dht) {
  check_f64(d_o, "do");
  check_shape(d_o, "do", {geo.B, geo.T, geo.Hv, geo.V}, "[B, T, Hv, V] (the shape of o)");
  check_finite(d_o, "do");
  if (dht) {
    check_f64(*dht, "dht");
    check_shape(*dht, "dht", {geo.N, geo.Hv, geo.K, geo.V}, "[N, Hv, K, V] (the shape of final_state)");
    check_finite(*dht, "dht");
  }
}

namespace {
std::int64_t row_offset(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin) {
  return ((s.b * x.dim(1) + s.begin + begin) * x.dim(2) + h) * x.dim(3);
}
std::int64_t gate_offset(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin) {
  return (s.b * x.dim(1) + s.begin + begin) * x.dim(2) + h;
}
}  // namespace

ConstRows head_rows(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len) {
  return ConstRows(x.data<double>() + row_offset(x, s, h, begin), len, x.dim(3),
                   Eigen::OuterStride<>(x.dim(2) * x.dim(3)));
}
Rows head_rows(Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len) {
  return Rows(x.data<double>() + row_offset(x, s, h, begin), len, x.dim(3), Eigen::OuterStride<>(x.dim(2) * x.dim(3)));
}
ConstGates head_gates(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len) {
  return ConstGates(x.data<double>() + gate_offset(x, s, h, begin), len, Eigen::InnerStride<>(x.dim(2)));
}
Gates head_gates(Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len) {
  return Gates(x.data<double>() + gate_offset(x, s, h, begin), len, Eigen::InnerStride<>(x.dim(2)));
}

ConstMatrixMap state_of(const Tensor& x, std::int64_t n, std::int64_t h) {
  const std::int64_t K = x.dim(2), V = x.dim(3);
  return ConstMatrixMap(x.data<double>() + (n * x.dim(1) + h) * K * V, K, V);
}
MatrixMap state_of(Tensor& x, std::int64_t n, std::int64_t h) {
  const std::int64_t K = x.dim(2), V = x.dim(3);
  return MatrixMap(x.data<double>() + (n * x.dim(1) + h) * K * V, K, V);
}

RowMatrix state_or_zero(const std::optional<Tensor>& x, const GdrGeometry& geo, const Sequence& s, std::int64_t h) {
  return x ? RowMatrix(state_of(*x, s.n, h)) : RowMatrix::Zero(geo.K, geo.V);
}

void finish_qk_grads(const GdrInputs& in, GdrGrads& grads) {
  if (!in.use_qk_l2norm) return;
  l2norm_backward(in.q, grads.dq);
  l2norm_backward(in.k, grads.dk);
}

GdrOutputs make_outputs(const GdrGeometry& geo) {
  return {Tensor(DType::F64, {geo.B, geo.T, geo.Hv, geo.V}), Tensor(DType::F64, {geo.N, geo.Hv, geo.K, geo.V}),
          nullptr};
}

GdrGrads make_grads(const GdrGeometry& geo) {
  const Shape qk{geo.B, geo.T, geo.Hk, geo.K}, gate{geo.B, geo.T, geo.Hv};
  return {Tensor(DType::F64, qk),   Tensor(DType::F64, qk),   Tensor(DType::F64, {geo.B, geo.T, geo.Hv, geo.V}),
          Tensor(DType::F64, gate), Tensor(DType::F64, gate), Tensor(DType::F64, {geo.N, geo.Hv, geo.K, geo.V})};
}

}  // namespace detail

void validate(const GdrInputs& in) { detail::gdr_geometry(in); }

}  // namespace gdnv::ref
