#pragma once
// The compute Backend: the leaf kernels of the GatedDeltaNet layer, forward and backward. The three CP
// modes (cp/headwise.*, cp/chunkwise.*, cp/all_gather.*) are written once against this interface and a
// Communicator; the CPU backend (cpu/backend.*) and the CUDA backend (gpu/) differ only here.
//
// Precision contract (docs/DESIGN.md §4): activations and parameters are stored in dtype() (fp64, fp32 or
// bf16; bf16 rounded to nearest even at every op boundary, as a GPU stack stores them); arithmetic
// accumulates in fp32 (fp64 for fp64); gates, recurrent states, the span maps (M, h_ext) and parameter
// gradients are stored in state_dtype() (fp32; fp64 for fp64).
//
// Shapes: N = local tokens (sequences packed back to back, described by a Varlen), D = channels.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/inprocess.hpp"
#include "core/span_map.hpp"
#include "cp/buffer.hpp"

namespace gdnv::cp {

// Packed sequences: cu[i]..cu[i+1] are the rows of local sequence i. `host` drives host-side planning
// and the CPU kernels; `device` (I64 [n+1]) is the same list where the backend computes, uploaded once
// per micro-batch so no kernel needs a host copy.
struct Varlen {
  std::vector<std::int64_t> host;
  Buffer device;

  int count() const { return static_cast<int>(host.size()) - 1; }
  std::int64_t tokens() const { return host.back(); }
};

struct RmsNormOut {
  Buffer y;     // [N, D]  dtype()
  Buffer rstd;  // [N]     state_dtype()
};
struct RmsNormGrads {
  Buffer dx;  // [N, D]  dtype()
  Buffer dw;  // [D]     state_dtype()
};

struct LinearGrads {
  Buffer dx;  // [N, in]    dtype()
  Buffer dw;  // [out, in]  state_dtype()
};

// Causal depthwise conv1d + SiLU over packed sequences (docs/DESIGN.md §1.2). `halo` holds the W-1 tokens
// that precede the FIRST local sequence on earlier ranks (chunkwise CP), oldest first; an empty Buffer
// means zeros (the sequence starts here). No bleed between sequences.
struct ConvArgs {
  const Buffer& x;       // [N, D]  dtype()
  const Buffer& weight;  // [D, W]  dtype()
  const Buffer* bias;    // [D]     dtype(), or nullptr
  const Varlen& seqs;
  const Buffer& halo;  // [W-1, D] dtype(), or empty
};
struct ConvGrads {
  Buffer dx;     // [N, D]    dtype()
  Buffer dw;     // [D, W]    state_dtype()
  Buffer dbias;  // [D]       state_dtype(), empty without bias
  Buffer dhalo;  // [W-1, D]  dtype(), empty without halo: the gradient returned to the halo's owners
};

struct Gates {
  Buffer g;     // [N, Hv]  state_dtype()  g = -exp(A_log) * softplus(a + dt_bias)
  Buffer beta;  // [N, Hv]  state_dtype()  beta = sigmoid(b)
};
struct GateGrads {
  Buffer da, db;    // [N, Hv]  dtype()
  Buffer dA_log;    // [Hv]     state_dtype()
  Buffer ddt_bias;  // [Hv]     state_dtype()
};

// The chunked gated delta rule over packed sequences (docs/DESIGN.md §1.1), q and k L2-normalised in the
// kernel (Megatron's use_qk_l2norm_in_kernel=True). `h0` is the initial state of the FIRST local
// sequence (chunkwise CP: the state folded from earlier ranks); every other sequence starts from zero.
struct GdrArgs {
  const Buffer& q;     // [N, Hk, dk]  dtype()
  const Buffer& k;     // [N, Hk, dk]  dtype()
  const Buffer& v;     // [N, Hv, dv]  dtype()
  const Buffer& g;     // [N, Hv]      state_dtype()
  const Buffer& beta;  // [N, Hv]      state_dtype()
  const Varlen& seqs;
  const Buffer& h0;  // [Hv, dk, dv] state_dtype(), or empty for zero
  double scale;
};
struct GdrOut {
  Buffer o;            // [N, Hv, dv]   dtype()
  Buffer final_state;  // [Hv, dk, dv]  state_dtype(): the LAST local sequence's
};
struct GdrGrads {
  Buffer dq, dk;  // [N, Hk, dk]   dtype()
  Buffer dv;      // [N, Hv, dv]   dtype()
  Buffer dg;      // [N, Hv]       state_dtype()
  Buffer dbeta;   // [N, Hv]       state_dtype()
  Buffer dh0;     // [Hv, dk, dv]  state_dtype(): gradient of the FIRST sequence's initial state
};

// y = rmsnorm_per_head(o) * w * silu(z) (Megatron's gated out_norm).
struct GatedNormOut {
  Buffer y;     // [N, Hv, dv]  dtype()
  Buffer rstd;  // [N, Hv]      state_dtype()
};
struct GatedNormGrads {
  Buffer d_o, dz;  // [N, Hv, dv]  dtype()
  Buffer dw;       // [dv]         state_dtype()
};

// Every op is a non-virtual public entry that checks its arguments once, for every backend
// (cp/backend.cpp: dtypes against dtype() and state_dtype(), shapes against each other, index lists,
// sequence offsets), then runs the backend's protected do_<op>: a bad call gets the same message from
// every backend, and a do_<op> may assume what the checks established.
class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;  // "cpu/bf16"
  virtual DType dtype() const = 0;
  virtual DType state_dtype() const = 0;
  virtual comm::Memory memory() const = 0;
  // How the in-process world moves this rank's collective data in order with the backend's work
  // (comm/inprocess.hpp); nullptr: host memory, copied once the op that produced it has returned.
  virtual std::shared_ptr<comm::DataMover> data_mover() { return nullptr; }
  // Counts each time the backend blocks the host on its device work (a download, a pageable upload)
  // as a host sync of `accounting` (the rank's). A host backend never does.
  virtual void count_host_syncs(std::shared_ptr<comm::Accounting> /*accounting*/) {}

