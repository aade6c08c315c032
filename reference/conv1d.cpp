// Causal depthwise conv1d (docs/DESIGN.md §1.2), token by token:
//   y[t] = act(bias + sum_{i<W} w[:, i] * x[t - (W-1) + i]),
// tokens before a sequence's start read initial_state slot (token - (-W)) or zero; nothing crosses
// from one packed sequence into the next. The final state's slot s is token len - W + s, read the same way.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "reference/conv1d.hpp"
#include "reference/sequences.hpp"

namespace gdnv::ref {
namespace {

struct ConvGeometry {
  std::int64_t B, T, D, W;
  std::vector<Sequence> seqs;
};

void check_tensor(const Tensor& t, const char* name, const Shape& want, const char* dims) {
  if (t.dtype() != DType::F64)
    throw ConfigError(std::string(name) + " is " + std::string(dtype_name(t.dtype())) +
                      "; the oracle takes F64 tensors (upcast with Tensor::to(DType::F64))");
  if (t.shape() != want)
    throw ConfigError(std::string(name) + " has shape " + shape_str(t.shape()) + ", expected " + dims + " = " +
                      shape_str(want));
  if (const std::int64_t i = first_non_finite(t); i < t.numel())
    throw ConfigError(std::string(name) + " holds " + (std::isnan(t.get(i)) ? "NaN" : "Inf") + " at flat index " +
                      std::to_string(i) + "; the oracle needs finite inputs");
}

ConvGeometry conv_geometry(const Conv1dInputs& in) {
  if (in.x.rank() != 3) throw ConfigError("x has shape " + shape_str(in.x.shape()) + ", expected rank 3 [B, T, D]");
  if (in.weight.rank() != 2 || in.weight.dim(1) < 1)
    throw ConfigError("weight has shape " + shape_str(in.weight.shape()) + ", expected [D, W] with W >= 1");
  ConvGeometry geo{in.x.dim(0), in.x.dim(1), in.x.dim(2), in.weight.dim(1), {}};
  geo.seqs = sequences_of(geo.B, geo.T, in.cu_seqlens);
  const auto N = static_cast<std::int64_t>(geo.seqs.size());
  check_tensor(in.x, "x", {geo.B, geo.T, geo.D}, "[B, T, D]");
  check_tensor(in.weight, "weight", {geo.D, geo.W}, "[D, W] (D of x)");
  if (in.bias) check_tensor(*in.bias, "bias", {geo.D}, "[D]");
  if (in.initial_state) check_tensor(*in.initial_state, "initial_state", {N, geo.D, geo.W}, "[N, D, W]");
  return geo;
}

double sigmoid(double p) { return 1.0 / (1.0 + std::exp(-p)); }

// Reads and accumulates the conv's window inputs: token tau of a sequence, tau in [-(W-1), len).
struct Window {
  const Conv1dInputs& in;
  const ConvGeometry& geo;
  const Sequence& s;

  // Flat offset of channel 0 of token tau, tau in [-W, len), in x (tau >= 0) or initial_state (tau < 0).
  std::int64_t offset(std::int64_t tau) const {
    return tau >= 0 ? (s.b * geo.T + s.begin + tau) * geo.D : s.n * geo.D * geo.W + (tau + geo.W);
  }

  // Pointer to channel 0 of token tau and the stride between channels; null for a zero token.
  std::pair<const double*, std::int64_t> token(std::int64_t tau) const {
    if (tau >= 0) return {in.x.data<double>() + offset(tau), 1};
    if (!in.initial_state) return {nullptr, 0};
    return {in.initial_state->data<double>() + offset(tau), geo.W};
  }

  // Where token tau's gradient accumulates (dx or dh0, same layout as token()); null for a zero token.
  double* grad(Conv1dGrads& grads, std::int64_t tau) const {
    if (tau >= 0) return grads.dx.data<double>() + offset(tau);
    return grads.dh0 ? grads.dh0->data<double>() + offset(tau) : nullptr;
  }

