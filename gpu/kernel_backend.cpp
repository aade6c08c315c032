// The Backend over gpu/kernels.hpp, on arguments checked by cp/backend.cpp: outputs allocated where
// the kernels run, each op a fixed sequence of launches on the kernels' stream. Only
// download() waits for the stream; it and upload() (a pageable copy may wait too) each count one host
// sync. A bad index found by a kernel is reported at the next download.
#include "gpu/kernel_backend.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "faults/seams.hpp"
#include "gpu/math_gdr.hpp"
#include "gpu/stream_mover.hpp"

namespace gdnv::gpu {
namespace {

using cp::Buffer;

std::int64_t row_count(const Buffer& b) { return b.rank() == 0 ? 1 : b.dim(0); }

Storage storage_of(DType d, const char* op) {
  switch (d) {
    case DType::F32:
      return Storage::F32;
    case DType::BF16:
      return Storage::BF16;
    case DType::F64:
      return Storage::F64;
    default:
      throw Error(std::string(op) + ": no arithmetic on " + std::string(dtype_name(d)));
  }
}

template <class T>
const T* ptr(const Buffer& b) {
  return b.empty() ? nullptr : b.as<T>();
}

class KernelBackend final : public cp::Backend {
 public:
  KernelBackend(DType storage, std::unique_ptr<Kernels> kernels)
      : dtype_(storage), k_(std::move(kernels)), s_(*k_->stream()), error_(alloc(DType::I32, {1})) {}

  std::string name() const override { return k_->platform() + "/" + std::string(dtype_option_name(dtype_)); }
  DType dtype() const override { return dtype_; }
  DType state_dtype() const override { return DType::F32; }
  comm::Memory memory() const override { return s_.memory(); }
  std::shared_ptr<comm::DataMover> data_mover() override { return make_stream_mover(k_->stream()); }
  void count_host_syncs(std::shared_ptr<comm::Accounting> accounting) override { syncs_ = std::move(accounting); }

 protected:
  Buffer do_alloc(DType dtype, Shape shape) override {
    const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
    return Buffer(dtype, std::move(shape), s_.alloc(bytes));
  }

  // A pageable host-to-device copy may wait for the stream: counted as a host sync.
  Buffer do_upload(const Tensor& t, DType as) override {
    const Tensor converted = t.to(as);
    Buffer b = alloc(as, converted.shape());
    s_.upload(b.data(), converted.bytes(), converted.nbytes());
    host_sync();
    return b;
  }

  // One host sync: the bytes and, after indexed launches, the error flag.
  Tensor do_download(const Buffer& b) override {
    int code = 0;
    const std::vector<Indexed> launched = std::exchange(indexed_, {});
    if (!launched.empty()) s_.fetch(&code, error_.data(), sizeof code);
    std::vector<std::uint8_t> bytes(b.nbytes());
    s_.fetch(bytes.data(), b.data(), bytes.size());
    s_.synchronize("download");
    host_sync();
    if (code != 0) {
      s_.zero(error_.data(), sizeof code);
      const Indexed& bad = launched.at(static_cast<std::size_t>(code - 1));
      throw Error(std::string(bad.op) + ": an index is outside [0, " + std::to_string(bad.limit) + ")");
    }
    return Tensor(b.dtype(), b.shape(), std::move(bytes));
  }

  Buffer do_gather_rows(const Buffer& x, const Buffer& index) override {
    Shape shape = x.shape();
    shape.at(0) = index.numel();
    Buffer out = alloc(x.dtype(), shape);
    copy_rows(x, index, out, true, row_count(x), "gather_rows");
    return out;
  }

  void do_scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) override {
    copy_rows(x, index, out, false, row_count(out), "scatter_rows");
  }

  Buffer do_gather_columns(const Buffer& x, const Buffer& index) override {
    Buffer out = alloc(x.dtype(), {x.dim(0), index.numel()});
    copy_columns(x, index, out, true, "gather_columns");
    return out;
  }

  void do_scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) override {
    copy_columns(x, index, out, false, "scatter_columns");
  }

