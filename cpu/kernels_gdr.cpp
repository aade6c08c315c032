// The chunked gated delta rule over packed sequences (docs/DESIGN.md §1.1): q and k L2-normalised in the
// kernel, GVA (value head h reads key head h / (Hv/Hk)), chunks of 64 tokens from each sequence's
// start, the initial state h0 for the first sequence only and the final state of the last one.
// Inputs are re-laid head-major ([H, N, D]) so every chunk is a contiguous block.
#include <algorithm>
#include <cmath>
#include <utility>

#include "core/parallel.hpp"
#include "cpu/gdr_chunk.hpp"
#include "cpu/kernels.hpp"
#include "faults/seams.hpp"

namespace gdnv::cpu {
namespace {

// [A, B, D] -> [B, A, D]: token-major [N, H, D] to head-major [H, N, D] and back.
template <class C>
Array<C> swap_leading(const Array<C>& x, std::int64_t A, std::int64_t B, std::int64_t D) {
  Array<C> out(x.size());
  for (std::int64_t a = 0; a < A; ++a)
    for (std::int64_t b = 0; b < B; ++b) std::copy_n(&x[(a * B + b) * D], D, &out[(b * A + a) * D]);
  return out;
}

template <class C>
Array<C> head_major(const Array<C>& x, std::int64_t N, std::int64_t H, std::int64_t D) {
  return swap_leading(x, N, H, D);
}

template <class C>
Array<C> token_major(const Array<C>& x, std::int64_t N, std::int64_t H, std::int64_t D) {
  return swap_leading(x, H, N, D);
}

// x_hat = x r with r = 1 / sqrt(sum x^2 + eps), per row of D, in place; returns r [rows].
template <class C>
Array<C> l2_normalize(Array<C>& x, std::int64_t D, double eps) {
  Array<C> r(x.size() / D);
  for (std::size_t row = 0; row < r.size(); ++row) {
    C* p = &x[row * D];
    C ss = 0;
    for (std::int64_t i = 0; i < D; ++i) ss += p[i] * p[i];
    r[row] = C(1) / std::sqrt(ss + static_cast<C>(eps));
    for (std::int64_t i = 0; i < D; ++i) p[i] *= r[row];
  }
  return r;
}

// The gradient w.r.t. x_hat becomes that w.r.t. x, in place: dx = r (dx_hat - x_hat (x_hat . dx_hat)).
template <class C>
void l2_backward(const Array<C>& x_hat, const Array<C>& r, Array<C>& dx, std::int64_t D) {
  for (std::size_t row = 0; row < r.size(); ++row) {
    const C* xh = &x_hat[row * D];
    C* d = &dx[row * D];
    C dot = 0;
    for (std::int64_t i = 0; i < D; ++i) dot += xh[i] * d[i];
    for (std::int64_t i = 0; i < D; ++i) d[i] = r[row] * (d[i] - xh[i] * dot);
  }
}

// The kernel's inputs, head-major, q and k normalised.
template <class C>
struct Heads {
  const typename Gdr<C>::Input& in;
  std::int64_t N;
  Array<C> q, k;     // [Hk, N, K]  normalised
  Array<C> rq, rk;   // [Hk, N]     their 1 / sqrt(sum x^2 + eps)
  Array<C> v;        // [Hv, N, V]
  Array<C> g, beta;  // [Hv, N]

  explicit Heads(const typename Gdr<C>::Input& input)
      : in(input),
        N(in.cu.back()),
        q(head_major(in.q, N, in.Hk, in.K)),
        k(head_major(in.k, N, in.Hk, in.K)),
        rq(l2_normalize(q, in.K, in.l2_eps)),
        rk(l2_normalize(k, in.K, in.l2_eps)),
        v(head_major(in.v, N, in.Hv, in.V)),
        g(head_major(in.g, N, in.Hv, 1)),
        beta(head_major(in.beta, N, in.Hv, 1)) {}