  // Pre-activation of token t, channels [d0, d1), into pre[d - d0].
  void pre_activation(std::int64_t t, std::int64_t d0, std::int64_t d1, std::vector<double>& pre) const {
    pre.assign(static_cast<std::size_t>(d1 - d0), 0.0);
    if (in.bias) std::copy(in.bias->data<double>() + d0, in.bias->data<double>() + d1, pre.begin());
    const double* w = in.weight.data<double>();
    for (std::int64_t i = 0; i < geo.W; ++i) {
      const auto [x, stride] = token(t - (geo.W - 1) + i);
      if (!x) continue;
      for (std::int64_t d = d0; d < d1; ++d) pre[d - d0] += w[d * geo.W + i] * x[d * stride];
    }
  }
};

// Calls f(d0, d1) for blocks of channels, in parallel. Channels never mix, and each one's sums run over
// the tokens in order within its block, so the blocking and the thread count change no bit.
template <class F>
void for_channel_blocks(const ConvGeometry& geo, F&& f) {
  constexpr std::int64_t kBlock = 256;
  parallel_for((geo.D + kBlock - 1) / kBlock, 0,
               [&](std::int64_t b) { f(b * kBlock, std::min(geo.D, (b + 1) * kBlock)); });
}

}  // namespace

Tensor conv1d_forward(const Conv1dInputs& in) {
  const ConvGeometry geo = conv_geometry(in);
  Tensor y(DType::F64, {geo.B, geo.T, geo.D});
  for_channel_blocks(geo, [&](std::int64_t d0, std::int64_t d1) {
    for (const Sequence& s : geo.seqs) {
      const Window win{in, geo, s};
      std::vector<double> pre;
      for (std::int64_t t = 0; t < s.len; ++t) {
        win.pre_activation(t, d0, d1, pre);
        double* out = y.data<double>() + (s.b * geo.T + s.begin + t) * geo.D;
        for (std::int64_t d = d0; d < d1; ++d) {
          const double p = pre[d - d0];
          out[d] = in.activation == Activation::Silu ? p * sigmoid(p) : p;
        }
      }
    }
  });
  return y;
}

Tensor conv1d_final_state(const Conv1dInputs& in) {
  const ConvGeometry geo = conv_geometry(in);
  Tensor state(DType::F64, {static_cast<std::int64_t>(geo.seqs.size()), geo.D, geo.W});
  for (const Sequence& s : geo.seqs) {
    const Window win{in, geo, s};
    for (std::int64_t slot = 0; slot < geo.W; ++slot) {
      const auto [x, stride] = win.token(s.len - geo.W + slot);
      if (!x) continue;
      for (std::int64_t d = 0; d < geo.D; ++d) state.data<double>()[(s.n * geo.D + d) * geo.W + slot] = x[d * stride];
    }
  }
  return state;
}

Conv1dGrads conv1d_backward(const Conv1dInputs& in, const Tensor& dy, const std::optional<Tensor>& dht) {
  const ConvGeometry geo = conv_geometry(in);
  check_tensor(dy, "dy", {geo.B, geo.T, geo.D}, "[B, T, D] (the shape of x)");
  if (dht)
    check_tensor(*dht, "dht", {static_cast<std::int64_t>(geo.seqs.size()), geo.D, geo.W},
                 "[N, D, W] (the shape of the final state)");
  Conv1dGrads grads{Tensor(DType::F64, in.x.shape()), Tensor(DType::F64, in.weight.shape()), std::nullopt,
                    std::nullopt};
  if (in.bias) grads.dbias = Tensor(DType::F64, in.bias->shape());
  if (in.initial_state) grads.dh0 = Tensor(DType::F64, in.initial_state->shape());
  const double* w = in.weight.data<double>();
  double* dw = grads.dweight.data<double>();
  for_channel_blocks(geo, [&](std::int64_t d0, std::int64_t d1) {
    for (const Sequence& s : geo.seqs) {
      const Window win{in, geo, s};
      std::vector<double> d_pre;
      for (std::int64_t t = 0; t < s.len; ++t) {
        win.pre_activation(t, d0, d1, d_pre);
        const double* g = dy.data<double>() + (s.b * geo.T + s.begin + t) * geo.D;
        for (std::int64_t d = d0; d < d1; ++d) {
          const double p = d_pre[d - d0], sig = sigmoid(p);
          d_pre[d - d0] = in.activation == Activation::Silu ? g[d] * sig * (1 + p * (1 - sig)) : g[d];
        }
        if (grads.dbias)
          for (std::int64_t d = d0; d < d1; ++d) grads.dbias->data<double>()[d] += d_pre[d - d0];
        for (std::int64_t i = 0; i < geo.W; ++i) {
          const std::int64_t tau = t - (geo.W - 1) + i;
          const auto [x, stride] = win.token(tau);
          if (!x) continue;
          double* dx = win.grad(grads, tau);
          for (std::int64_t d = d0; d < d1; ++d) {
            dw[d * geo.W + i] += d_pre[d - d0] * x[d * stride];
            dx[d * stride] += d_pre[d - d0] * w[d * geo.W + i];
          }
        }
      }
      if (!dht) continue;
      for (std::int64_t slot = 0; slot < geo.W; ++slot) {  // the final state's slots, after every dy term
        const std::int64_t tau = s.len - geo.W + slot;
        double* dx = win.grad(grads, tau);
        if (!dx) continue;
        const std::int64_t stride = tau >= 0 ? 1 : geo.W;
        const double* g = dht->data<double>() + s.n * geo.D * geo.W + slot;
        for (std::int64_t d = d0; d < d1; ++d) dx[d * stride] += g[d * geo.W];
      }
    }
  });
  return grads;
}

}  // namespace gdnv::ref