  void do_accumulate(Buffer& y, const Buffer& x) override {
    k_->accumulate(
        {y.data(), x.data(), storage_of(y.dtype(), "accumulate"), storage_of(x.dtype(), "accumulate"), y.numel()},
        y.numel());
  }

  cp::RmsNormOut do_rmsnorm(const Buffer& x, const Buffer& w, double eps) override {
    const std::int64_t N = x.dim(0), D = x.dim(1);
    cp::RmsNormOut out{alloc(dtype_, x.shape()), alloc(DType::F32, {N})};
    NormParams p = norm_params(x, nullptr, w, N, D, eps);
    p.y = out.y.data(), p.rstd = out.rstd.as<float>();
    k_->norm_forward(p, N);
    return out;
  }

  cp::RmsNormGrads do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w,
                                       const Buffer& rstd) override {
    const std::int64_t N = x.dim(0), D = x.dim(1);
    cp::RmsNormGrads g{alloc(dtype_, x.shape()), alloc(DType::F32, {D})};
    NormParams p = norm_params(x, nullptr, w, N, D, 0);
    p.dy = dy.data(), p.rstd_in = rstd.as<float>(), p.y = g.dx.data(), p.dw = g.dw.as<float>();
    k_->norm_backward(p, N);
    k_->norm_weight_grad(p, D);
    return g;
  }

  Buffer do_linear(const Buffer& x, const Buffer& w) override {
    const std::int64_t N = x.dim(0), in = x.dim(1), out = w.dim(0);
    Buffer y = alloc(dtype_, {N, out});
    k_->linear_forward({x.data(), w.data(), nullptr, y.data(), nullptr, N, in, out, bf16()});
    return y;
  }

  cp::LinearGrads do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) override {
    const std::int64_t N = x.dim(0), in = x.dim(1), out = w.dim(0);
    cp::LinearGrads g{alloc(dtype_, x.shape()), alloc(DType::F32, w.shape())};
    k_->linear_backward({x.data(), w.data(), dy.data(), g.dx.data(), g.dw.as<float>(), N, in, out, bf16()});
    return g;
  }

  Buffer do_conv1d(const cp::ConvArgs& args) override {
    ConvParams p = conv_params(args, "conv1d");
    Buffer y = alloc(dtype_, args.x.shape());
    p.y = y.data();
    k_->conv_forward(p, p.N * p.D);
    return y;
  }

  cp::ConvGrads do_conv1d_backward(const cp::ConvArgs& args, const Buffer& dy) override {
    ConvParams p = conv_params(args, "conv1d_backward");
    cp::ConvGrads g{alloc(dtype_, args.x.shape()), alloc(DType::F32, args.weight.shape()), {}, {}};
    if (args.bias) g.dbias = alloc(DType::F32, args.bias->shape());
    if (!args.halo.empty()) g.dhalo = alloc(dtype_, args.halo.shape());
    const Buffer d_pre = alloc(DType::F32, args.x.shape());
    p.dy = dy.data(), p.d_pre = const_cast<float*>(d_pre.as<float>()), p.y = g.dx.data(), p.dw = g.dw.as<float>();
    p.dbias = g.dbias.empty() ? nullptr : g.dbias.as<float>();
    p.dhalo = g.dhalo.empty() ? nullptr : g.dhalo.data();
    k_->conv_dpre(p, p.N * p.D);
    k_->conv_dx(p, p.N * p.D);
    if (p.dhalo) k_->conv_dhalo(p, (p.W - 1) * p.D);
    k_->conv_weight_grad(p, p.D * p.W);
    return g;
  }

  cp::Gates do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) override {
    GateParams p = gate_params(a, b, A_log, dt_bias);
    cp::Gates out{alloc(DType::F32, a.shape()), alloc(DType::F32, a.shape())};
    p.g = out.g.as<float>(), p.beta = out.beta.as<float>();
    k_->gates_forward(p, p.N * p.Hv);
    return out;
  }

  cp::GateGrads do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                                  const Buffer& A_log, const Buffer& dt_bias) override {
    GateParams p = gate_params(a, b, A_log, dt_bias);
    cp::GateGrads g{alloc(dtype_, a.shape()), alloc(dtype_, a.shape()), alloc(DType::F32, A_log.shape()),
                    alloc(DType::F32, dt_bias.shape())};
    p.dg = dg.as<float>(), p.dbeta = dbeta.as<float>(), p.da = g.da.data(), p.db = g.db.data();
    p.dA_log = g.dA_log.as<float>(), p.ddt_bias = g.ddt_bias.as<float>();
    k_->gates_backward(p, p.N * p.Hv);
    k_->gates_param_grad(p, p.Hv);
    return g;
  }

  cp::GdrOut do_gdr(const cp::GdrArgs& args) override {
    Gdr x = gdr_setup(args, "gdr", true);
    cp::GdrOut out{alloc(dtype_, args.v.shape()), alloc(DType::F32, {x.p.Hv, x.p.K, x.p.V})};
    x.p.o = out.o.data(), x.p.final_state = out.final_state.as<float>();
    k_->l2norm(x.p, x.p.N * x.p.Hk);
    k_->gdr_forward(x.p, x.p.n * x.p.Hk);
    return out;
  }

  cp::GdrGrads do_gdr_backward(const cp::GdrArgs& args, const Buffer& d_o, const Buffer& dht) override {
    Gdr x = gdr_setup(args, "gdr_backward", true);
    GdrParams& p = x.p;
    cp::GdrGrads g{alloc(dtype_, args.q.shape()),        alloc(dtype_, args.k.shape()),
                   alloc(dtype_, args.v.shape()),        alloc(DType::F32, args.g.shape()),
                   alloc(DType::F32, args.beta.shape()), alloc(DType::F32, {p.Hv, p.K, p.V})};
    const Buffer dqn = alloc(DType::F32, args.q.shape()), dkn = alloc(DType::F32, args.k.shape());
    p.chunk_slots = chunk_slots_for(p.N, p.n);
    const Buffer states = alloc(DType::F32, {p.Hv, p.chunk_slots, p.K, p.V});
    p.d_o = d_o.data(), p.dht = ptr<float>(dht);
    p.dqn = mut(dqn), p.dkn = mut(dkn), p.states = mut(states);
    p.dq = g.dq.data(), p.dk = g.dk.data(), p.dv = g.dv.data(), p.dg = g.dg.as<float>();
    p.dbeta = g.dbeta.as<float>(), p.dh0 = g.dh0.as<float>();
    k_->l2norm(p, p.N * p.Hk);
    k_->gdr_backward(p, p.n * p.Hk);
    k_->l2norm_backward(p, p.N * p.Hk);
    return g;
  }

  Buffer do_gdr_last_span_map(const cp::GdrArgs& args) override {
    Gdr x = gdr_setup(args, "gdr_last_span_map", false);
    x.p.h0 = nullptr;  // the map is taken from a zero state
    Buffer maps = alloc(DType::F32, {x.p.Hv, x.p.K, x.p.V + x.p.K});
    x.p.maps = maps.as<float>();
    k_->l2norm(x.p, x.p.N * x.p.Hk);
    k_->gdr_last_span_map(x.p, x.p.Hv);
    return maps;
  }

  Buffer do_gdr_first_backward_span_map(const cp::GdrArgs& args, const Buffer& d_o) override {
    Gdr x = gdr_setup(args, "gdr_first_backward_span_map", false);
    Buffer maps = alloc(DType::F32, {x.p.Hv, x.p.K, x.p.V + x.p.K});
    x.p.d_o = d_o.data(), x.p.maps = maps.as<float>();
    k_->l2norm(x.p, x.p.N * x.p.Hk);
    k_->gdr_first_backward_span_map(x.p, x.p.Hv);
    return maps;
  }

  Buffer do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) override {
    const std::int64_t Hv = maps.dim(1), K = maps.dim(2), V = maps.dim(3) - K;
    Buffer out = alloc(DType::F32, {Hv, K, V});
    const Buffer work = alloc(DType::F32, {Hv, K, V});
    k_->fold_span_maps({maps.as<float>(), out.as<float>(), mut(work), Hv, K, V, begin, end, direction}, Hv);
    return out;
  }

  cp::GatedNormOut do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) override {
    const std::int64_t N = o.dim(0), Hv = o.dim(1);
    cp::GatedNormOut out{alloc(dtype_, o.shape()), alloc(DType::F32, {N, Hv})};
    NormParams p = norm_params(o, &z, w, N * Hv, o.dim(2), eps);
    p.y = out.y.data(), p.rstd = out.rstd.as<float>();
    k_->norm_forward(p, N * Hv);
    return out;
  }

  cp::GatedNormGrads do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                            const Buffer& rstd, double /*eps: rstd carries it*/) override {
    const std::int64_t N = o.dim(0), Hv = o.dim(1);
    cp::GatedNormGrads g{alloc(dtype_, o.shape()), alloc(dtype_, z.shape()), alloc(DType::F32, w.shape())};
    NormParams p = norm_params(o, &z, w, N * Hv, o.dim(2), 0);
    p.dy = dy.data(), p.rstd_in = rstd.as<float>(), p.y = g.d_o.data(), p.dz = g.dz.data(), p.dw = g.dw.as<float>();
    k_->norm_backward(p, N * Hv);
    k_->norm_weight_grad(p, o.dim(2));
    return g;
  }

 private:
  bool bf16() const { return dtype_ == DType::BF16; }
  // Scratch the kernels write through a const handle's storage (the Buffer only owns it).
  static float* mut(const Buffer& b) { return const_cast<float*>(b.as<float>()); }

  // Index-driven copies; an index outside [0, limit) makes the kernel raise the error flag.
  void copy_rows(const Buffer& x, const Buffer& index, Buffer& out, bool gather, std::int64_t limit, const char* op) {
    const std::int64_t rows = index.numel(), units = rows == 0 ? 0 : (gather ? out : x).nbytes() / rows / 2;
    k_->copy_rows({static_cast<const std::uint16_t*>(x.data()), static_cast<std::uint16_t*>(out.data()),
                   index.as<std::int64_t>(), rows, units, limit, gather, error_flag(op, limit)},
                  rows * units);
  }

  void copy_columns(const Buffer& x, const Buffer& index, Buffer& out, bool gather, const char* op) {
    const std::int64_t units = static_cast<std::int64_t>(dtype_size(x.dtype())) / 2;
    k_->copy_columns({static_cast<const std::uint16_t*>(x.data()), static_cast<std::uint16_t*>(out.data()),
                      index.as<std::int64_t>(), out.dim(0), index.numel(), x.dim(1), out.dim(1), units, gather,
                      error_flag(op, gather ? x.dim(1) : out.dim(1))},
                     out.dim(0) * index.numel() * units);
  }

  // The flag for one indexed launch; its code finds (op, limit) again when the flag is read.
  ErrorFlag error_flag(const char* op, std::int64_t limit) {
    indexed_.push_back({op, limit});
    return {error_.as<int>(), static_cast<int>(indexed_.size())};
  }

  void host_sync() {
    if (syncs_) syncs_->host_sync();
  }

  NormParams norm_params(const Buffer& x, const Buffer* z, const Buffer& w, std::int64_t rows, std::int64_t n,
                         double eps) const {
    NormParams p{};
    p.x = x.data(), p.z = z ? z->data() : nullptr, p.w = w.data();
    p.rows = rows, p.n = n, p.eps = static_cast<float>(eps), p.bf16 = bf16();
    p.fast_rsqrt = faults::fast_norm_rsqrt();
    return p;
  }

  // The offsets where the kernels run: I64 [n+1] matching the host list (checked by cp/backend.cpp).
  static const std::int64_t* device_offsets(const cp::Varlen& seqs, const char* op) {
    if (seqs.device.dtype() != DType::I64 || seqs.device.numel() != static_cast<std::int64_t>(seqs.host.size()))
      throw Error(std::string(op) + ": Varlen::device is " + std::string(dtype_name(seqs.device.dtype())) + " " +
                  shape_str(seqs.device.shape()) + "; expected I64 [" + std::to_string(seqs.host.size()) +
                  "] uploaded to this backend");
    return seqs.device.as<std::int64_t>();
  }

  ConvParams conv_params(const cp::ConvArgs& a, const char* op) const {
    const std::int64_t N = a.x.dim(0), D = a.x.dim(1), W = a.weight.dim(1);
    ConvParams p{};
    p.x = a.x.data(), p.weight = a.weight.data(), p.bias = a.bias ? a.bias->data() : nullptr;
    p.halo = a.halo.empty() ? nullptr : a.halo.data();
    p.cu = device_offsets(a.seqs, op), p.n = a.seqs.count(), p.N = N, p.D = D, p.W = W, p.bf16 = bf16();
    p.bleed = faults::conv_bleeds_across_sequences();
    p.halo_grad_past_first = faults::conv_halo_grad_past_first_sequence();
    return p;
  }

  GateParams gate_params(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) const {
    GateParams p{};
    p.a = a.data(), p.b = b.data(), p.A_log = A_log.data();
    // The planted fault drops dt_bias as the CPU backend's does.
    p.dt_bias = faults::dt_bias_dropped() ? nullptr : dt_bias.data();
    p.N = a.dim(0), p.Hv = a.dim(1), p.bf16 = bf16();
    p.naive_softplus = faults::naive_softplus();
    p.bf16_gates = faults::gates_rounded_to_bf16(bf16());
    return p;
  }

  // GdrParams over args with the L2-norm scratch and the tasks' work allocated (kept alive here): one
  // task per (sequence, key head), or per value head for the span maps.
  struct Gdr {
    GdrParams p;
    Buffer qn, kn, rq, rk, work;
  };
  Gdr gdr_setup(const cp::GdrArgs& a, const char* op, bool per_sequence) {
    const std::int64_t N = a.q.dim(0), Hk = a.q.dim(1), K = a.q.dim(2), Hv = a.v.dim(1), V = a.v.dim(2);
    Gdr x{{},
          alloc(DType::F32, {N, Hk, K}),
          alloc(DType::F32, {N, Hk, K}),
          alloc(DType::F32, {N, Hk}),
          alloc(DType::F32, {N, Hk}),
          {}};
    GdrParams& p = x.p;
    p.work_stride = gdr_work_floats(K, V);
    x.work = alloc(DType::F32, {per_sequence ? a.seqs.count() * Hk : Hv, p.work_stride});
    p.q = a.q.data(), p.k = a.k.data(), p.v = a.v.data(), p.g = a.g.as<float>(), p.beta = a.beta.as<float>();
    p.h0 = ptr<float>(a.h0);
    p.cu = device_offsets(a.seqs, op), p.n = a.seqs.count();
    p.N = N, p.Hk = Hk, p.Hv = Hv, p.K = K, p.V = V;
    p.scale = static_cast<float>(a.scale);
    // The planted fault drops the epsilon as the CPU backend's does.
    p.l2_eps = faults::l2norm_eps(1e-6f);
    p.decay_cumsum = faults::decay_from_cumsum();
    p.bf16 = bf16();
    p.qn = x.qn.as<float>(), p.kn = x.kn.as<float>(), p.rq = x.rq.as<float>(), p.rk = x.rk.as<float>();
    p.work = x.work.as<float>();
    return x;
  }

  struct Indexed {
    const char* op;
    std::int64_t limit;
  };

  DType dtype_;
  std::unique_ptr<Kernels> k_;
  Stream& s_;
  Buffer error_;                             // I32 [1]: the index kernels' error flag
  std::vector<Indexed> indexed_;             // indexed launches since the flag was last read
  std::shared_ptr<comm::Accounting> syncs_;  // where host syncs are counted, if anywhere
};

}  // namespace

std::unique_ptr<cp::Backend> make_kernel_backend(DType storage, std::unique_ptr<Kernels> kernels) {
  if (storage != DType::F32 && storage != DType::BF16)
    throw ConfigError("the " + kernels->platform() + " backend stores F32 or BF16, not " +
                      std::string(dtype_name(storage)) + "; choose --dtype fp32 or bf16");
  return std::make_unique<KernelBackend>(storage, std::move(kernels));
}

std::unique_ptr<cp::Backend> make_emulated_backend(DType storage) {
  return make_kernel_backend(storage, make_host_kernels());
}

}  // namespace gdnv::gpu