  // ---- buffers and data movement --------------------------------------------------------------
  Buffer alloc(DType dtype, Shape shape) { return do_alloc(dtype, std::move(shape)); }  // zero-filled
  Buffer upload(const Tensor& t, DType as) { return do_upload(t, as); }                 // converted to `as`, RNE
  Tensor download(const Buffer& b) { return do_download(b); }
  // out[i, :] = x[index[i], :]; index I64 [M] where the backend computes.
  Buffer gather_rows(const Buffer& x /*[N, D]*/, const Buffer& index /*[M]*/);
  // out[index[i], :] = x[i, :] for i < M.
  void scatter_rows(const Buffer& x /*[M, D]*/, const Buffer& index /*[M]*/, Buffer& out /*[N, D]*/);
  // out[:, j] = x[:, index[j]]; index I64 [E].
  Buffer gather_columns(const Buffer& x /*[N, D]*/, const Buffer& index /*[E]*/);
  // out[:, index[j]] = x[:, j].
  void scatter_columns(const Buffer& x /*[N, E]*/, const Buffer& index /*[E]*/, Buffer& out /*[N, D]*/);
  // y += x, elementwise, accumulated in y's dtype.
  void accumulate(Buffer& y, const Buffer& x);

  // ---- leaf math --------------------------------------------------------------------------------
  RmsNormOut rmsnorm(const Buffer& x /*[N, D]*/, const Buffer& w /*[D]*/, double eps);
  RmsNormGrads rmsnorm_backward(const Buffer& dy /*[N, D]*/, const Buffer& x, const Buffer& w,
                                const Buffer& rstd /*[N]*/);
  Buffer linear(const Buffer& x /*[N, in]*/, const Buffer& w /*[out, in]*/);  // x w^T
  LinearGrads linear_backward(const Buffer& dy /*[N, out]*/, const Buffer& x, const Buffer& w);
  Buffer conv1d(const ConvArgs& args);  // [N, D]
  ConvGrads conv1d_backward(const ConvArgs& args, const Buffer& dy /*[N, D]*/);
  Gates gates(const Buffer& a /*[N, Hv]*/, const Buffer& b /*[N, Hv]*/, const Buffer& A_log /*[Hv]*/,
              const Buffer& dt_bias /*[Hv]*/);
  GateGrads gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b, const Buffer& A_log,
                           const Buffer& dt_bias);
  GdrOut gdr(const GdrArgs& args);
  // d_o [N, Hv, dv]; dht [Hv, dk, dv] gradient of the LAST sequence's final state, or empty for zero.
  GdrGrads gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht);
  // Chunkwise CP's span maps (core/span_map.hpp, docs/DESIGN.md §3): [Hv, dk, dv+dk] state_dtype(), per value
  // head [h | M]. gdr_last_span_map: the LAST local sequence's forward map, S_out = M S_in + h_ext (args.h0
  // ignored). gdr_first_backward_span_map: the FIRST local sequence's backward map for d_o,
  // dS_in = M^T dS_out + dh_ext.
  Buffer gdr_last_span_map(const GdrArgs& args);
  Buffer gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o /*[N, Hv, dv]*/);
  // maps [cp, Hv, dk, dv+dk] (every rank's, all-gathered): Forward S = M_j S + h_j over ranks j = begin .. end-1
  // from zero, Backward dS = M_j^T dS + h_j over j = end-1 .. begin. [Hv, dk, dv] state_dtype().
  Buffer fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction);
  GatedNormOut gated_norm(const Buffer& o /*[N, Hv, dv]*/, const Buffer& z /*[N, Hv, dv]*/, const Buffer& w /*[dv]*/,
                          double eps);
  GatedNormGrads gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                     const Buffer& rstd, double eps);

 protected:
  // Each op on arguments that passed its checks. A backend checks only what its own way of computing
  // needs beyond them (an index's values, where the backend's sequence offsets live).
  virtual Buffer do_alloc(DType dtype, Shape shape) = 0;
  virtual Buffer do_upload(const Tensor& t, DType as) = 0;
  virtual Tensor do_download(const Buffer& b) = 0;
  virtual Buffer do_gather_rows(const Buffer& x, const Buffer& index) = 0;
  virtual void do_scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) = 0;
  virtual Buffer do_gather_columns(const Buffer& x, const Buffer& index) = 0;
  virtual void do_scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) = 0;
  virtual void do_accumulate(Buffer& y, const Buffer& x) = 0;
  virtual RmsNormOut do_rmsnorm(const Buffer& x, const Buffer& w, double eps) = 0;
  virtual RmsNormGrads do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w, const Buffer& rstd) = 0;
  virtual Buffer do_linear(const Buffer& x, const Buffer& w) = 0;
  virtual LinearGrads do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) = 0;
  virtual Buffer do_conv1d(const ConvArgs& args) = 0;
  virtual ConvGrads do_conv1d_backward(const ConvArgs& args, const Buffer& dy) = 0;
  virtual Gates do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) = 0;
  virtual GateGrads do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                      const Buffer& A_log, const Buffer& dt_bias) = 0;
  virtual GdrOut do_gdr(const GdrArgs& args) = 0;
  virtual GdrGrads do_gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) = 0;
  virtual Buffer do_gdr_last_span_map(const GdrArgs& args) = 0;
  virtual Buffer do_gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) = 0;
  virtual Buffer do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) = 0;
  virtual GatedNormOut do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) = 0;
  virtual GatedNormGrads do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                                const Buffer& rstd, double eps) = 0;

 private:
  friend class BackendDecorator;  // runs the wrapped backend's do_<op>
};

