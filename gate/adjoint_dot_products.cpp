// Gate step "adjoint dot-products": every hand-written adjoint of the CP implementation against the map it
// reverses. For a linear map A and its backward B = A^T, <A x, y> = <x, B y> for every x, y; on seeded
// random x, y a wrong backward (a transpose missed, a permutation not inverted, a piece of gradient sent
// to the wrong rank or dropped) breaks the identity by O(|x| |y|), far above the rounding of either side.
// Pairs checked (docs/DESIGN.md §11): the chunked core's forward and backward span maps on spans of
// several 64-token chunks and the two folds (CPU backend in fp64, the GPU math's emulation in fp32); and
// on in-process worlds of W ranks, chunkwise's conv halo and its gradient return, its zigzag <->
// contiguous route, all_gather's all-gather and reduce-scatter, headwise's all-to-all and its inverse.
// Every input of a case is seeded by the case's label.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "comm/inprocess.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/text.hpp"
#include "cp/exchanges.hpp"
#include "cpu/backend.hpp"
#include "gate/steps.hpp"
#include "gpu/kernel_backend.hpp"

namespace gdnv::gate {
namespace {

using Ints = std::vector<std::int64_t>;

// Unit roundoff u of the dtype the map computes in.
double unit_roundoff(DType d) { return d == DType::F64 ? 0x1p-53 : 0x1p-24; }

// gamma_n = n u / (1 - n u): a sum or inner product of n terms computed in any order is exact up to a
// relative error gamma_n of the sum of its terms' magnitudes (Higham, Accuracy and Stability, §3.1).
double gamma(double n, double u) { return n * u / (1 - n * u); }

// The two sides of the identity, summed in fp64, and the bound their difference must stay within.
struct Sides {
  double forward = 0;   // <A x, y>
  double backward = 0;  // <x, A^T y>
  double bound = 0;
};

// "" when the sides agree within their bound, else what differs (a NaN never agrees).
std::string disagreement(const Sides& s) {
  const double diff = std::abs(s.forward - s.backward);
  if (diff <= s.bound) return "";
  char why[192];
  std::snprintf(why, sizeof why, "<A x, y> = %.17g, <x, A^T y> = %.17g: they differ by %.3e > bound %.3e", s.forward,
                s.backward, diff, s.bound);
  return why;
}

// One case of one or more value heads: it fails on the first head whose sides disagree.
void judge(StepResult& r, const std::string& label, const std::vector<Sides>& heads) {
  std::string why;
  for (std::size_t h = 0; h < heads.size() && why.empty(); ++h)
    if (const std::string d = disagreement(heads[h]); !d.empty())
      why = (heads.size() > 1 ? "head " + std::to_string(h) + ": " : "") + d;
  r.check(why.empty(), label, why);
}

// N(0, 1) values seeded by (case label, what).
Tensor seeded_normal(const std::string& label, const std::string& what, Shape shape) {
  const Rng rng(0, label + "/" + what);
  Tensor t(DType::F64, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.normal(static_cast<std::uint64_t>(i)));
  return t;
}

Tensor seeded_uniform(const std::string& label, const std::string& what, Shape shape, double lo, double hi) {
  const Rng rng(0, label + "/" + what);
  Tensor t(DType::F64, std::move(shape));
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.uniform(static_cast<std::uint64_t>(i), lo, hi));
  return t;
}

// The backends the span maps run on: the CPU backend in fp64 and the GPU math's host emulation in fp32
// (it stores fp32 or bf16 only).
struct SpanBackend {
  DType storage;
  std::function<std::unique_ptr<cp::Backend>(DType)> make;
};
const SpanBackend kSpanBackends[] = {{DType::F64, cpu::make_backend}, {DType::F32, gpu::make_emulated_backend}};

// ---- span maps and folds ---------------------------------------------------------------------------------

// [Hv, K, V+K] per value head [h | M]: element (h, a, col).
std::int64_t map_at(std::int64_t K, std::int64_t V, std::int64_t h, std::int64_t a, std::int64_t col) {
  return (h * K + a) * (V + K) + col;
}

// maps [n, Hv, K, V+K] from per-rank blocks, each [Hv, K, V+K].
Tensor stacked(const std::vector<Tensor>& blocks) {
  const Shape& one = blocks.front().shape();
  Tensor out(DType::F64, {static_cast<std::int64_t>(blocks.size()), one[0], one[1], one[2]});
  const std::int64_t n = blocks.front().numel();
  for (std::size_t j = 0; j < blocks.size(); ++j)
    for (std::int64_t i = 0; i < n; ++i) out.set(static_cast<std::int64_t>(j) * n + i, blocks[j].get(i));
  return out;
}

// A map block [Hv, K, V+K] whose h columns hold s [Hv, K, V] (M zero): folded first, it is the fold's
// entering state s.
Tensor state_as_map(const Tensor& s) {
  const std::int64_t Hv = s.dim(0), K = s.dim(1), V = s.dim(2);
  Tensor out(DType::F64, {Hv, K, V + K});
  for (std::int64_t h = 0; h < Hv; ++h)
    for (std::int64_t a = 0; a < K; ++a)
      for (std::int64_t col = 0; col < V; ++col) out.set(map_at(K, V, h, a, col), s.get((h * K + a) * V + col));
  return out;
}

// M x through the backend's forward fold and M_b^T y through its backward fold, for the linear span maps
// `forward` = [0 | M] and `backward` = [0 | M_b] ([Hv, K, V+K] each): folding [x | 0] then `forward` from
// zero gives M x; folding [y | 0] then `backward` (last map first) gives M_b^T y.
std::pair<Tensor, Tensor> apply_by_folds(cp::Backend& be, const std::vector<Tensor>& forward,
                                         const std::vector<Tensor>& backward, const Tensor& x, const Tensor& y) {
  std::vector<Tensor> f{state_as_map(x)}, b = backward;
  f.insert(f.end(), forward.begin(), forward.end());
  b.push_back(state_as_map(y));
  const DType s = be.state_dtype();
  const int n = static_cast<int>(f.size());
  return {be.download(be.fold_span_maps(be.upload(stacked(f), s), 0, n, FoldDirection::Forward)).to(DType::F64),
          be.download(be.fold_span_maps(be.upload(stacked(b), s), 0, n, FoldDirection::Backward)).to(DType::F64)};
}

// Value head h's <a, b> over [Hv, K, V] tensors.
double head_dot(const Tensor& a, const Tensor& b, std::int64_t h) {
  const std::int64_t n = a.numel() / a.dim(0);
  double s = 0;
  for (std::int64_t i = h * n; i < (h + 1) * n; ++i) s += a.get(i) * b.get(i);
  return s;
}

double head_norm(const Tensor& a, std::int64_t h) { return std::sqrt(head_dot(a, a, h)); }

// Rounded to the dtype the backend holds it in, as fp64.
Tensor held(const Tensor& t, DType d) { return t.to(d).to(DType::F64); }

struct SpanShape {
  std::int64_t T, K, V;
};
constexpr std::int64_t kHk = 1, kHv = 2;  // both value heads read key head 0 (GVA)

// The span map's linear part, forward S -> M S (gdr_last_span_map) against backward dS -> M_b^T dS
// (gdr_first_backward_span_map), on one sequence of T tokens (several 64-token chunks, so the chunks'
// composition matters) with v = 0 and d_o = 0, so both maps are linear (h_ext = dh_ext = 0). Weak decay
// (g in [-0.01, 0]) and beta in [0, 0.2] keep each chunk's M_c from contracting much, so a wrong
// composition of the chunks moves the dot by 1e-4 to 5e-3 of |x| |y| (measured), not by underflow-sized amounts.
//
// Bound: the two sides differ only by the rounding of the two computed maps (and of the folds and dot
// products that apply them). Each per-token factor A_t = e^{g_t} (I - beta_t k_t k_t^T) has norm <= 1
// (g <= 0, 0 <= beta <= 1, |k_t| = 1), so every partial product does and a rounding made anywhere in the
// chain is not amplified by what follows: each map errs by the sum of its chunks' errors. Per chunk M_c
// comes from 64-term sums through the solve with I + A; as for the fp32 kernel gates (docs/DESIGN.md §4)
// rounding errors of random sign add in quadrature, sqrt(64) u per sum, times the chunk solve's
// condition kappa ~ 10: 8 kappa u per chunk. The fold's K-term products and the KV-term dot product add
// sqrt(K) u and sqrt(K V) u. Per value head, relative to |x| |y| (Frobenius) and for the two sides:
//   |<M x, y> - <x, M_b^T y>| <= 2 (n_chunks 8 kappa + sqrt(K) + sqrt(K V)) u |x| |y|
// fp32 (the emulation): ~4e-5 |x| |y|, measured 3e-9; fp64: ~7e-14 |x| |y|, measured 1e-16.
void span_map_case(StepResult& r, const std::string& label, const SpanShape& shape, const SpanBackend& backend) {
  const auto be = backend.make(backend.storage);
  const DType act = be->dtype(), state = be->state_dtype();
  const std::int64_t T = shape.T, K = shape.K, V = shape.V;
  const cp::Varlen seqs{{0, T}, cp::upload_index(*be, {0, T})};
  const cp::Buffer q = be->upload(seeded_normal(label, "q", {T, kHk, K}), act),
                   k = be->upload(seeded_normal(label, "k", {T, kHk, K}), act), v = be->alloc(act, {T, kHv, V}),
                   d_o = be->alloc(act, {T, kHv, V}),
                   g = be->upload(seeded_uniform(label, "g", {T, kHv}, -1e-2, 0), state),
                   beta = be->upload(seeded_uniform(label, "beta", {T, kHv}, 0, 0.2), state), h0;
  const cp::GdrArgs args{q, k, v, g, beta, seqs, h0, 1 / std::sqrt(static_cast<double>(K))};
  const Tensor forward = be->download(be->gdr_last_span_map(args)).to(DType::F64);
  const Tensor backward = be->download(be->gdr_first_backward_span_map(args, d_o)).to(DType::F64);
  const Tensor x = held(seeded_normal(label, "x", {kHv, K, V}), state),
               y = held(seeded_normal(label, "y", {kHv, K, V}), state);
  const auto [Mx, Mty] = apply_by_folds(*be, {forward}, {backward}, x, y);
  const double chunks = static_cast<double>((T + 63) / 64), kappa = 10;
  const double c = chunks * 8 * kappa + std::sqrt(static_cast<double>(K)) + std::sqrt(static_cast<double>(K * V));
  std::vector<Sides> heads;
  for (std::int64_t h = 0; h < kHv; ++h)
    heads.push_back(
        {head_dot(Mx, y, h), head_dot(x, Mty, h), 2 * c * unit_roundoff(state) * head_norm(x, h) * head_norm(y, h)});
  judge(r, label, heads);
}

// The two folds' linear parts: Forward S -> M_R ... M_1 S against Backward dS -> M_1^T ... M_R^T dS, over
// R ranks' seeded maps M_j ~ N(0, 1/K) (h_j = 0).
//
// Bound: each fold step computes K-term sums, exact up to gamma_K of |M_j| |S|; R steps and the KV-term
// dot product leave each side within gamma(R K + K V) <|M_R| ... |M_1| |x|, |y|> of the exact value
// (the absolute values taken elementwise, computed here in fp64), so the sides differ by at most twice that.
void fold_case(StepResult& r, const std::string& label, int R, std::int64_t K, std::int64_t V,
               const SpanBackend& backend) {
  const auto be = backend.make(backend.storage);
  const DType state = be->state_dtype();
  std::vector<Tensor> maps;
  for (int j = 0; j < R; ++j) {
    Tensor M = seeded_normal(label, "M" + std::to_string(j), {kHv, K, V + K});
    for (std::int64_t i = 0; i < M.numel(); ++i)
      M.set(i, i % (V + K) < V ? 0.0 : M.get(i) / std::sqrt(static_cast<double>(K)));
    maps.push_back(held(M, state));
  }
  const Tensor x = held(seeded_normal(label, "x", {kHv, K, V}), state),
               y = held(seeded_normal(label, "y", {kHv, K, V}), state);
  const auto [Mx, Mty] = apply_by_folds(*be, maps, maps, x, y);
  // |M_R| ... |M_1| |x|, elementwise absolute values, in fp64.
  Tensor P = x;
  for (std::int64_t i = 0; i < P.numel(); ++i) P.set(i, std::abs(P.get(i)));
  for (const Tensor& M : maps) {
    Tensor next(DType::F64, P.shape());
    for (std::int64_t h = 0; h < kHv; ++h)
      for (std::int64_t a = 0; a < K; ++a)
        for (std::int64_t col = 0; col < V; ++col) {
          double s = 0;
          for (std::int64_t b = 0; b < K; ++b)
            s += std::abs(M.get(map_at(K, V, h, a, V + b))) * P.get((h * K + b) * V + col);
          next.set((h * K + a) * V + col, s);
        }
    P = next;
  }
  const double c = static_cast<double>(R * K + K * V);
  std::vector<Sides> heads;
  for (std::int64_t h = 0; h < kHv; ++h) {
    double magnitude = 0;
    for (std::int64_t i = h * K * V; i < (h + 1) * K * V; ++i) magnitude += P.get(i) * std::abs(y.get(i));
    heads.push_back({head_dot(Mx, y, h), head_dot(x, Mty, h), 2 * gamma(c, unit_roundoff(state)) * magnitude});
  }
  judge(r, label, heads);
}

// ---- the exchanges between ranks, on an in-process world (CPU backend, fp64) --------------------------------

// Seeded THD lengths, each a multiple of 2W (zigzag); seed 0 is one sequence of 2W tokens, whose spans of
// 2 tokens make the conv halo (3 tokens) reach two ranks back.
Ints exchange_cu(int W, std::uint64_t seed) {
  if (seed == 0) return {0, 2 * W};
  return seeded_cu(W, seed, "gate/adjoint cu", 3, 3);
}

// One rank's share of both sides: its part of <A x, y> and of <x, A^T y>, and of the magnitudes
// sum |(A x)_i y_i| and sum |x_j (A^T y)_j| with the element count n of the two inner products.
struct RankShare {
  double forward = 0, backward = 0, magnitude = 0, terms = 0;
};

void add_dot(const Tensor& a, const Tensor& b, double& dot, RankShare& s) {
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    dot += a.get(i) * b.get(i);
    s.magnitude += std::abs(a.get(i) * b.get(i));
  }
  s.terms += static_cast<double>(a.numel());
}