  std::int64_t key_head(std::int64_t h) const { return h / (in.Hv / in.Hk); }
  std::int64_t sequences() const { return static_cast<std::int64_t>(in.cu.size()) - 1; }

  // body(s, h) for every sequence s and value head h: one parallel task per (sequence, key head),
  // its GVA group's value heads in order, so dq and dk sum over the group in a fixed order.
  template <class Body>
  void for_each_head(const Body& body) const {
    const std::int64_t group = in.Hv / in.Hk;
    parallel_for(sequences() * in.Hk, 0, [&](std::int64_t task) {
      const std::int64_t s = task / in.Hk, kh = task % in.Hk;
      for (std::int64_t h = kh * group; h < (kh + 1) * group; ++h) body(s, h);
    });
  }

  // Rows [begin, begin + c) of value head h.
  Chunk<C> chunk(std::int64_t h, std::int64_t begin, std::int64_t c) const {
    const std::int64_t kh = key_head(h);
    return {ConstMatMap<C>(&q[(kh * N + begin) * in.K], c, in.K), ConstMatMap<C>(&k[(kh * N + begin) * in.K], c, in.K),
            ConstMatMap<C>(&v[(h * N + begin) * in.V], c, in.V), ConstVecMap<C>(&g[h * N + begin], c),
            ConstVecMap<C>(&beta[h * N + begin], c)};
  }

