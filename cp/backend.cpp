// The argument checks of every Backend op, made once here for every backend before its do_<op> runs.
#include "cp/backend.hpp"

#include <string>
#include <string_view>

namespace gdnv::cp {
namespace {

std::string describe(const Buffer& b) { return std::string(dtype_name(b.dtype())) + " " + shape_str(b.shape()); }

// Throws Error "<op>: <arg> is <dtype> <shape>; expected <dtype> <dims> = <shape>" on any mismatch.
void expect(const Buffer& b, std::string_view op, std::string_view arg, DType dtype, const Shape& shape,
            std::string_view dims) {
  if (b.empty() || b.dtype() != dtype || b.shape() != shape)
    throw Error(std::string(op) + ": " + std::string(arg) + " is " + (b.empty() ? std::string("empty") : describe(b)) +
                "; expected " + std::string(dtype_name(dtype)) + " " + std::string(dims) + " = " + shape_str(shape));
}

// Throws Error "<op>: <arg> has shape <shape>; expected rank <rank> <dims>" unless b has that rank.
void expect_rank(const Buffer& b, std::string_view op, std::string_view arg, int rank, std::string_view dims) {
  if (b.empty() || b.rank() != rank)
    throw Error(std::string(op) + ": " + std::string(arg) + " has shape " +
                (b.empty() ? std::string("(empty)") : shape_str(b.shape())) + "; expected rank " +
                std::to_string(rank) + " " + std::string(dims));
}

// An index list is I64 [M]; its values are checked by the backend, where they live.
void expect_index(const Buffer& index, std::string_view op) {
  if (index.dtype() != DType::I64 || index.rank() != 1)
    throw Error(std::string(op) + ": index is " + describe(index) + "; expected I64 [M]");
}

// cu is [0, ..., tokens], non-decreasing, with at least one sequence.
void expect_varlen(const std::vector<std::int64_t>& cu, std::int64_t tokens, std::string_view op) {
  bool ok = cu.size() >= 2 && cu.front() == 0 && cu.back() == tokens;
  for (std::size_t i = 1; ok && i < cu.size(); ++i) ok = cu[i] >= cu[i - 1];
  if (!ok) {
    std::string list;
    for (const std::int64_t c : cu) list += (list.empty() ? "" : ",") + std::to_string(c);
    throw Error(std::string(op) + ": sequence offsets [" + list + "] must start at 0, not decrease and end at the " +
                std::to_string(tokens) + " local tokens");
  }
}

// Rows of a buffer: its first dimension (a scalar is one row); a row is everything after it.
std::int64_t row_count(const Buffer& b) { return b.rank() == 0 ? 1 : b.dim(0); }
std::int64_t row_bytes(const Buffer& b) {
  std::int64_t n = static_cast<std::int64_t>(dtype_size(b.dtype()));
  for (int d = 1; d < b.rank(); ++d) n *= b.dim(d);
  return n;
}

// x [N, D] and w [D] in dtype().
void check_rows_and_width(const Backend& be, const Buffer& x, const Buffer& w, const char* op) {
  expect_rank(x, op, "x", 2, "[N, D]");
  expect(w, op, "w", be.dtype(), {x.dim(1)}, "[D]");
  expect(x, op, "x", be.dtype(), x.shape(), "[N, D]");
}

// x [N, in] and w [out, in] in dtype().
void check_linear(const Backend& be, const Buffer& x, const Buffer& w, const char* op) {
  expect_rank(x, op, "x", 2, "[N, in]");
  expect_rank(w, op, "w", 2, "[out, in]");
  expect(x, op, "x", be.dtype(), x.shape(), "[N, in]");
  expect(w, op, "w", be.dtype(), {w.dim(0), x.dim(1)}, "[out, in]");
}

void check_conv(const Backend& be, const ConvArgs& a, const char* op) {
  expect_rank(a.x, op, "x", 2, "[N, D]");
  expect_rank(a.weight, op, "weight", 2, "[D, W]");
  const std::int64_t N = a.x.dim(0), D = a.x.dim(1), W = a.weight.dim(1);
  expect(a.x, op, "x", be.dtype(), {N, D}, "[N, D]");
  expect(a.weight, op, "weight", be.dtype(), {D, W}, "[D, W]");
  if (a.bias) expect(*a.bias, op, "bias", be.dtype(), {D}, "[D]");
  if (!a.halo.empty()) expect(a.halo, op, "halo", be.dtype(), {W - 1, D}, "[W-1, D]");
  expect_varlen(a.seqs.host, N, op);
}

void check_gate_inputs(const Backend& be, const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias,
                       const char* op) {
  expect_rank(a, op, "a", 2, "[N, Hv]");
  expect(a, op, "a", be.dtype(), a.shape(), "[N, Hv]");
  expect(b, op, "b", be.dtype(), a.shape(), "[N, Hv]");
  expect(A_log, op, "A_log", be.dtype(), {a.dim(1)}, "[Hv]");
  expect(dt_bias, op, "dt_bias", be.dtype(), {a.dim(1)}, "[Hv]");
}

void check_gdr(const Backend& be, const GdrArgs& a, const char* op) {
  expect_rank(a.q, op, "q", 3, "[N, Hk, dk]");
  expect_rank(a.v, op, "v", 3, "[N, Hv, dv]");
  const std::int64_t N = a.q.dim(0), Hk = a.q.dim(1), K = a.q.dim(2), Hv = a.v.dim(1), V = a.v.dim(2);
  expect(a.q, op, "q", be.dtype(), {N, Hk, K}, "[N, Hk, dk]");
  expect(a.k, op, "k", be.dtype(), {N, Hk, K}, "[N, Hk, dk]");
  expect(a.v, op, "v", be.dtype(), {N, Hv, V}, "[N, Hv, dv]");
  expect(a.g, op, "g", be.state_dtype(), {N, Hv}, "[N, Hv]");
  expect(a.beta, op, "beta", be.state_dtype(), {N, Hv}, "[N, Hv]");
  if (!a.h0.empty()) expect(a.h0, op, "h0", be.state_dtype(), {Hv, K, V}, "[Hv, dk, dv]");
  if (Hk < 1 || Hv % Hk != 0)
    throw Error(std::string(op) + ": " + std::to_string(Hv) + " value heads cannot share " + std::to_string(Hk) +
                " key heads; GVA needs Hv % Hk == 0");
  expect_varlen(a.seqs.host, N, op);
}

void check_gated_norm(const Backend& be, const Buffer& o, const Buffer& z, const Buffer& w, const char* op) {
  expect_rank(o, op, "o", 3, "[N, Hv, dv]");
  expect(o, op, "o", be.dtype(), o.shape(), "[N, Hv, dv]");
  expect(z, op, "z", be.dtype(), o.shape(), "[N, Hv, dv]");
  expect(w, op, "w", be.dtype(), {o.dim(2)}, "[dv]");
}

}  // namespace

// ---- buffers and data movement ----------------------------------------------------------------

Buffer Backend::gather_rows(const Buffer& x, const Buffer& index) {
  expect_index(index, "gather_rows");
  return do_gather_rows(x, index);
}

void Backend::scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) {
  expect_index(index, "scatter_rows");
  if (x.dtype() != out.dtype() || row_count(x) != index.numel() || row_bytes(x) != row_bytes(out))
    throw Error("scatter_rows: x " + describe(x) + " does not match " + std::to_string(index.numel()) +
                " rows of out " + describe(out));
  do_scatter_rows(x, index, out);
}