// A rank's part of one pair: its x and y (seeded by the label and its rank), A x and A^T y through the
// implementation, its shares of both sides.
using RankPair = std::function<RankShare(cp::Backend& be, const cp::MicroBatch& mb, const std::string& label)>;

// The pair on a world of W ranks, each planning the micro-batch of `cu` for `mode`.
//
// Bound: every forward map here only copies values (gathers, scatters, all-gathers, all-to-alls: A x is
// exact, and A |x| = |A x|); the backward sums at most W copies per element (reduce-scatter, the halo's
// rank-ordered sum). With n the elements of the inner products: <A x, y> is exact up to
// gamma_n sum |(A x)_i y_i|; A^T y up to gamma_W |A|^T |y| elementwise, whose inner product with |x| is
// again sum |(A x)_i y_i|, and <x, A^T y> then up to gamma_n sum |x_j (A^T y)_j|. So
// |<A x, y> - <x, A^T y>| <= gamma(n + W) (sum |(A x)_i y_i| + sum |x_j (A^T y)_j|), doubled for the
// second-order terms: ~1e-13 of the magnitudes here, where a misplaced row moves the dot by O(1).
void exchange_case(StepResult& r, const std::string& label, int W, const Ints& cu, cp::CpMode mode,
                   const RankPair& pair) {
  std::vector<RankShare> shares(static_cast<std::size_t>(W));
  // A layer whose heads shard over every W of the step (2..5), for check_micro_batch's rules.
  const ref::LayerConfig exchange_layer({60, 60, 60, 1, 1, 4, 1e-6, false});
  try {
    comm::run_world(W, [&](comm::Communicator& comm) {
      const auto be = cpu::make_backend(DType::F64);
      cp::MicroBatchSpec spec;
      spec.cu_seqlens = cu;
      const auto mb =
          cp::make_micro_batch(*be, cp::check_micro_batch({mode, 1, W}, exchange_layer, spec), comm, mode, 4);
      shares[static_cast<std::size_t>(comm.rank())] = pair(*be, *mb, label + " rank " + std::to_string(comm.rank()));
    });
  } catch (const Error& e) {
    r.check(false, label, e.what());
    return;
  }
  Sides s;
  double magnitude = 0, terms = 0;
  for (const RankShare& share : shares) {
    s.forward += share.forward, s.backward += share.backward;
    magnitude += share.magnitude, terms += share.terms;
  }
  s.bound = 2 * gamma(terms + W, unit_roundoff(DType::F64)) * magnitude;
  judge(r, label, {s});
}

