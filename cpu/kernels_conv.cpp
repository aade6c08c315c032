// Causal depthwise conv1d + SiLU over packed sequences (docs/DESIGN.md §1.2), with the halo of the first
// sequence (the W-1 tokens before it on earlier ranks), forward and backward.
#include "cpu/kernels.hpp"
#include "cpu/math.hpp"

namespace gdnv::cpu {
namespace {

// Where the conv of each token reads: token r looks `back` in [0, W-1] tokens behind it, into its own
// sequence, the halo (first sequence only) or zeros. Weights transposed to wT [W, D] for the inner loops.
template <class C>
struct Taps {
  const typename Conv<C>::Input& in;
  std::vector<std::int64_t> start;  // [N] first row of each row's sequence
  Array<C> wT;                      // [W, D]

  explicit Taps(const typename Conv<C>::Input& input) : in(input), start(in.x.size() / in.D), wT(in.weight.size()) {
    for (std::size_t s = 0; s + 1 < in.cu.size(); ++s)
      for (std::int64_t r = in.cu[s]; r < in.cu[s + 1]; ++r) start[r] = in.cu[s];
    for (std::int64_t d = 0; d < in.D; ++d)
      for (std::int64_t i = 0; i < in.W; ++i) wT[i * in.D + d] = in.weight[d * in.W + i];
  }

  std::int64_t rows() const { return static_cast<std::int64_t>(start.size()); }
  bool in_halo(std::int64_t r, std::int64_t back) const {
    return r - back < start[r] && r < in.cu[1] && !in.halo.empty();
  }
  // Row of token r - back, or nullptr for a zero token.
  const C* before(std::int64_t r, std::int64_t back) const {
    if (r - back >= start[r]) return &in.x[(r - back) * in.D];
    if (in_halo(r, back)) return &in.halo[(r - back + in.W - 1) * in.D];
    return nullptr;
  }
  // pre [D] = bias + sum_i wT[i] * x[r - (W-1) + i].
  void pre_activation(std::int64_t r, C* pre) const {
    for (std::int64_t d = 0; d < in.D; ++d) pre[d] = in.bias.empty() ? C(0) : in.bias[d];
    for (std::int64_t i = 0; i < in.W; ++i)
      if (const C* x = before(r, in.W - 1 - i))
        for (std::int64_t d = 0; d < in.D; ++d) pre[d] += wT[i * in.D + d] * x[d];
  }
};

// d_pre [N, D] = dy * silu'(pre).
template <class C>
Array<C> pre_activation_grad(const Taps<C>& taps, const Array<C>& dy) {
  const std::int64_t D = taps.in.D;
  Array<C> d_pre(dy.size());
  for (std::int64_t r = 0; r < taps.rows(); ++r) {
    C* p = &d_pre[r * D];
    taps.pre_activation(r, p);
    for (std::int64_t d = 0; d < D; ++d) p[d] = dy[r * D + d] * silu_grad(p[d]);
  }
  return d_pre;
}

// dx (and dhalo): each token's d_pre flows back to the W tokens its window read.
template <class C>
void input_grads(const Taps<C>& taps, const Array<C>& d_pre, typename Conv<C>::Grads& g) {
  const std::int64_t D = taps.in.D, W = taps.in.W;
  for (std::int64_t r = 0; r < taps.rows(); ++r)
    for (std::int64_t i = 0; i < W; ++i) {
      const std::int64_t back = W - 1 - i;
      C* dst = r - back >= taps.start[r] ? &g.dx[(r - back) * D]
               : taps.in_halo(r, back)   ? &g.dhalo[(r - back + W - 1) * D]
                                         : nullptr;
      if (dst)
        for (std::int64_t d = 0; d < D; ++d) dst[d] += d_pre[r * D + d] * taps.wT[i * D + d];
    }
}

// dw [D, W] = sum over tokens of d_pre * the window input; dbias [D] = sum of d_pre.
template <class C>
void weight_grads(const Taps<C>& taps, const Array<C>& d_pre, typename Conv<C>::Grads& g) {
  const std::int64_t D = taps.in.D, W = taps.in.W;
  Array<C> dwT(static_cast<std::size_t>(W * D));
  blocked_row_sum(taps.rows(), dwT, [&](std::int64_t r, C* acc) {
    for (std::int64_t i = 0; i < W; ++i)
      if (const C* x = taps.before(r, W - 1 - i))
        for (std::int64_t d = 0; d < D; ++d) acc[i * D + d] += d_pre[r * D + d] * x[d];
  });
  for (std::int64_t d = 0; d < D; ++d)
    for (std::int64_t i = 0; i < W; ++i) g.dw[d * W + i] = dwT[i * D + d];
  if (!taps.in.bias.empty())
    blocked_row_sum(taps.rows(), g.dbias, [&](std::int64_t r, C* acc) {
      for (std::int64_t d = 0; d < D; ++d) acc[d] += d_pre[r * D + d];
    });
}

}  // namespace

template <class C>
Array<C> Conv<C>::forward(const Input& in) {
  const Taps<C> taps(in);
  Array<C> y(in.x.size());
  for (std::int64_t r = 0; r < taps.rows(); ++r) {
    C* p = &y[r * in.D];
    taps.pre_activation(r, p);
    for (std::int64_t d = 0; d < in.D; ++d) p[d] = silu(p[d]);
  }
  return y;
}

template <class C>
typename Conv<C>::Grads Conv<C>::backward(const Input& in, const Array<C>& dy) {
  const Taps<C> taps(in);
  Grads g{Array<C>(in.x.size()), Array<C>(in.weight.size()), Array<C>(in.bias.size()), Array<C>(in.halo.size())};
  const Array<C> d_pre = pre_activation_grad(taps, dy);
  input_grads(taps, d_pre, g);
  weight_grads(taps, d_pre, g);
  return g;
}

template struct Conv<float>;
template struct Conv<double>;

}  // namespace gdnv::cpu