Buffer Backend::gather_columns(const Buffer& x, const Buffer& index) {
  expect_rank(x, "gather_columns", "x", 2, "[N, D]");
  expect_index(index, "gather_columns");
  return do_gather_columns(x, index);
}

void Backend::scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) {
  expect_rank(out, "scatter_columns", "out", 2, "[N, D]");
  expect_index(index, "scatter_columns");
  expect(x, "scatter_columns", "x", out.dtype(), {out.dim(0), index.numel()}, "[N, E]");
  do_scatter_columns(x, index, out);
}

void Backend::accumulate(Buffer& y, const Buffer& x) {
  const auto ok = [](DType d) { return d == DType::F64 || d == DType::F32 || d == DType::BF16; };
  if (y.shape() != x.shape() || !ok(y.dtype()) || !ok(x.dtype()))
    throw Error("accumulate: y " + describe(y) + " and x " + describe(x) + " must be F64, F32 or BF16 of one shape");
  do_accumulate(y, x);
}

// ---- leaf math --------------------------------------------------------------------------------

RmsNormOut Backend::rmsnorm(const Buffer& x, const Buffer& w, double eps) {
  check_rows_and_width(*this, x, w, "rmsnorm");
  return do_rmsnorm(x, w, eps);
}

RmsNormGrads Backend::rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w, const Buffer& rstd) {
  check_rows_and_width(*this, x, w, "rmsnorm_backward");
  expect(dy, "rmsnorm_backward", "dy", dtype(), x.shape(), "[N, D]");
  expect(rstd, "rmsnorm_backward", "rstd", state_dtype(), {x.dim(0)}, "[N]");
  return do_rmsnorm_backward(dy, x, w, rstd);
}

