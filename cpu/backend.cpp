// The CPU Backend: storage conversion (bf16 rounding at every op's outputs) and data movement here;
// the math in cpu/kernels_*.cpp, in the compute type; the argument checks in cp/backend.cpp.
#include "cpu/backend.hpp"

#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/kernels.hpp"
#include "faults/seams.hpp"

namespace gdnv::cpu {
namespace {

using namespace cp;  // the Backend interface this file implements

// Storage type S -> compute type C: fp64 computes in double, fp32 and bf16 in float.
template <class S>
using Compute = std::conditional_t<std::is_same_v<S, double>, double, float>;

// Row r of a buffer seen as [rows, row_bytes].
std::byte* row_ptr(Buffer& b, std::int64_t r, std::size_t row_bytes) { return b.as<std::byte>() + r * row_bytes; }
const std::byte* row_ptr(const Buffer& b, std::int64_t r, std::size_t row_bytes) {
  return b.as<std::byte>() + r * row_bytes;
}

// The I64 [M] index buffer as a list, each entry checked against [0, limit).
std::vector<std::int64_t> indices(const Buffer& index, std::int64_t limit, const char* op) {
  std::vector<std::int64_t> idx(index.as<std::int64_t>(), index.as<std::int64_t>() + index.numel());
  for (std::size_t i = 0; i < idx.size(); ++i)
    if (idx[i] < 0 || idx[i] >= limit)
      throw Error(std::string(op) + ": index[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                  " is outside [0, " + std::to_string(limit) + ")");
  return idx;
}

// Rows of a buffer: its first dimension; a row is everything after it.
std::int64_t row_count(const Buffer& b) { return b.rank() == 0 ? 1 : b.dim(0); }
std::size_t row_bytes(const Buffer& b) { return row_count(b) == 0 ? 0 : b.nbytes() / row_count(b); }

template <class S>
class CpuBackend final : public Backend {
  using C = Compute<S>;

 public:
  std::string name() const override { return "cpu/" + std::string(dtype_option_name(dtype())); }
  DType dtype() const override { return dtype_of<S>(); }
  DType state_dtype() const override { return state_dtype_for(dtype()); }
  comm::Memory memory() const override { return comm::Memory::Host; }

 protected:
  Buffer do_alloc(DType dtype, Shape shape) override { return cpu::host_buffer(dtype, std::move(shape)); }

  Buffer do_upload(const Tensor& t, DType as) override {
    const Tensor converted = t.to(as);
    Buffer b = cpu::host_buffer(as, converted.shape());
    if (converted.nbytes()) std::memcpy(b.data(), converted.bytes(), converted.nbytes());  // empty: bytes() is null
    return b;
  }

  Tensor do_download(const Buffer& b) override {
    const auto* p = b.as<std::uint8_t>();
    return Tensor(b.dtype(), b.shape(), std::vector<std::uint8_t>(p, p + b.nbytes()));
  }

  Buffer do_gather_rows(const Buffer& x, const Buffer& index) override {
    const std::vector<std::int64_t> idx = indices(index, row_count(x), "gather_rows");
    Shape shape = x.shape();
    shape.at(0) = static_cast<std::int64_t>(idx.size());
    Buffer out = cpu::host_buffer(x.dtype(), shape);
    const std::size_t n = row_bytes(x);
    for (std::size_t i = 0; i < idx.size(); ++i) std::memcpy(row_ptr(out, i, n), row_ptr(x, idx[i], n), n);
    return out;
  }

  void do_scatter_rows(const Buffer& x, const Buffer& index, Buffer& out) override {
    const std::vector<std::int64_t> idx = indices(index, row_count(out), "scatter_rows");
    const std::size_t n = row_bytes(out);
    for (std::size_t i = 0; i < idx.size(); ++i) std::memcpy(row_ptr(out, idx[i], n), row_ptr(x, i, n), n);
  }

  Buffer do_gather_columns(const Buffer& x, const Buffer& index) override {
    const std::vector<std::int64_t> idx = indices(index, x.dim(1), "gather_columns");
    Buffer out = cpu::host_buffer(x.dtype(), {x.dim(0), static_cast<std::int64_t>(idx.size())});
    copy_columns(x, out, idx, true);
    return out;
  }

  void do_scatter_columns(const Buffer& x, const Buffer& index, Buffer& out) override {
    const std::vector<std::int64_t> idx = indices(index, out.dim(1), "scatter_columns");
    copy_columns(x, out, idx, false);
  }

  void do_accumulate(Buffer& y, const Buffer& x) override {
    if (y.dtype() == DType::F64) return add_into<double>(y, x);
    add_into<float>(y, x);
  }

  RmsNormOut do_rmsnorm(const Buffer& x, const Buffer& w, double eps) override {
    auto r = cpu::Norm<C>::rmsnorm(act(x), act(w), eps);
    return {act_out(r.y, x.shape()), state_out(r.rstd, {x.dim(0)})};
  }

  RmsNormGrads do_rmsnorm_backward(const Buffer& dy, const Buffer& x, const Buffer& w, const Buffer& rstd) override {
    auto g = cpu::Norm<C>::rmsnorm_backward(act(dy), act(x), act(w), state(rstd));
    return {act_out(g.dx, x.shape()), state_out(g.dw, w.shape())};
  }

  Buffer do_linear(const Buffer& x, const Buffer& w) override {
    const std::int64_t N = x.dim(0), in = x.dim(1), out = w.dim(0);
    return act_out(cpu::Linear<C>::forward(act(x), act(w), in, out), {N, out});
  }

  LinearGrads do_linear_backward(const Buffer& dy, const Buffer& x, const Buffer& w) override {
    const std::int64_t in = x.dim(1), out = w.dim(0);
    auto g = cpu::Linear<C>::backward(act(dy), act(x), act(w), in, out);
    return {act_out(g.dx, x.shape()), state_out(g.dw, w.shape())};
  }

  Buffer do_conv1d(const ConvArgs& args) override {
    return act_out(cpu::Conv<C>::forward(conv_input(args)), args.x.shape());
  }

  ConvGrads do_conv1d_backward(const ConvArgs& args, const Buffer& dy) override {
    const auto in = conv_input(args);
    auto g = cpu::Conv<C>::backward(in, act(dy));
    ConvGrads out{act_out(g.dx, args.x.shape()), state_out(g.dw, args.weight.shape()), {}, {}};
    if (args.bias) out.dbias = state_out(g.dbias, args.bias->shape());
    if (!args.halo.empty()) out.dhalo = act_out(g.dhalo, args.halo.shape());
    return out;
  }

  Gates do_gates(const Buffer& a, const Buffer& b, const Buffer& A_log, const Buffer& dt_bias) override {
    auto r = cpu::GateMath<C>::forward(act(a), act(b), act(A_log), gate_bias(dt_bias), dtype() == DType::BF16);
    return {state_out(r.g, a.shape()), state_out(r.beta, a.shape())};
  }

  GateGrads do_gates_backward(const Buffer& dg, const Buffer& dbeta, const Buffer& a, const Buffer& b,
                              const Buffer& A_log, const Buffer& dt_bias) override {
    auto g = cpu::GateMath<C>::backward(state(dg), state(dbeta), act(a), act(b), act(A_log), gate_bias(dt_bias));
    return {act_out(g.da, a.shape()), act_out(g.db, a.shape()), state_out(g.dA_log, A_log.shape()),
            state_out(g.ddt_bias, dt_bias.shape())};
  }

  GdrOut do_gdr(const GdrArgs& args) override {
    const auto in = gdr_input(args);
    auto r = cpu::Gdr<C>::forward(in);
    return {act_out(r.o, args.v.shape()), state_out(r.final_state, {in.Hv, in.K, in.V})};
  }

  GdrGrads do_gdr_backward(const GdrArgs& args, const Buffer& d_o, const Buffer& dht) override {
    const auto in = gdr_input(args);
    auto g = cpu::Gdr<C>::backward(in, act(d_o), dht.empty() ? Array<C>{} : state(dht));
    return {act_out(g.dq, args.q.shape()),         act_out(g.dk, args.k.shape()),
            act_out(g.dv, args.v.shape()),         state_out(g.dg, args.g.shape()),
            state_out(g.dbeta, args.beta.shape()), state_out(g.dh0, {in.Hv, in.K, in.V})};
  }

  Buffer do_gdr_last_span_map(const GdrArgs& args) override {
    const auto in = gdr_input(args);
    return state_out(cpu::Gdr<C>::last_span_map(in), {in.Hv, in.K, in.V + in.K});
  }

  Buffer do_gdr_first_backward_span_map(const GdrArgs& args, const Buffer& d_o) override {
    const auto in = gdr_input(args);
    return state_out(cpu::Gdr<C>::first_backward_span_map(in, act(d_o)), {in.Hv, in.K, in.V + in.K});
  }

  Buffer do_fold_span_maps(const Buffer& maps, int begin, int end, FoldDirection direction) override {
    const std::int64_t Hv = maps.dim(1), K = maps.dim(2), V = maps.dim(3) - K;
    return state_out(cpu::Gdr<C>::fold_span_maps(state(maps), Hv, K, V, begin, end, direction), {Hv, K, V});
  }

  GatedNormOut do_gated_norm(const Buffer& o, const Buffer& z, const Buffer& w, double eps) override {
    auto r = cpu::Norm<C>::gated(act(o), act(z), act(w), eps);
    return {act_out(r.y, o.shape()), state_out(r.rstd, {o.dim(0), o.dim(1)})};
  }

  GatedNormGrads do_gated_norm_backward(const Buffer& dy, const Buffer& o, const Buffer& z, const Buffer& w,
                                        const Buffer& rstd, double /*eps: rstd carries it*/) override {
    auto g = cpu::Norm<C>::gated_backward(act(dy), act(o), act(z), act(w), state(rstd));
    return {act_out(g.dx, o.shape()), act_out(g.dz, z.shape()), state_out(g.dw, w.shape())};
  }

 private:
  // Activations and parameters (dtype()) and states (state_dtype()) in, converted to C; outputs back.
  Array<C> act(const Buffer& b) const { return cpu::to_compute<C>(b); }
  Array<C> state(const Buffer& b) const { return cpu::to_compute<C>(b); }
  Buffer act_out(const Array<C>& v, Shape shape) const { return cpu::from_compute(v, dtype(), std::move(shape)); }
  // dt_bias as the gates use it (zeros under the planted fault that drops it).
  Array<C> gate_bias(const Buffer& dt_bias) const {
    if (faults::dt_bias_dropped()) return Array<C>(static_cast<std::size_t>(dt_bias.numel()), C(0));
    return act(dt_bias);
  }
  Buffer state_out(const Array<C>& v, Shape shape) const {
    return cpu::from_compute(v, state_dtype(), std::move(shape));
  }

  static void copy_columns(const Buffer& from, Buffer& to, const std::vector<std::int64_t>& idx, bool gather) {
    const std::size_t e = dtype_size(from.dtype());
    const std::int64_t N = from.dim(0), from_w = from.dim(1), to_w = to.dim(1);
    for (std::int64_t r = 0; r < N; ++r)
      for (std::size_t j = 0; j < idx.size(); ++j) {
        const std::int64_t src = gather ? idx[j] : static_cast<std::int64_t>(j);
        const std::int64_t dst = gather ? static_cast<std::int64_t>(j) : idx[j];
        std::memcpy(to.as<std::byte>() + (r * to_w + dst) * e, from.as<std::byte>() + (r * from_w + src) * e, e);
      }
  }

  // y += x in T (double for F64 y, float otherwise), rounded once to y's dtype.
  template <class T>
  static void add_into(Buffer& y, const Buffer& x) {
    Array<T> sum = cpu::to_compute<T>(y);
    const Array<T> xs = cpu::to_compute<T>(x);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += xs[i];
    y = cpu::from_compute(sum, y.dtype(), y.shape());
  }

  typename cpu::Conv<C>::Input conv_input(const ConvArgs& a) const {
    const std::int64_t D = a.x.dim(1), W = a.weight.dim(1);
    return {act(a.x),
            act(a.weight),
            a.bias ? act(*a.bias) : Array<C>{},
            a.halo.empty() ? Array<C>{} : act(a.halo),
            a.seqs.host,
            D,
            W};
  }

  typename cpu::Gdr<C>::Input gdr_input(const GdrArgs& a) const {
    const std::int64_t Hk = a.q.dim(1), K = a.q.dim(2), Hv = a.v.dim(1), V = a.v.dim(2);
    const double l2_eps = faults::l2norm_eps(1e-6);
    return {act(a.q),
            act(a.k),
            act(a.v),
            state(a.g),
            state(a.beta),
            a.h0.empty() ? Array<C>{} : state(a.h0),
            a.seqs.host,
            Hk,
            Hv,
            K,
            V,
            a.scale,
            l2_eps};
  }
};

}  // namespace

std::unique_ptr<Backend> make_backend(DType storage) {
  switch (storage) {
    case DType::F64:
      return std::make_unique<CpuBackend<double>>();
    case DType::F32:
      return std::make_unique<CpuBackend<float>>();
    case DType::BF16:
      return std::make_unique<CpuBackend<bf16_t>>();
    default:
      throw ConfigError("the CPU backend stores F64, F32 or BF16, not " + std::string(dtype_name(storage)) +
                        "; choose --dtype fp64, fp32 or bf16");
  }
}

}  // namespace gdnv::cpu
