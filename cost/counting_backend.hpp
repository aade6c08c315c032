#pragma once
// A Backend decorator that measures what the cost models (cost/cost.hpp) predict, on any backend: the
// FLOPs of every op it forwards (priced by cost/op_cost.hpp from the op's real shapes) and the bytes of
// the buffers its ops returned that are still alive. The math stays in the wrapped backend.
#include <atomic>
#include <memory>

#include "cp/backend.hpp"

namespace gdnv::cost {

// The Backend interface this decorator implements.
using cp::Backend, cp::Buffer, cp::ConvArgs, cp::ConvGrads, cp::GateGrads, cp::Gates, cp::GatedNormGrads,
    cp::GatedNormOut, cp::GdrArgs, cp::GdrGrads, cp::GdrOut, cp::LinearGrads, cp::RmsNormGrads, cp::RmsNormOut,
    cp::Varlen;

class CountingBackend final : public Backend {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner);

  double flops() const { return flops_; }
  // Bytes of every buffer this backend handed out (alloc, upload, op results) that is still alive.
  std::int64_t live_bytes() const { return *live_; }

  std::string name() const override { return inner_->name(); }
  DType dtype() const override { return inner_->dtype(); }
  DType state_dtype() const override { return inner_->state_dtype(); }
  Memory memory() const override { return inner_->memory(); }
  std::shared_ptr<DataMover> data_mover() override { return inner_->data_mover(); }
  void count_host_syncs(std::shared_ptr<Accounting> accounting) override {
    inner_->count_host_syncs(std::move(accounting));
  }

  Buffer alloc(DType dtype, Shape shape) override;
  Buffer upload(const Tensor& t, DType as) override;
  Tensor download(const Buffer& b) override { return inner_->download(b); }
  Buffer gather_rows(const Buffer& x, const Buffer& index) override;
  void scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) override { inner_->scatter_rows(x, index, out); }
  Buffer gather_columns(const Buffer& x, const Buffer& index) override;
  void scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) override {
    inner_->scatter_columns(x, index, out);
  }
  void accumulate(Buffer& y, const Buffer& x) override { inner_->accumulate(y, x); }

  RmsNormOut rmsnorm(const Buffer& x, const Buffer& w, double eps) override;
  RmsNormGrads rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w, const Buffer& rstd) override;
  Buffer linear(const Buffer& x, const Buffer& w) override;
  LinearGrads linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) override;
  Buffer conv1d(const ConvArgs& args) override;
  ConvGrads conv1d_backward(const ConvArgs& args, const Buffer& dy) override;
  Gates gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) override;
  GateGrads gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                           const Buffer& A_log, const Buffer& dt_bias) override;
  GdrOut gdr(const GdrArgs& args) override;
  GdrGrads gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) override;
  Buffer gdr_last_span_map(const GdrArgs& args) override;
  Buffer gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) override;
  Buffer fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) override;
  GatedNormOut gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) override;
  GatedNormGrads gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                     const Buffer& rstd, double eps) override;

 private:
  // The same buffer, its storage now counted as live until the last handle to it goes.
  Buffer tracked(const Buffer& b);
  void count(double flops) { flops_ += flops; }

  std::unique_ptr<Backend> inner_;
  double flops_ = 0;
  std::shared_ptr<std::atomic<std::int64_t>> live_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace gdnv::cost