Buffer Backend::linear(const Buffer& x, const Buffer& w) {
  check_linear(*this, x, w, "linear");
  return do_linear(x, w);
}

LinearGrads Backend::linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) {
  check_linear(*this, x, w, "linear_backward");
  expect(dy, "linear_backward", "dy", dtype(), {x.dim(0), w.dim(0)}, "[N, out]");
  return do_linear_backward(dy, x, w);
}

Buffer Backend::conv1d(const ConvArgs& args) {
  check_conv(*this, args, "conv1d");
  return do_conv1d(args);
}

ConvGrads Backend::conv1d_backward(const ConvArgs& args, const Buffer& dy) {
  check_conv(*this, args, "conv1d_backward");
  expect(dy, "conv1d_backward", "dy", dtype(), args.x.shape(), "[N, D]");
  return do_conv1d_backward(args, dy);
}

Gates Backend::gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) {
  check_gate_inputs(*this, a, b, A_log, dt_bias, "gates");
  return do_gates(a, b, A_log, dt_bias);
}

GateGrads Backend::gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                  const Buffer& A_log, const Buffer& dt_bias) {
  check_gate_inputs(*this, a, b, A_log, dt_bias, "gates_backward");
  expect(dg, "gates_backward", "dg", state_dtype(), a.shape(), "[N, Hv]");
  expect(dbeta, "gates_backward", "dbeta", state_dtype(), a.shape(), "[N, Hv]");
  return do_gates_backward(dg, dbeta, a, b, A_log, dt_bias);
}

GdrOut Backend::gdr(const GdrArgs& args) {
  check_gdr(*this, args, "gdr");
  return do_gdr(args);
}

GdrGrads Backend::gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) {
  check_gdr(*this, args, "gdr_backward");
  expect(d_o, "gdr_backward", "d_o", dtype(), args.v.shape(), "[N, Hv, dv]");
  const Shape state{args.v.dim(1), args.q.dim(2), args.v.dim(2)};
  if (!dht.empty()) expect(dht, "gdr_backward", "dht", state_dtype(), state, "[Hv, dk, dv]");
  return do_gdr_backward(args, d_o, dht);
}

Buffer Backend::gdr_last_span_map(const GdrArgs& args) {
  check_gdr(*this, args, "gdr_last_span_map");
  return do_gdr_last_span_map(args);
}

Buffer Backend::gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) {
  check_gdr(*this, args, "gdr_first_backward_span_map");
  expect(d_o, "gdr_first_backward_span_map", "d_o", dtype(), args.v.shape(), "[N, Hv, dv]");
  return do_gdr_first_backward_span_map(args, d_o);
}

Buffer Backend::fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) {
  expect_rank(maps, "fold_span_maps", "maps", 4, "[cp, Hv, dk, dv+dk]");
  expect(maps, "fold_span_maps", "maps", state_dtype(), maps.shape(), "[cp, Hv, dk, dv+dk]");
  if (maps.dim(3) - maps.dim(2) < 1 || begin < 0 || begin > end || end > maps.dim(0))
    throw Error("fold_span_maps: ranks [" + std::to_string(begin) + ", " + std::to_string(end) + ") of maps " +
                shape_str(maps.shape()) + "; expected 0 <= begin <= end <= cp and dv+dk > dk");
  return do_fold_span_maps(maps, begin, end, direction);
}

