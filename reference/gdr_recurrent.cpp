// Recurrent form of the gated delta rule (docs/DESIGN.md §1.1), token by token, exactly as defined:
//   S <- e^{g_t} S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = S^T (scale q_t).
// The slow, obviously correct oracle; the chunked form is checked against it.
#include <cmath>

#include "reference/gdr_common.hpp"
#include "reference/l2norm.hpp"

namespace gdnv::ref {
namespace {

using namespace detail;

// The backward keeps the state every kSegment tokens and recomputes the states inside a segment, so
// its memory is O(T / kSegment * K * V) per head rather than one state per token.
constexpr std::int64_t kSegment = 64;

struct Token {
  Vec q, k;  // [K]  (L2-normalised when asked)
  Vec v;     // [V]
  double g, beta;
};

struct TokenGrads {
  Vec dq, dk;  // [K]  w.r.t. the (normalised) q, k
  Vec dv;      // [V]
  double dg, dbeta;
};

// One (sequence, value head) of the input.
struct Head {
  const GdrInputs& in;
  const Sequence& s;
  std::int64_t h, kh;  // value head and the key head it reads

  Vec key_vector(const Tensor& x, std::int64_t t) const {
    RowMatrix row = head_rows(x, s, kh, t, 1);
    if (in.use_qk_l2norm) l2norm_rows(row);
    return row.transpose();
  }
  Token token(std::int64_t t) const {
    return {key_vector(in.q, t), key_vector(in.k, t), head_rows(in.v, s, h, t, 1).transpose(),
            head_gates(in.g, s, h, t, 1)(0), head_gates(in.beta, s, h, t, 1)(0)};
  }
};

// S [K, V] <- A_t S + B_t.
void step(RowMatrix& S, const Token& x) {
  S *= std::exp(x.g);
  const Vec u = x.beta * (x.v - S.transpose() * x.k);
  S += x.k * u.transpose();
}

// Gradient of token t. S_prev, S_t [K, V] are the states before and after it, d_o [V] its output
// gradient; dS [K, V] enters as dL/dS_t (o_t's own term not yet included) and leaves as dL/dS_{t-1}.
TokenGrads step_backward(const Token& x, double scale, const RowMatrix& S_prev, const RowMatrix& S_t, const Vec& d_o,
                         RowMatrix& dS) {
  TokenGrads d;
  d.dq = scale * S_t * d_o;  // o_t = S_t^T (scale q_t)
  dS += scale * x.q * d_o.transpose();
  const RowMatrix S_a = std::exp(x.g) * S_prev;  // decayed state
  const Vec r = x.v - S_a.transpose() * x.k;     // u_t = beta_t r
  const Vec u = x.beta * r;
  d.dk = dS * u;  // S_t = S_a + k_t u_t^T
  const Vec du = dS.transpose() * x.k;
  d.dbeta = du.dot(r);
  d.dv = x.beta * du;
  d.dk -= S_a * d.dv;
  const RowMatrix dS_a = dS - x.k * d.dv.transpose();
  d.dg = S_a.cwiseProduct(dS_a).sum();
  dS = std::exp(x.g) * dS_a;
  return d;
}

void forward_head(const Head& hd, double scale, RowMatrix& S, Rows o) {
  for (std::int64_t t = 0; t < hd.s.len; ++t) {
    const Token x = hd.token(t);
    step(S, x);
    o.row(t) = (S.transpose() * (scale * x.q)).transpose();
  }
}

void backward_head(const Head& hd, const GdrGeometry& geo, RowMatrix S, const Tensor& d_o, RowMatrix& dS,
                   GdrGrads& grads) {
  std::vector<RowMatrix> checkpoints;  // state before tokens 0, kSegment, 2 kSegment, ...
  for (std::int64_t t = 0; t < hd.s.len; ++t) {
    if (t % kSegment == 0) checkpoints.push_back(S);
    step(S, hd.token(t));
  }
  std::vector<RowMatrix> states(kSegment + 1);  // states[i] = state before token begin + i
  for (auto seg = static_cast<std::int64_t>(checkpoints.size()) - 1; seg >= 0; --seg) {
    const std::int64_t begin = seg * kSegment, len = std::min(kSegment, hd.s.len - begin);
    states[0] = checkpoints[seg];
    for (std::int64_t i = 0; i < len; ++i) {
      states[i + 1] = states[i];
      step(states[i + 1], hd.token(begin + i));
    }
    for (std::int64_t i = len - 1; i >= 0; --i) {
      const std::int64_t t = begin + i;
      const Vec d_o_t = head_rows(d_o, hd.s, hd.h, t, 1).transpose();
      const TokenGrads d = step_backward(hd.token(t), geo.scale, states[i], states[i + 1], d_o_t, dS);
      head_rows(grads.dq, hd.s, hd.kh, t, 1) += d.dq.transpose();
      head_rows(grads.dk, hd.s, hd.kh, t, 1) += d.dk.transpose();
      head_rows(grads.dv, hd.s, hd.h, t, 1) = d.dv.transpose();
      head_gates(grads.dg, hd.s, hd.h, t, 1)(0) = d.dg;
      head_gates(grads.dbeta, hd.s, hd.h, t, 1)(0) = d.dbeta;
    }
  }
}

}  // namespace

GdrOutputs gdr_recurrent_forward(const GdrInputs& in, int threads) {
  const GdrGeometry geo = gdr_geometry(in);
  GdrOutputs out = make_outputs(geo);
  for_each_head_parallel(geo, threads, [&](const Sequence& s, std::int64_t h) {
    RowMatrix S = state_or_zero(in.initial_state, geo, s, h);
    forward_head({in, s, h, geo.key_head(h)}, geo.scale, S, head_rows(out.o, s, h, 0, s.len));
    state_of(out.final_state, s.n, h) = S;
  });
  return out;
}

GdrGrads gdr_recurrent_backward(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht, int threads) {
  const GdrGeometry geo = gdr_geometry(in);
  check_grad_inputs(geo, d_o, dht);
  GdrGrads grads = make_grads(geo);
  for_each_head_parallel(geo, threads, [&](const Sequence& s, std::int64_t h) {
    RowMatrix dS = state_or_zero(dht, geo, s, h);
    backward_head({in, s, h, geo.key_head(h)}, geo, state_or_zero(in.initial_state, geo, s, h), d_o, dS, grads);
    state_of(grads.dh0, s.n, h) = dS;
  });
  finish_qk_grads(in, grads);
  return grads;
}

}  // namespace gdnv::ref