// x seeded by `what` as a [rows, cols] buffer; returns it and its fp64 copy.
std::pair<cp::Buffer, Tensor> seeded_buffer(cp::Backend& be, const std::string& label, const std::string& what,
                                            std::int64_t rows, std::int64_t cols) {
  Tensor t = seeded_normal(label, what, {rows, cols});
  return {be.upload(t, DType::F64), t};
}

RankShare shares_of(cp::Backend& be, const Tensor& x, const cp::Buffer& Ax, const Tensor& y, const cp::Buffer& Aty) {
  RankShare s;
  if (!Ax.empty()) add_dot(be.download(Ax), y, s.forward, s);
  add_dot(x, be.download(Aty), s.backward, s);
  return s;
}

constexpr std::int64_t kWidth = 3;  // channels of the moved rows

// chunkwise's route: zigzag -> contiguous (to_contiguous) against contiguous -> zigzag (to_zigzag).
RankShare route_pair(cp::Backend& be, const cp::MicroBatch& mb, const std::string& label) {
  const auto [x, xt] = seeded_buffer(be, label, "x", mb.local_tokens, kWidth);
  const auto [y, yt] = seeded_buffer(be, label, "y", mb.cu.back() / mb.cp_size, kWidth);
  return shares_of(be, xt, cp::to_contiguous(be, mb, x), yt, cp::to_zigzag(be, mb, y));
}

