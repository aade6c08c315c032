#pragma once
// Chunk-local stages of the chunked gated delta rule (docs/DESIGN.md §1.1, WY / UT form) for one chunk of
// c <= 64 tokens of one (sequence, value head), in fp32 plain loops: the math of cpu/gdr_chunk.hpp
// (read it for the derivations) without Eigen, so the kernels run it. With gamma = within-chunk
// cumsum of g and S [K, V] the state entering the chunk:
//   A[i,j] = beta_i (k_i.k_j) e^{gamma_i - gamma_j} (j < i),  [U | W] = (I + A)^-1 [beta V | beta e^gamma K],
//   v_new = U - W S,  O = scale [(e^gamma Q) S + (Q K^T * decay * tril_incl) v_new],
//   S <- e^{gamma_C} S + (e^{gamma_C - gamma} K)^T v_new  =  M S + h_ext.
// Decay factors are products of the per-token e^{g_t}, never differences of fp32 cumsums (as the CPU
// backend: relative error ~c eps instead of eps |gamma|). The span maps reuse the state pass on an
// augmented state [h | M] (K x (V+K)) with U padded by zeros: M_c [h | M] + [h_c | 0] is exactly
// e^{gamma_C} X + k_tail^T ([U | 0] - W X).
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

// One chunk: rows [begin, begin + c) of value head h, reading key head kh.
struct ChunkAt {
  i64 begin, c, h, kh;
};

// A task's scratch, carved from `work_stride` floats (gdr_work_floats). Square [64, 64] blocks are
// indexed [i * kChunk + j]; [c, width] blocks [i * width + col].
struct ChunkWork {
  float *e_g, *e_gamma, *e_tail;            // [c]  e^{g}, e^{gamma}, e^{gamma_C - gamma}
  float *d_gamma, *tail, *dg_span, *dbeta;  // [c]  backward sums
  float *decay, *KKd, *A, *P;               // [c, c]  decay_ij = e^{gamma_i - gamma_j} (j <= i)
  float *dP, *dA, *H;                       // [c, c]  backward
  float* UW;                                // [c, V+K]  [U | W]
  float* d_b;                               // [c, V+K]  backward
  float* v_new;                             // [c, V+K]  (width V, or V+K for the span maps)
  float* S;                                 // [K, V+K]  state (augmented for the span maps)
  float *dS, *dS_in;                        // [K, V]
  float* q_eff;                             // [c, K]  e^gamma Q - P W (backward span map)
  float* dk_c;                              // [c, K]
  float* dv_new;                            // [c, V]
  float e_C;                                //         e^{gamma_C}
};

GDNV_HD i64 gdr_work_floats(i64 K, i64 V) {
  const i64 c = kChunk;
  return 7 * c + 7 * c * c + 3 * c * (V + K) + K * (V + K) + 2 * K * V + 2 * c * K + c * V;
}

GDNV_HD ChunkWork carve_work(float* base, i64 K, i64 V) {
  const i64 c = kChunk;
  ChunkWork w{};
  float* p = base;
  const auto take = [&p](i64 n) {
    float* out = p;
    p += n;
    return out;
  };
  w.e_g = take(c), w.e_gamma = take(c), w.e_tail = take(c);
  w.d_gamma = take(c), w.tail = take(c), w.dg_span = take(c), w.dbeta = take(c);
  w.decay = take(c * c), w.KKd = take(c * c), w.A = take(c * c), w.P = take(c * c);
  w.dP = take(c * c), w.dA = take(c * c), w.H = take(c * c);
  w.UW = take(c * (V + K)), w.d_b = take(c * (V + K)), w.v_new = take(c * (V + K));
  w.S = take(K * (V + K));
  w.dS = take(K * V), w.dS_in = take(K * V);
  w.q_eff = take(c * K), w.dk_c = take(c * K);
  w.dv_new = take(c * V);
  return w;
}

