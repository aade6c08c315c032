#include "cost/counting_backend.hpp"

#include "cost/op_cost.hpp"

namespace gdnv::cost {
namespace {

// Only the FLOPs of an op's cost are measured here; its HBM bytes (priced from element sizes) are not.
constexpr ElementSizes kFlopsOnly{0, 0};

std::vector<std::int64_t> lengths_of(const Varlen& seqs) {
  std::vector<std::int64_t> out;
  for (std::size_t i = 1; i < seqs.host.size(); ++i) out.push_back(seqs.host[i] - seqs.host[i - 1]);
  return out;
}

}  // namespace

CountingBackend::CountingBackend(std::unique_ptr<Backend> inner) : BackendDecorator(std::move(inner)) {}

Buffer CountingBackend::tracked(const Buffer& b) {
  if (b.empty()) return b;
  const auto bytes = static_cast<std::int64_t>(b.nbytes());
  *live_ += bytes;
  // The new handle owns the wrapped one, so the storage lives exactly as long as before.
  std::shared_ptr<void> storage(const_cast<void*>(b.data()),
                                [keep = b, live = live_, bytes](void*) { *live -= bytes; });
  return Buffer(b.dtype(), b.shape(), std::move(storage));
}

Buffer CountingBackend::do_alloc(DType dtype, Shape shape) {
  return tracked(BackendDecorator::do_alloc(dtype, std::move(shape)));
}
Buffer CountingBackend::do_upload(const Tensor& t, DType as) { return tracked(BackendDecorator::do_upload(t, as)); }
Buffer CountingBackend::do_gather_rows(const Buffer& x, const Buffer& index) {
  return tracked(BackendDecorator::do_gather_rows(x, index));
}
Buffer CountingBackend::do_gather_columns(const Buffer& x, const Buffer& index) {
  return tracked(BackendDecorator::do_gather_columns(x, index));
}

RmsNormOut CountingBackend::do_rmsnorm(const Buffer& x, const Buffer& w, double eps) {
  RmsNormOut r = BackendDecorator::do_rmsnorm(x, w, eps);
  return {tracked(r.y), tracked(r.rstd)};
}

RmsNormGrads CountingBackend::do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w,
                                                  const Buffer& rstd) {
  RmsNormGrads r = BackendDecorator::do_rmsnorm_backward(dy, x, w, rstd);
  return {tracked(r.dx), tracked(r.dw)};
}

Buffer CountingBackend::do_linear(const Buffer& x, const Buffer& w) {
  count(linear_cost(kFlopsOnly, x.dim(0), x.dim(1), w.dim(0)).flops);
  return tracked(BackendDecorator::do_linear(x, w));
}

LinearGrads CountingBackend::do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) {
  count(linear_backward_cost(kFlopsOnly, x.dim(0), x.dim(1), w.dim(0)).flops);
  LinearGrads r = BackendDecorator::do_linear_backward(dy, x, w);
  return {tracked(r.dx), tracked(r.dw)};
}

Buffer CountingBackend::do_conv1d(const ConvArgs& a) {
  count(conv_cost(kFlopsOnly, a.x.dim(0), a.x.dim(1), a.weight.dim(1)).flops);
  return tracked(BackendDecorator::do_conv1d(a));
}

ConvGrads CountingBackend::do_conv1d_backward(const ConvArgs& a, const Buffer& dy) {
  count(conv_backward_cost(kFlopsOnly, a.x.dim(0), a.x.dim(1), a.weight.dim(1)).flops);
  ConvGrads r = BackendDecorator::do_conv1d_backward(a, dy);
  return {tracked(r.dx), tracked(r.dw), tracked(r.dbias), tracked(r.dhalo)};
}

Gates CountingBackend::do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) {
  Gates r = BackendDecorator::do_gates(a, b, A_log, dt_bias);
  return {tracked(r.g), tracked(r.beta)};
}

GateGrads CountingBackend::do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                             const Buffer& A_log, const Buffer& dt_bias) {
  GateGrads r = BackendDecorator::do_gates_backward(dg, dbeta, a, b, A_log, dt_bias);
  return {tracked(r.da), tracked(r.db), tracked(r.dA_log), tracked(r.ddt_bias)};
}

GdrOut CountingBackend::do_gdr(const GdrArgs& a) {
  count(gdr_cost(kFlopsOnly, lengths_of(a.seqs), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  GdrOut r = BackendDecorator::do_gdr(a);
  return {tracked(r.o), tracked(r.final_state)};
}

GdrGrads CountingBackend::do_gdr_backward(const GdrArgs& a, const Buffer& d_o, const Buffer& dht) {
  count(gdr_backward_cost(kFlopsOnly, lengths_of(a.seqs), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  GdrGrads r = BackendDecorator::do_gdr_backward(a, d_o, dht);
  return {tracked(r.dq), tracked(r.dk), tracked(r.dv), tracked(r.dg), tracked(r.dbeta), tracked(r.dh0)};
}

Buffer CountingBackend::do_gdr_last_span_map(const GdrArgs& a) {
  count(span_map_cost(kFlopsOnly, lengths_of(a.seqs).back(), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  return tracked(BackendDecorator::do_gdr_last_span_map(a));
}

Buffer CountingBackend::do_gdr_first_backward_span_map(const GdrArgs& a, const Buffer& d_o) {
  count(span_map_cost(kFlopsOnly, lengths_of(a.seqs).front(), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  return tracked(BackendDecorator::do_gdr_first_backward_span_map(a, d_o));
}

Buffer CountingBackend::do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) {
  const std::int64_t K = maps.dim(2);
  count(fold_cost(kFlopsOnly, end - begin, maps.dim(1), K, maps.dim(3) - K).flops);
  return tracked(BackendDecorator::do_fold_span_maps(maps, begin, end, direction));
}

GatedNormOut CountingBackend::do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) {
  GatedNormOut r = BackendDecorator::do_gated_norm(o, z, w, eps);
  return {tracked(r.y), tracked(r.rstd)};
}

GatedNormGrads CountingBackend::do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z,
                                                       const Buffer& w, const Buffer& rstd, double eps) {
  GatedNormGrads r = BackendDecorator::do_gated_norm_backward(dy, o, z, w, rstd, eps);
  return {tracked(r.d_o), tracked(r.dz), tracked(r.dw)};
}

}  // namespace gdnv::cost