  // State [K, V] of head h in `states` [Hv, K, V] when `use` and states are given, else zero.
  Mat<C> state_or_zero(const Array<C>& states, bool use, std::int64_t h) const {
    if (!use || states.empty()) return Mat<C>::Zero(in.K, in.V);
    return ConstMatMap<C>(&states[h * in.K * in.V], in.K, in.V);
  }
};

// Chunk starts of sequence s: every 64 tokens from the sequence's first row.
template <class C, class Body>
void for_each_chunk(const Heads<C>& x, std::int64_t s, Body body) {
  for (std::int64_t begin = x.in.cu[s]; begin < x.in.cu[s + 1]; begin += kChunk)
    body(begin, std::min(kChunk, x.in.cu[s + 1] - begin));
}

template <class C>
void store_state(const Mat<C>& S, std::int64_t h, Array<C>& states) {
  MatMap<C>(&states[h * S.size()], S.rows(), S.cols()) = S;
}

// Forward of one (sequence, value head): writes o_hm [Hv, N, V] and advances S through the sequence.
template <class C>
void forward_head(const Heads<C>& x, std::int64_t s, std::int64_t h, Mat<C>& S, Array<C>& o_hm) {
  for_each_chunk(x, s, [&](std::int64_t begin, std::int64_t c) {
    const Intra<C> in = ChunkStages<C>::intra(x.chunk(h, begin, c));
    const Mat<C> v_new = ChunkStages<C>::new_values(in, S);
    ChunkStages<C>::output(in, S, v_new, static_cast<C>(x.in.scale),
                           MatMap<C>(&o_hm[(h * x.N + begin) * x.in.V], c, x.in.V));
    ChunkStages<C>::advance(in, v_new, S);
  });
}

// Head-major gradients, dq and dk w.r.t. the normalised q and k.
template <class C>
struct HeadGrads {
  Array<C> dq, dk;     // [Hk, N, K]
  Array<C> dv;         // [Hv, N, V]
  Array<C> dg, dbeta;  // [Hv, N]
};

// Backward of one (sequence, value head) from the state S entering it: one forward sweep keeps each
// chunk's intra stage, entering state and v_new; the reverse sweep turns dS (the gradient of the
// sequence's final state) into that of its initial state.
template <class C>
void backward_head(const Heads<C>& x, std::int64_t s, std::int64_t h, Mat<C> S, const Array<C>& do_hm, Mat<C>& dS,
                   HeadGrads<C>& g) {
  struct Saved {
    Intra<C> in;
    Mat<C> S, v_new;
  };
  std::vector<Saved> saved;
  for_each_chunk(x, s, [&](std::int64_t begin, std::int64_t c) {
    Intra<C> in = ChunkStages<C>::intra(x.chunk(h, begin, c));
    Mat<C> v_new = ChunkStages<C>::new_values(in, S);
    saved.push_back({std::move(in), S, std::move(v_new)});
    ChunkStages<C>::advance(saved.back().in, saved.back().v_new, S);
  });
  const std::int64_t K = x.in.K, V = x.in.V, kh = x.key_head(h), N = x.N;
  for (auto j = static_cast<std::int64_t>(saved.size()) - 1; j >= 0; --j) {
    const std::int64_t begin = x.in.cu[s] + j * kChunk, c = std::min(kChunk, x.in.cu[s + 1] - begin);
    const Saved& f = saved[j];
    const ChunkGrads<C> d =
        ChunkStages<C>::backward(x.chunk(h, begin, c), f.in, f.S, f.v_new,
                                 ConstMatMap<C>(&do_hm[(h * N + begin) * V], c, V), static_cast<C>(x.in.scale), dS);
    MatMap<C>(&g.dq[(kh * N + begin) * K], c, K) += d.dq;  // summed over the GVA group
    MatMap<C>(&g.dk[(kh * N + begin) * K], c, K) += d.dk;
    MatMap<C>(&g.dv[(h * N + begin) * V], c, V) = d.dv;
    Eigen::Map<Vec<C>>(&g.dg[h * N + begin], c) = d.dg;
    Eigen::Map<Vec<C>>(&g.dbeta[h * N + begin], c) = d.dbeta;
  }
}

// Rows [begin, begin + c) of every chunk of sequence s, last chunk first.
template <class C>
std::vector<std::pair<std::int64_t, std::int64_t>> chunks_reversed(const Heads<C>& x, std::int64_t s) {
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  for_each_chunk(x, s, [&](std::int64_t begin, std::int64_t c) { chunks.emplace_back(begin, c); });
  std::reverse(chunks.begin(), chunks.end());
  return chunks;
}

// [h | M] of value head `head` into maps [Hv, K, V+K].
template <class C>
void store_map(const Mat<C>& h, const Mat<C>& M, std::int64_t head, Array<C>& maps) {
  const std::int64_t K = M.rows(), width = h.cols() + K;
  MatMap<C> out(&maps[head * K * width], K, width);
  out << h, M;
}

}  // namespace

template <class C>
Array<C> Gdr<C>::last_span_map(const Input& in) {
  const Heads<C> x(in);
  const std::int64_t s = x.sequences() - 1, K = in.K;
  Array<C> maps(static_cast<std::size_t>(in.Hv * K * (in.V + K)));
  parallel_for(in.Hv, 0, [&](std::int64_t h) {
    Mat<C> M = Mat<C>::Identity(K, K), h_ext = Mat<C>::Zero(K, in.V);
    for_each_chunk(x, s, [&](std::int64_t begin, std::int64_t c) {
      const SpanMap<C> step = ChunkStages<C>::span_map(ChunkStages<C>::intra(x.chunk(h, begin, c)));
      h_ext = step.M * h_ext + step.h_ext;
      M = step.M * M;
    });
    store_map(h_ext, M, h, maps);
  });
  return maps;
}

template <class C>
Array<C> Gdr<C>::first_backward_span_map(const Input& in, const Array<C>& d_o) {
  const Heads<C> x(in);
  const std::int64_t K = in.K, V = in.V;
  const Array<C> do_hm = head_major(d_o, x.N, in.Hv, V);
  const auto chunks = chunks_reversed(x, 0);
  // The planted fault composes M <- M_c M, the forward's order, while walking the chunks last to first.
  const bool forward_order = faults::backward_span_map_forward_order();
  Array<C> maps(static_cast<std::size_t>(in.Hv * K * (V + K)));
  parallel_for(in.Hv, 0, [&](std::int64_t h) {
    Mat<C> M = Mat<C>::Identity(K, K), dh_ext = Mat<C>::Zero(K, V);
    for (const auto& [begin, c] : chunks) {
      const Intra<C> intra = ChunkStages<C>::intra(x.chunk(h, begin, c));
      const Mat<C> M_chunk = ChunkStages<C>::span_map(intra).M;
      ChunkStages<C>::fold_backward(intra, M_chunk, ConstMatMap<C>(&do_hm[(h * x.N + begin) * V], c, V),
                                    static_cast<C>(in.scale), dh_ext);
      M = forward_order ? Mat<C>(M_chunk * M) : Mat<C>(M * M_chunk);
    }
    store_map(dh_ext, M, h, maps);
  });
  return maps;
}

template <class C>
Array<C> Gdr<C>::fold_span_maps(const Array<C>& maps, std::int64_t Hv, std::int64_t K, std::int64_t V, int begin,
                                int end, FoldDirection direction) {
  const bool forward = direction == FoldDirection::Forward;
  Array<C> out(static_cast<std::size_t>(Hv * K * V));
  for (std::int64_t h = 0; h < Hv; ++h) {
    Mat<C> S = Mat<C>::Zero(K, V);
    for (int step = 0; step < end - begin; ++step) {
      const int j = forward ? begin + step : end - 1 - step;
      const ConstMatMap<C> map(&maps[(j * Hv + h) * K * (V + K)], K, V + K);
      if (forward) S = map.rightCols(K) * S + map.leftCols(V);
      else S = map.rightCols(K).transpose() * S + map.leftCols(V);
    }
    store_state(S, h, out);
  }
  return out;
}

template <class C>
typename Gdr<C>::Out Gdr<C>::forward(const Input& in) {
  const Heads<C> x(in);
  const std::int64_t last = x.sequences() - 1;
  Array<C> o_hm(in.v.size());
  Out out{{}, Array<C>(static_cast<std::size_t>(in.Hv * in.K * in.V))};
  x.for_each_head([&](std::int64_t s, std::int64_t h) {
    Mat<C> S = x.state_or_zero(in.h0, s == 0, h);
    forward_head(x, s, h, S, o_hm);
    if (s == last) store_state(S, h, out.final_state);
  });
  out.o = token_major(o_hm, x.N, in.Hv, in.V);
  return out;
}

template <class C>
typename Gdr<C>::Grads Gdr<C>::backward(const Input& in, const Array<C>& d_o, const Array<C>& dht) {
  const Heads<C> x(in);
  const std::int64_t last = x.sequences() - 1, N = x.N;
  const Array<C> do_hm = head_major(d_o, N, in.Hv, in.V);
  HeadGrads<C> g{Array<C>(in.q.size()), Array<C>(in.k.size()), Array<C>(in.v.size()), Array<C>(in.g.size()),
                 Array<C>(in.beta.size())};
  Grads out;
  out.dh0.assign(static_cast<std::size_t>(in.Hv * in.K * in.V), C(0));
  x.for_each_head([&](std::int64_t s, std::int64_t h) {
    Mat<C> dS = x.state_or_zero(dht, s == last, h);
    backward_head(x, s, h, x.state_or_zero(in.h0, s == 0, h), do_hm, dS, g);
    if (s == 0) store_state(dS, h, out.dh0);
  });
  l2_backward(x.q, x.rq, g.dq, in.K);
  l2_backward(x.k, x.rk, g.dk, in.K);
  out.dq = token_major(g.dq, N, in.Hk, in.K);
  out.dk = token_major(g.dk, N, in.Hk, in.K);
  out.dv = token_major(g.dv, N, in.Hv, in.V);
  out.dg = token_major(g.dg, N, in.Hv, 1);
  out.dbeta = token_major(g.dbeta, N, in.Hv, 1);
  return out;
}

template struct Gdr<float>;
template struct Gdr<double>;

}  // namespace gdnv::cpu