// chunkwise's conv halo: every rank's conv-input tail rows of p -> each rank's halo (exchange_halo) against
// the halo's gradient -> p's gradient (return_halo_grad, into zeros). A rank without a halo has none to
// return.
RankShare halo_pair(cp::Backend& be, const cp::MicroBatch& mb, const std::string& label) {
  cp::MixerParams mp;
  mp.geo = {1, 1, 2, 2, 4, 1e-6, 1 / std::sqrt(2.0)};  // conv width 4: a 3-token halo
  cp::plan_mixer_columns(be, mp);
  const std::int64_t n = mb.cu.back() / mb.cp_size;
  const auto [p, pt] = seeded_buffer(be, label, "p", n, mp.geo.in_dim());
  const cp::Buffer halo = cp::exchange_halo(be, mb, mp, p);
  const auto [dhalo, dhalo_t] = seeded_buffer(be, label, "dhalo", mp.geo.W - 1, mp.geo.conv_dim());
  cp::Buffer dp = be.alloc(DType::F64, {n, mp.geo.in_dim()});
  cp::return_halo_grad(be, mb, mp, halo.empty() ? cp::Buffer{} : dhalo, dp);
  return shares_of(be, pt, halo, dhalo_t, dp);
}

// all_gather: the all-gather of the zigzag shards against the reduce-scatter of their gradient.
RankShare all_gather_pair(cp::Backend& be, const cp::MicroBatch& mb, const std::string& label) {
  const auto [x, xt] = seeded_buffer(be, label, "x", mb.local_tokens, kWidth);
  const auto [y, yt] = seeded_buffer(be, label, "y", mb.cu.back(), kWidth);
  return shares_of(be, xt, cp::gather_shards(be, mb, x), yt, cp::reduce_scatter_shards(be, mb, y));
}