GatedNormOut Backend::gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) {
  check_gated_norm(*this, o, z, w, "gated_norm");
  return do_gated_norm(o, z, w, eps);
}

GatedNormGrads Backend::gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                            const Buffer& rstd, double eps) {
  check_gated_norm(*this, o, z, w, "gated_norm_backward");
  expect(dy, "gated_norm_backward", "dy", dtype(), o.shape(), "[N, Hv, dv]");
  expect(rstd, "gated_norm_backward", "rstd", state_dtype(), {o.dim(0), o.dim(1)}, "[N, Hv]");
  return do_gated_norm_backward(dy, o, z, w, rstd, eps);
}

// ---- BackendDecorator: the wrapped backend's do_<op>, the arguments already checked ------------

Buffer BackendDecorator::do_alloc(DType dtype, Shape shape) { return inner_->do_alloc(dtype, std::move(shape)); }
Buffer BackendDecorator::do_upload(const Tensor& t, DType as) { return inner_->do_upload(t, as); }
Tensor BackendDecorator::do_download(const Buffer& b) { return inner_->do_download(b); }
Buffer BackendDecorator::do_gather_rows(const Buffer& x, const Buffer& index) {
  return inner_->do_gather_rows(x, index);
}
void BackendDecorator::do_scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) {
  inner_->do_scatter_rows(x, index, out);
}
Buffer BackendDecorator::do_gather_columns(const Buffer& x, const Buffer& index) {
  return inner_->do_gather_columns(x, index);
}
void BackendDecorator::do_scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) {
  inner_->do_scatter_columns(x, index, out);
}
void BackendDecorator::do_accumulate(Buffer& y, const Buffer& x) { inner_->do_accumulate(y, x); }
RmsNormOut BackendDecorator::do_rmsnorm(const Buffer& x, const Buffer& w, double eps) {
  return inner_->do_rmsnorm(x, w, eps);
}
RmsNormGrads BackendDecorator::do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w,
                                                   const Buffer& rstd) {
  return inner_->do_rmsnorm_backward(dy, x, w, rstd);
}
Buffer BackendDecorator::do_linear(const Buffer& x, const Buffer& w) { return inner_->do_linear(x, w); }
LinearGrads BackendDecorator::do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) {
  return inner_->do_linear_backward(dy, x, w);
}
Buffer BackendDecorator::do_conv1d(const ConvArgs& args) { return inner_->do_conv1d(args); }
ConvGrads BackendDecorator::do_conv1d_backward(const ConvArgs& args, const Buffer& dy) {
  return inner_->do_conv1d_backward(args, dy);
}
Gates BackendDecorator::do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) {
  return inner_->do_gates(a, b, A_log, dt_bias);
}
GateGrads BackendDecorator::do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                              const Buffer& A_log, const Buffer& dt_bias) {
  return inner_->do_gates_backward(dg, dbeta, a, b, A_log, dt_bias);
}
GdrOut BackendDecorator::do_gdr(const GdrArgs& args) { return inner_->do_gdr(args); }
GdrGrads BackendDecorator::do_gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) {
  return inner_->do_gdr_backward(args, d_o, dht);
}
Buffer BackendDecorator::do_gdr_last_span_map(const GdrArgs& args) { return inner_->do_gdr_last_span_map(args); }
Buffer BackendDecorator::do_gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) {
  return inner_->do_gdr_first_backward_span_map(args, d_o);
}
Buffer BackendDecorator::do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) {
  return inner_->do_fold_span_maps(maps, begin, end, direction);
}
GatedNormOut BackendDecorator::do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) {
  return inner_->do_gated_norm(o, z, w, eps);
}
GatedNormGrads BackendDecorator::do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z,
                                                        const Buffer& w, const Buffer& rstd, double eps) {
  return inner_->do_gated_norm_backward(dy, o, z, w, rstd, eps);
}

}  // namespace gdnv::cp
