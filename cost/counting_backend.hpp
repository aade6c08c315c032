#pragma once
// A Backend decorator that measures what the cost models (cost/cost.hpp) predict, on any backend: the
// FLOPs of every op it forwards (priced by cost/op_cost.hpp from the op's real shapes) and the bytes of
// the buffers its ops returned that are still alive. The math stays in the wrapped backend.
#include <atomic>
#include <memory>

#include "cp/backend.hpp"

namespace gdnv::cost {

// The Backend interface this decorator implements.
using cp::Backend, cp::BackendDecorator, cp::Buffer, cp::ConvArgs, cp::ConvGrads, cp::GateGrads, cp::Gates,
    cp::GatedNormGrads, cp::GatedNormOut, cp::GdrArgs, cp::GdrGrads, cp::GdrOut, cp::LinearGrads, cp::RmsNormGrads,
    cp::RmsNormOut, cp::Varlen;

// Each op is checked once, by this backend's public op (cp/backend.hpp), then priced and run by the
// wrapped backend's do_<op>; download, scatters and accumulate return no buffer and pass straight through.
class CountingBackend final : public BackendDecorator {
 public:
  explicit CountingBackend(std::unique_ptr<Backend> inner);

  double flops() const { return flops_; }
  // Bytes of every buffer this backend handed out (alloc, upload, op results) that is still alive.
  std::int64_t live_bytes() const { return *live_; }

 protected:
  Buffer do_alloc(DType dtype, Shape shape) override;
  Buffer do_upload(const Tensor& t, DType as) override;
  Buffer do_gather_rows(const Buffer& x, const Buffer& index) override;
  Buffer do_gather_columns(const Buffer& x, const Buffer& index) override;

  RmsNormOut do_rmsnorm(const Buffer& x, const Buffer& w, double eps) override;
  RmsNormGrads do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w, const Buffer& rstd) override;
  Buffer do_linear(const Buffer& x, const Buffer& w) override;
  LinearGrads do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) override;
  Buffer do_conv1d(const ConvArgs& args) override;
  ConvGrads do_conv1d_backward(const ConvArgs& args, const Buffer& dy) override;
  Gates do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) override;
  GateGrads do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                              const Buffer& A_log, const Buffer& dt_bias) override;
  GdrOut do_gdr(const GdrArgs& args) override;
  GdrGrads do_gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) override;
  Buffer do_gdr_last_span_map(const GdrArgs& args) override;
  Buffer do_gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) override;
  Buffer do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) override;
  GatedNormOut do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) override;
  GatedNormGrads do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                        const Buffer& rstd, double eps) override;

 private:
  // The same buffer, its storage now counted as live until the last handle to it goes.
  Buffer tracked(const Buffer& b);
  void count(double flops) { flops_ += flops; }

  double flops_ = 0;
  std::shared_ptr<std::atomic<std::int64_t>> live_ = std::make_shared<std::atomic<std::int64_t>>(0);
};

}  // namespace gdnv::cost