// A Backend that runs each op on a wrapped one (cost/counting_backend.hpp observes them): a subclass
// overrides the do_<op> it observes and calls BackendDecorator::do_<op> for the result. The arguments
// are checked once, by this backend's public op: it reports the wrapped backend's dtype() and
// state_dtype(), so the checks and their messages are the wrapped backend's own.
class BackendDecorator : public Backend {
 public:
  explicit BackendDecorator(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  DType dtype() const override { return inner_->dtype(); }
  DType state_dtype() const override { return inner_->state_dtype(); }
  comm::Memory memory() const override { return inner_->memory(); }
  std::shared_ptr<comm::DataMover> data_mover() override { return inner_->data_mover(); }
  void count_host_syncs(std::shared_ptr<comm::Accounting> accounting) override {
    inner_->count_host_syncs(std::move(accounting));
  }

 protected:
  Buffer do_alloc(DType dtype, Shape shape) override;
  Buffer do_upload(const Tensor& t, DType as) override;
  Tensor do_download(const Buffer& b) override;
  Buffer do_gather_rows(const Buffer& x, const Buffer& index) override;
  void do_scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) override;
  Buffer do_gather_columns(const Buffer& x, const Buffer& index) override;
  void do_scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) override;
  void do_accumulate(Buffer& y, const Buffer& x) override;
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
  std::unique_ptr<Backend> inner_;
};

// An I64 index list where the backend computes (gather/scatter indices, cu_seqlens).
inline Buffer upload_index(Backend& backend, const std::vector<std::int64_t>& index) {
  return backend.upload(Tensor::from(index, {static_cast<std::int64_t>(index.size())}), DType::I64);
}

// Makes a backend of a storage dtype: how a harness gives each rank of its world its own backend.
using BackendFactory = std::function<std::unique_ptr<Backend>(DType)>;

}  // namespace gdnv::cp