// headwise: tokens -> heads (scatter_heads) against heads -> tokens (gather_heads), 2 columns per rank.
RankShare headwise_pair(cp::Backend& be, const cp::MicroBatch& mb, const std::string& label) {
  const std::int64_t E = 2;
  const auto [x, xt] = seeded_buffer(be, label, "x", mb.local_tokens, mb.cp_size * E);
  const auto [y, yt] = seeded_buffer(be, label, "y", mb.cu.back(), E);
  return shares_of(be, xt, cp::scatter_heads(be, mb, x), yt, cp::gather_heads(be, mb, y));
}

struct ExchangePair {
  const char* name;
  cp::CpMode mode;
  RankPair pair;
};

StepResult run(const StepOptions& options) {
  StepResult r(options);
  const bool quick = options.quick_matrix();
  const std::uint64_t seeds = quick ? 1 : 4;
  for (const SpanBackend& backend : kSpanBackends) {
    const std::string on = " " + backend.make(backend.storage)->name();
    for (const SpanShape& s : {SpanShape{150, 6, 5}, {200, 4, 8}, {130, 8, 3}})
      for (std::uint64_t seed = 0; seed < seeds; ++seed) {
        const std::string label = "span map T=" + std::to_string(s.T) + " K=" + std::to_string(s.K) +
                                  " V=" + std::to_string(s.V) + " seed " + std::to_string(seed) + on;
        if (r.selected(label)) span_map_case(r, label, s, backend);
      }
    for (int R : {2, 3, 5})
      for (std::uint64_t seed = 0; seed < seeds; ++seed) {
        const std::string label = "fold R=" + std::to_string(R) + " K=6 V=5 seed " + std::to_string(seed) + on;
        if (r.selected(label)) fold_case(r, label, R, 6, 5, backend);
      }
  }
  const ExchangePair pairs[] = {{"conv halo", cp::CpMode::Chunkwise, halo_pair},
                                {"route", cp::CpMode::Chunkwise, route_pair},
                                {"all_gather", cp::CpMode::AllGather, all_gather_pair},
                                {"headwise", cp::CpMode::Headwise, headwise_pair}};
  for (const ExchangePair& p : pairs)
    for (int W : {2, 3, 4, 5})
      for (std::uint64_t seed = 0; seed < (quick ? 2u : 8u); ++seed) {
        if (quick && W % 2) continue;
        const Ints cu = exchange_cu(W, seed);
        const std::string label =
            std::string(p.name) + " W=" + std::to_string(W) + " cu " + comma_list(cu) + " seed " + std::to_string(seed);
        if (r.selected(label)) exchange_case(r, label, W, cu, p.mode, p.pair);
      }
  return r;
}

}  // namespace

const Step adjoint_dot_products{"adjoint dot-products", run};

}  // namespace gdnv::gate