// ---- inputs of a chunk --------------------------------------------------------------------------------
GDNV_HD const float* q_row(const GdrParams& p, const ChunkAt& ch, i64 i) {
  return &p.qn[((ch.begin + i) * p.Hk + ch.kh) * p.K];
}
GDNV_HD const float* k_row(const GdrParams& p, const ChunkAt& ch, i64 i) {
  return &p.kn[((ch.begin + i) * p.Hk + ch.kh) * p.K];
}
GDNV_HD i64 v_at(const GdrParams& p, const ChunkAt& ch, i64 i, i64 j) {
  return ((ch.begin + i) * p.Hv + ch.h) * p.V + j;
}
GDNV_HD i64 gate_at(const GdrParams& p, const ChunkAt& ch, i64 i) { return (ch.begin + i) * p.Hv + ch.h; }

GDNV_HD float dot(const float* a, const float* b, i64 n) {
  float acc = 0;
  for (i64 i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Row i of e^{gamma_C - gamma} K and of e^gamma Q at column a.
GDNV_HD float k_tail(const GdrParams& p, const ChunkAt& ch, const ChunkWork& w, i64 i, i64 a) {
  return w.e_tail[i] * k_row(p, ch, i)[a];
}
GDNV_HD float q_dec(const GdrParams& p, const ChunkAt& ch, const ChunkWork& w, i64 i, i64 a) {
  return w.e_gamma[i] * q_row(p, ch, i)[a];
}

// ---- intra-chunk stage: everything independent of the entering state ---------------------------------
// e^gamma, e^{gamma_C - gamma}, e^{gamma_C} and decay as products of the per-token e^{g_t}.
GDNV_HD void chunk_decays(const GdrParams& p, const ChunkAt& ch, ChunkWork& w) {
  const i64 c = ch.c;
  float acc = 1;
  for (i64 i = 0; i < c; ++i) {
    w.e_g[i] = exp_f(p.g[gate_at(p, ch, i)]);
    w.e_gamma[i] = acc *= w.e_g[i];
  }
  w.e_C = w.e_gamma[c - 1];
  acc = 1;
  for (i64 i = c - 1; i >= 0; --i) {
    w.e_tail[i] = acc;
    acc *= w.e_g[i];
  }
  for (i64 i = 0; i < c; ++i)
    for (i64 j = 0; j < c; ++j)
      w.decay[i * kChunk + j] = j > i ? 0.0f : j == i ? 1.0f : w.decay[(i - 1) * kChunk + j] * w.e_g[i];
}

// Planted fault DecayCumsumFp32: the same factors as e^{gamma_i - gamma_j} of fp32 cumsums of g, whose
// difference keeps only eps |gamma| of the exponent. e_g holds gamma here (nothing reads it later).
GDNV_HD void chunk_decays_from_cumsum(const GdrParams& p, const ChunkAt& ch, ChunkWork& w) {
  const i64 c = ch.c;
  float* gamma = w.e_g;
  float acc = 0;
  for (i64 i = 0; i < c; ++i) gamma[i] = acc += p.g[gate_at(p, ch, i)];
  for (i64 i = 0; i < c; ++i) {
    w.e_gamma[i] = exp_f(gamma[i]);
    w.e_tail[i] = exp_f(gamma[c - 1] - gamma[i]);
    for (i64 j = 0; j < c; ++j) w.decay[i * kChunk + j] = j > i ? 0.0f : exp_f(gamma[i] - gamma[j]);
  }
  w.e_C = w.e_gamma[c - 1];
}

GDNV_HD void chunk_intra(const GdrParams& p, const ChunkAt& ch, ChunkWork& w) {
  const i64 c = ch.c, K = p.K, V = p.V, UWw = V + K;
  if (p.decay_cumsum) chunk_decays_from_cumsum(p, ch, w);
  else chunk_decays(p, ch, w);
  for (i64 i = 0; i < c; ++i) {
    const float beta = p.beta[gate_at(p, ch, i)];
    for (i64 j = 0; j < c; ++j) {
      const i64 ij = i * kChunk + j;
      w.KKd[ij] = j < i ? dot(k_row(p, ch, i), k_row(p, ch, j), K) * w.decay[ij] : 0.0f;
      w.A[ij] = beta * w.KKd[ij];
      w.P[ij] = j <= i ? dot(q_row(p, ch, i), k_row(p, ch, j), K) * w.decay[ij] : 0.0f;
    }
    for (i64 col = 0; col < V; ++col) w.UW[i * UWw + col] = beta * load(p.v, v_at(p, ch, i, col), p.bf16);
    for (i64 a = 0; a < K; ++a) w.UW[i * UWw + V + a] = beta * w.e_gamma[i] * k_row(p, ch, i)[a];
  }
  // [U | W] = (I + A)^-1 [beta V | beta e^gamma K] by forward substitution (A strictly lower).
  for (i64 i = 1; i < c; ++i)
    for (i64 col = 0; col < UWw; ++col) {
      float sum = w.UW[i * UWw + col];
      for (i64 t = 0; t < i; ++t) sum -= w.A[i * kChunk + t] * w.UW[t * UWw + col];
      w.UW[i * UWw + col] = sum;
    }
}

// ---- state pass -----------------------------------------------------------------------------------------
// v_new [c, width] = [U | 0] - W S for S [K, width]; the first u_cols columns read U.
GDNV_HD void chunk_new_values(const GdrParams& p, const ChunkAt& ch, ChunkWork& w, const float* S, i64 width,
                              i64 u_cols) {
  const i64 K = p.K, V = p.V, UWw = V + K;
  for (i64 i = 0; i < ch.c; ++i)
    for (i64 col = 0; col < width; ++col) {
      float x = col < u_cols ? w.UW[i * UWw + col] : 0.0f;
      for (i64 a = 0; a < K; ++a) x -= w.UW[i * UWw + V + a] * S[a * width + col];
      w.v_new[i * width + col] = x;
    }
}

// S [K, width] <- e^{gamma_C} S + k_tail^T v_new.
GDNV_HD void chunk_advance(const GdrParams& p, const ChunkAt& ch, const ChunkWork& w, float* S, i64 width) {
  for (i64 a = 0; a < p.K; ++a)
    for (i64 col = 0; col < width; ++col) {
      float x = w.e_C * S[a * width + col];
      for (i64 i = 0; i < ch.c; ++i) x += k_tail(p, ch, w, i, a) * w.v_new[i * width + col];
      S[a * width + col] = x;
    }
}

// o [c, V] = scale [q_dec S + P v_new], S [K, V] the entering state; stored to p.o.
GDNV_HD void chunk_output(const GdrParams& p, const ChunkAt& ch, const ChunkWork& w, const float* S) {
  const i64 K = p.K, V = p.V;
  for (i64 i = 0; i < ch.c; ++i)
    for (i64 j = 0; j < V; ++j) {
      float x = 0;
      for (i64 a = 0; a < K; ++a) x += q_dec(p, ch, w, i, a) * S[a * V + j];
      for (i64 t = 0; t <= i; ++t) x += w.P[i * kChunk + t] * w.v_new[t * V + j];
      store(p.o, v_at(p, ch, i, j), p.scale * x, p.bf16);
    }
}

// Folds the chunk's backward span map into the augmented X = [dh | M^T] (K x (V+K)):
// X <- M_c^T X + [scale q_eff^T d_o | 0], with M_c^T X = e^{gamma_C} X - W^T (k_tail X) and
// q_eff = q_dec - P W (o = scale [q_eff S + P U]).
GDNV_HD void chunk_fold_backward(const GdrParams& p, const ChunkAt& ch, ChunkWork& w, float* X) {
  const i64 K = p.K, V = p.V, UWw = V + K, width = V + K, c = ch.c;
  for (i64 i = 0; i < c; ++i)
    for (i64 a = 0; a < K; ++a) {
      float x = q_dec(p, ch, w, i, a);
      for (i64 t = 0; t <= i; ++t) x -= w.P[i * kChunk + t] * w.UW[t * UWw + V + a];
      w.q_eff[i * K + a] = x;
    }
  float* Y = w.v_new;  // [c, V+K] = k_tail X
  for (i64 i = 0; i < c; ++i)
    for (i64 col = 0; col < width; ++col) {
      float y = 0;
      for (i64 a = 0; a < K; ++a) y += k_tail(p, ch, w, i, a) * X[a * width + col];
      Y[i * width + col] = y;
    }
  for (i64 a = 0; a < K; ++a)
    for (i64 col = 0; col < width; ++col) {
      float x = w.e_C * X[a * width + col];
      for (i64 i = 0; i < c; ++i) x -= w.UW[i * UWw + V + a] * Y[i * width + col];
      if (col < V)
        for (i64 i = 0; i < c; ++i) x += w.q_eff[i * K + a] * (p.scale * load(p.d_o, v_at(p, ch, i, col), p.bf16));
      X[a * width + col] = x;
    }
}

// ---- backward of one chunk ---------------------------------------------------------------------------------
// For X_ij = Y_ij e^{gamma_i - gamma_j} and H = dX * X (in w.H): out_t = sum_{i >= t} sum_{j < t} H_ij, the
// gradient w.r.t. g_t through the factors spanning token t, summed directly (no cancelling terms).
GDNV_HD void spanning_sums_into(ChunkWork& w, i64 c, float* out) {
  for (i64 i = c - 2; i >= 0; --i)
    for (i64 j = 0; j < c; ++j) w.H[i * kChunk + j] += w.H[(i + 1) * kChunk + j];
  for (i64 t = 0; t < c; ++t) {
    float sum = 0;
    for (i64 j = 0; j < t; ++j) sum += w.H[t * kChunk + j];
    out[t] += sum;
  }
}

GDNV_HD float scaled_do(const GdrParams& p, const ChunkAt& ch, i64 i, i64 j) {
  return p.scale * load(p.d_o, v_at(p, ch, i, j), p.bf16);
}

// O = scale [q_dec S + P v_new] and S_out = e^{gamma_C} S + k_tail^T v_new: dS_in (their share), dP and
// dv_new from s_do = scale d_o and dS.
GDNV_HD void backward_outputs(const GdrParams& p, const ChunkAt& ch, ChunkWork& w) {
  const i64 c = ch.c, K = p.K, V = p.V;
  for (i64 a = 0; a < K; ++a)
    for (i64 j = 0; j < V; ++j) {
      float x = 0;
      for (i64 i = 0; i < c; ++i) x += q_dec(p, ch, w, i, a) * scaled_do(p, ch, i, j);
      w.dS_in[a * V + j] = x + w.e_C * w.dS[a * V + j];
    }
  for (i64 i = 0; i < c; ++i)
    for (i64 t = 0; t < c; ++t) {
      float x = 0;
      if (t <= i)
        for (i64 j = 0; j < V; ++j) x += scaled_do(p, ch, i, j) * w.v_new[t * V + j];
      w.dP[i * kChunk + t] = x;
    }
  for (i64 t = 0; t < c; ++t)
    for (i64 j = 0; j < V; ++j) {
      float x = 0;
      for (i64 i = t; i < c; ++i) x += w.P[i * kChunk + t] * scaled_do(p, ch, i, j);
      for (i64 a = 0; a < K; ++a) x += k_tail(p, ch, w, t, a) * w.dS[a * V + j];
      w.dv_new[t * V + j] = x;
    }
}

// dq (complete here, into p.dqn) and the outputs' and state's share of dk (w.dk_c); the gradient w.r.t.
// gamma through e^gamma (w.d_gamma), through e^{gamma_C - gamma} (w.tail) and through the decay of P
// (w.dg_span). Returns the gradient w.r.t. every g_t through e^{gamma_C}.
GDNV_HD float backward_queries(const GdrParams& p, const ChunkAt& ch, ChunkWork& w, const float* S) {
  const i64 c = ch.c, K = p.K, V = p.V;
  for (i64 i = 0; i < c; ++i) {
    float* dq = &p.dqn[((ch.begin + i) * p.Hk + ch.kh) * K];
    for (i64 a = 0; a < K; ++a) {
      float d_qdec = 0, d_ktail = 0, dk = 0;
      for (i64 j = 0; j < V; ++j) {
        d_qdec += scaled_do(p, ch, i, j) * S[a * V + j];
        d_ktail += w.v_new[i * V + j] * w.dS[a * V + j];
      }
      float x = w.e_gamma[i] * d_qdec;
      for (i64 t = 0; t <= i; ++t) x += w.dP[i * kChunk + t] * w.decay[i * kChunk + t] * k_row(p, ch, t)[a];
      for (i64 t = i; t < c; ++t) dk += w.dP[t * kChunk + i] * w.decay[t * kChunk + i] * q_row(p, ch, t)[a];
      dq[a] += x;
      w.dk_c[i * K + a] = dk + w.e_tail[i] * d_ktail;
      w.d_gamma[i] += q_dec(p, ch, w, i, a) * d_qdec;
      w.tail[i] += k_tail(p, ch, w, i, a) * d_ktail;
    }
  }
  for (i64 i = 0; i < c; ++i)
    for (i64 j = 0; j < c; ++j) w.H[i * kChunk + j] = w.dP[i * kChunk + j] * w.P[i * kChunk + j];
  spanning_sums_into(w, c, w.dg_span);
  float dg_state = 0;
  for (i64 e = 0; e < K * V; ++e) dg_state += S[e] * w.dS[e];
  return w.e_C * dg_state;
}

// v_new = U - W S: [dU | dW] = [dv_new | -dv_new S^T] and dS_in -= W^T dv_new. Then through
// [U | W] = T [beta V | beta e^gamma K], T = (I + A)^-1: w.d_b <- T^T [dU | dW] by back substitution and
// dA = -(d_b [U | W]^T), strictly lower.
GDNV_HD void backward_solve(const GdrParams& p, const ChunkAt& ch, ChunkWork& w, const float* S) {
  const i64 c = ch.c, K = p.K, V = p.V, UWw = V + K;
  for (i64 i = 0; i < c; ++i) {
    for (i64 j = 0; j < V; ++j) w.d_b[i * UWw + j] = w.dv_new[i * V + j];
    for (i64 a = 0; a < K; ++a) {
      float x = 0;
      for (i64 j = 0; j < V; ++j) x += w.dv_new[i * V + j] * S[a * V + j];
      w.d_b[i * UWw + V + a] = -x;
    }
  }
  for (i64 a = 0; a < K; ++a)
    for (i64 j = 0; j < V; ++j) {
      float x = 0;
      for (i64 i = 0; i < c; ++i) x += w.UW[i * UWw + V + a] * w.dv_new[i * V + j];
      w.dS_in[a * V + j] -= x;
    }
  for (i64 i = c - 2; i >= 0; --i)
    for (i64 col = 0; col < UWw; ++col) {
      float sum = w.d_b[i * UWw + col];
      for (i64 t = i + 1; t < c; ++t) sum -= w.A[t * kChunk + i] * w.d_b[t * UWw + col];
      w.d_b[i * UWw + col] = sum;
    }
  for (i64 i = 0; i < c; ++i)
    for (i64 t = 0; t < c; ++t) w.dA[i * kChunk + t] = t < i ? -dot(&w.d_b[i * UWw], &w.UW[t * UWw], UWw) : 0.0f;
}

// From d_b = [d_bv | d_bk] and dA: dv (stored), dbeta, the rest of dk (into p.dkn) and of d_gamma; with
// A = beta KKd, KKd = (K K^T) * decay below the diagonal: dK += (dKK + dKK^T) K (dA becomes dKK).
GDNV_HD void backward_keys(const GdrParams& p, const ChunkAt& ch, ChunkWork& w) {
  const i64 c = ch.c, K = p.K, V = p.V, UWw = V + K;
  for (i64 i = 0; i < c; ++i) {
    const float beta = p.beta[gate_at(p, ch, i)];
    float dbeta = 0, k_dbk = 0;
    for (i64 j = 0; j < V; ++j) {
      store(p.dv, v_at(p, ch, i, j), beta * w.d_b[i * UWw + j], p.bf16);
      dbeta += load(p.v, v_at(p, ch, i, j), p.bf16) * w.d_b[i * UWw + j];
    }
    for (i64 a = 0; a < K; ++a) {
      k_dbk += k_row(p, ch, i)[a] * w.d_b[i * UWw + V + a];
      w.dk_c[i * K + a] += beta * w.e_gamma[i] * w.d_b[i * UWw + V + a];
    }
    k_dbk *= w.e_gamma[i];
    dbeta += k_dbk;
    w.d_gamma[i] += beta * k_dbk;
    for (i64 t = 0; t < i; ++t) dbeta += w.dA[i * kChunk + t] * w.KKd[i * kChunk + t];
    w.dbeta[i] = dbeta;
  }
  for (i64 i = 0; i < c; ++i)
    for (i64 j = 0; j < c; ++j) w.H[i * kChunk + j] = w.dA[i * kChunk + j] * w.A[i * kChunk + j];
  spanning_sums_into(w, c, w.dg_span);
  for (i64 i = 0; i < c; ++i) {
    const float beta = p.beta[gate_at(p, ch, i)];
    for (i64 t = 0; t < i; ++t) w.dA[i * kChunk + t] *= beta * w.decay[i * kChunk + t];
  }
  for (i64 i = 0; i < c; ++i) {
    float* dk = &p.dkn[((ch.begin + i) * p.Hk + ch.kh) * K];
    for (i64 a = 0; a < K; ++a) {
      float x = w.dk_c[i * K + a];
      for (i64 t = 0; t < c; ++t) {
        const float sym = t < i ? w.dA[i * kChunk + t] : t > i ? w.dA[t * kChunk + i] : 0.0f;
        x += sym * k_row(p, ch, t)[a];
      }
      dk[a] += x;
    }
  }
}

// S [K, V] entering the chunk, w.v_new = U - W S; w.dS enters as the gradient of the leaving state and
// leaves as that of S. Adds dq, dk (w.r.t. the normalised q, k) into p.dqn, p.dkn; writes dv, dg, dbeta.
GDNV_HD void chunk_backward(const GdrParams& p, const ChunkAt& ch, ChunkWork& w, const float* S) {
  for (i64 i = 0; i < ch.c; ++i) w.d_gamma[i] = w.tail[i] = w.dg_span[i] = 0.0f;
  backward_outputs(p, ch, w);
  const float dg_state = backward_queries(p, ch, w, S);
  backward_solve(p, ch, w, S);
  backward_keys(p, ch, w);
  // gamma_i = sum_{t <= i} g_t: dg = reverse cumsum of d_gamma + spanning + exclusive cumsum of tail.
  float rev = 0, excl = 0;
  for (i64 t = ch.c - 1; t >= 0; --t) w.d_gamma[t] = rev += w.d_gamma[t];
  for (i64 t = 0; t < ch.c; ++t) {
    p.dg[gate_at(p, ch, t)] = w.d_gamma[t] + w.dg_span[t] + excl + dg_state;
    p.dbeta[gate_at(p, ch, t)] = w.dbeta[t];
    excl += w.tail[t];
  }
  for (i64 e = 0; e < p.K * p.V; ++e) w.dS[e] = w.dS_in[e];
}

}  // namespace gdnv::gpu
