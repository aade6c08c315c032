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

CountingBackend::CountingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

Buffer CountingBackend::tracked(const Buffer& b) {
  if (b.empty()) return b;
  const auto bytes = static_cast<std::int64_t>(b.nbytes());
  *live_ += bytes;
  // The new handle owns the wrapped one, so the storage lives exactly as long as before.
  std::shared_ptr<void> storage(const_cast<void*>(b.data()), [keep = b, live = live_, bytes](void*) { *live -= bytes; });
  return Buffer(b.dtype(), b.shape(), std::move(storage));
}

Buffer CountingBackend::alloc(DType dtype, Shape shape) { return tracked(inner_->alloc(dtype, std::move(shape))); }
Buffer CountingBackend::upload(const Tensor& t, DType as) { return tracked(inner_->upload(t, as)); }
Buffer CountingBackend::gather_rows(const Buffer& x, const Buffer& index) {
  return tracked(inner_->gather_rows(x, index));
}
Buffer CountingBackend::gather_columns(const Buffer& x, const Buffer& index) {
  return tracked(inner_->gather_columns(x, index));
}

RmsNormOut CountingBackend::rmsnorm(const Buffer& x, const Buffer& w, double eps) {
  RmsNormOut r = inner_->rmsnorm(x, w, eps);
  return {tracked(r.y), tracked(r.rstd)};
}

RmsNormGrads CountingBackend::rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w,
                                               const Buffer& rstd) {
  RmsNormGrads r = inner_->rmsnorm_backward(dy, x, w, rstd);
  return {tracked(r.dx), tracked(r.dw)};
}

Buffer CountingBackend::linear(const Buffer& x, const Buffer& w) {
  count(linear_cost(kFlopsOnly, x.dim(0), x.dim(1), w.dim(0)).flops);
  return tracked(inner_->linear(x, w));
}

LinearGrads CountingBackend::linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) {
  count(linear_backward_cost(kFlopsOnly, x.dim(0), x.dim(1), w.dim(0)).flops);
  LinearGrads r = inner_->linear_backward(dy, x, w);
  return {tracked(r.dx), tracked(r.dw)};
}

Buffer CountingBackend::conv1d(const ConvArgs& a) {
  count(conv_cost(kFlopsOnly, a.x.dim(0), a.x.dim(1), a.weight.dim(1)).flops);
  return tracked(inner_->conv1d(a));
}

ConvGrads CountingBackend::conv1d_backward(const ConvArgs& a, const Buffer& dy) {
  count(conv_backward_cost(kFlopsOnly, a.x.dim(0), a.x.dim(1), a.weight.dim(1)).flops);
  ConvGrads r = inner_->conv1d_backward(a, dy);
  return {tracked(r.dx), tracked(r.dw), tracked(r.dbias), tracked(r.dhalo)};
}

Gates CountingBackend::gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) {
  Gates r = inner_->gates(a, b, A_log, dt_bias);
  return {tracked(r.g), tracked(r.beta)};
}

GateGrads CountingBackend::gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                          const Buffer& A_log, const Buffer& dt_bias) {
  GateGrads r = inner_->gates_backward(dg, dbeta, a, b, A_log, dt_bias);
  return {tracked(r.da), tracked(r.db), tracked(r.dA_log), tracked(r.ddt_bias)};
}

GdrOut CountingBackend::gdr(const GdrArgs& a) {
  count(gdr_cost(kFlopsOnly, lengths_of(a.seqs), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  GdrOut r = inner_->gdr(a);
  return {tracked(r.o), tracked(r.final_state)};
}

GdrGrads CountingBackend::gdr_backward(const GdrArgs& a, const Buffer& d_o, const Buffer& dht) {
  count(gdr_backward_cost(kFlopsOnly, lengths_of(a.seqs), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  GdrGrads r = inner_->gdr_backward(a, d_o, dht);
  return {tracked(r.dq), tracked(r.dk), tracked(r.dv), tracked(r.dg), tracked(r.dbeta), tracked(r.dh0)};
}

Buffer CountingBackend::gdr_last_span_map(const GdrArgs& a) {
  count(span_map_cost(kFlopsOnly, lengths_of(a.seqs).back(), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  return tracked(inner_->gdr_last_span_map(a));
}

Buffer CountingBackend::gdr_first_backward_span_map(const GdrArgs& a, const Buffer& d_o) {
  count(span_map_cost(kFlopsOnly, lengths_of(a.seqs).front(), a.q.dim(1), a.v.dim(1), a.q.dim(2), a.v.dim(2)).flops);
  return tracked(inner_->gdr_first_backward_span_map(a, d_o));
}

Buffer CountingBackend::fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) {
  const std::int64_t K = maps.dim(2);
  count(fold_cost(kFlopsOnly, end - begin, maps.dim(1), K, maps.dim(3) - K).flops);
  return tracked(inner_->fold_span_maps(maps, begin, end, direction));
}

GatedNormOut CountingBackend::gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) {
  GatedNormOut r = inner_->gated_norm(o, z, w, eps);
  return {tracked(r.y), tracked(r.rstd)};
}

GatedNormGrads CountingBackend::gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z,
                                                    const Buffer& w, const Buffer& rstd, double eps) {
  GatedNormGrads r = inner_->gated_norm_backward(dy, o, z, w, rstd, eps);
  return {tracked(r.d_o), tracked(r.dz), tracked(r.dw)};
}

}  // namespace gdnv::cost
