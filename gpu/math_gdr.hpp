#pragma once
// The chunked gated delta rule over packed sequences (docs/DESIGN.md §1.1) as tasks over the chunk stages
// of gpu/math_gdr_chunk.hpp: q, k L2-normalised first (per row), GVA (value head h reads key head
// h / (Hv/Hk)), chunks of 64 tokens from each sequence's start, h0 for the first sequence only and the
// final state of the last. Sequence offsets are read where the kernel runs (p.cu), never on the host.
#include "gpu/math_gdr_chunk.hpp"

namespace gdnv::gpu {

// ---- q, k L2 norm ------------------------------------------------------------------------------------
// Row `item` of [N * Hk]: x_hat = x r, r = 1 / sqrt(sum x^2 + eps), for q and k.
GDNV_HD void l2norm_row(const GdrParams& p, i64 item) {
  const i64 base = item * p.K;
  float ssq = 0, ssk = 0;
  for (i64 a = 0; a < p.K; ++a) {
    const float q = load(p.q, base + a, p.bf16), k = load(p.k, base + a, p.bf16);
    ssq += q * q;
    ssk += k * k;
  }
  p.rq[item] = 1.0f / sqrt_f(ssq + p.l2_eps);
  p.rk[item] = 1.0f / sqrt_f(ssk + p.l2_eps);
  for (i64 a = 0; a < p.K; ++a) {
    p.qn[base + a] = load(p.q, base + a, p.bf16) * p.rq[item];
    p.kn[base + a] = load(p.k, base + a, p.bf16) * p.rk[item];
  }
}

// The gradient w.r.t. x_hat to that w.r.t. x: dx = r (dx_hat - x_hat (x_hat . dx_hat)), for q and k.
GDNV_HD void l2norm_backward_row(const GdrParams& p, i64 item) {
  const i64 base = item * p.K;
  const float dot_q = dot(&p.qn[base], &p.dqn[base], p.K), dot_k = dot(&p.kn[base], &p.dkn[base], p.K);
  for (i64 a = 0; a < p.K; ++a) {
    store(p.dq, base + a, p.rq[item] * (p.dqn[base + a] - p.qn[base + a] * dot_q), p.bf16);
    store(p.dk, base + a, p.rk[item] * (p.dkn[base + a] - p.kn[base + a] * dot_k), p.bf16);
  }
}

// ---- sequences and chunks -------------------------------------------------------------------------------
GDNV_HD i64 chunk_count(const GdrParams& p, i64 s) { return (p.cu[s + 1] - p.cu[s] + kChunk - 1) / kChunk; }

GDNV_HD ChunkAt chunk_at(const GdrParams& p, i64 s, i64 j, i64 h) {
  const i64 begin = p.cu[s] + j * kChunk, end = p.cu[s + 1];
  return {begin, end - begin < kChunk ? end - begin : kChunk, h, h / (p.Hv / p.Hk)};
}

// Slot of chunk j of sequence s in p.states: sequences before s hold sum ceil(L_i / 64) <=
// floor((cu[s] + 63 s) / 64) chunks, so the slots are disjoint and computed from cu[s] alone.
GDNV_HD i64 chunk_slot(const GdrParams& p, i64 s, i64 j) { return (p.cu[s] + (kChunk - 1) * s) / kChunk + j; }
GDNV_HD i64 chunk_slots_for(i64 N, i64 n) { return (N + (kChunk - 1) * n) / kChunk + 1; }

GDNV_HD void copy_state(const float* from, float* to, i64 n) {
  for (i64 e = 0; e < n; ++e) to[e] = from ? from[e] : 0.0f;
}

// ---- forward: task (sequence s, key head kh) over its GVA group ---------------------------------------
GDNV_HD void gdr_forward_task(const GdrParams& p, i64 task) {
  const i64 s = task / p.Hk, kh = task % p.Hk, group = p.Hv / p.Hk, KV = p.K * p.V;
  ChunkWork w = carve_work(p.work + task * p.work_stride, p.K, p.V);
  for (i64 h = kh * group; h < (kh + 1) * group; ++h) {
    copy_state(s == 0 && p.h0 ? p.h0 + h * KV : nullptr, w.S, KV);
    for (i64 j = 0; j < chunk_count(p, s); ++j) {
      const ChunkAt ch = chunk_at(p, s, j, h);
      chunk_intra(p, ch, w);
      chunk_new_values(p, ch, w, w.S, p.V, p.V);
      chunk_output(p, ch, w, w.S);
      chunk_advance(p, ch, w, w.S, p.V);
    }
    if (s == p.n - 1) copy_state(w.S, p.final_state + h * KV, KV);
  }
}

// ---- backward: one forward sweep saves each chunk's entering state, the reverse sweep recomputes the
// intra stage and v_new and turns dS (the final state's gradient) into the initial state's --------------
GDNV_HD void gdr_backward_task(const GdrParams& p, i64 task) {
  const i64 s = task / p.Hk, kh = task % p.Hk, group = p.Hv / p.Hk, KV = p.K * p.V;
  ChunkWork w = carve_work(p.work + task * p.work_stride, p.K, p.V);
  for (i64 h = kh * group; h < (kh + 1) * group; ++h) {
    float* saved = p.states + h * p.chunk_slots * KV;
    copy_state(s == 0 && p.h0 ? p.h0 + h * KV : nullptr, w.S, KV);
    for (i64 j = 0; j < chunk_count(p, s); ++j) {
      const ChunkAt ch = chunk_at(p, s, j, h);
      copy_state(w.S, saved + chunk_slot(p, s, j) * KV, KV);
      chunk_intra(p, ch, w);
      chunk_new_values(p, ch, w, w.S, p.V, p.V);
      chunk_advance(p, ch, w, w.S, p.V);
    }
    copy_state(s == p.n - 1 && p.dht ? p.dht + h * KV : nullptr, w.dS, KV);
    for (i64 j = chunk_count(p, s) - 1; j >= 0; --j) {
      const ChunkAt ch = chunk_at(p, s, j, h);
      const float* S = saved + chunk_slot(p, s, j) * KV;
      chunk_intra(p, ch, w);
      chunk_new_values(p, ch, w, S, p.V, p.V);
      chunk_backward(p, ch, w, S);
    }
    if (s == 0) copy_state(w.dS, p.dh0 + h * KV, KV);
  }
}

// ---- chunkwise CP's span maps, task = value head; [h | M] per head into p.maps [Hv, K, V+K] ------------
// Identity M beside a zero h: X = [0 | I].
GDNV_HD void identity_map(float* X, i64 K, i64 V) {
  for (i64 a = 0; a < K; ++a)
    for (i64 col = 0; col < V + K; ++col) X[a * (V + K) + col] = col == V + a ? 1.0f : 0.0f;
}

// The LAST sequence's forward span map from a zero state: X = [h_ext | M] advanced through its chunks.
GDNV_HD void gdr_last_span_map_task(const GdrParams& p, i64 h) {
  const i64 s = p.n - 1, width = p.V + p.K, per_head = p.K * width;
  ChunkWork w = carve_work(p.work + h * p.work_stride, p.K, p.V);
  identity_map(w.S, p.K, p.V);
  for (i64 j = 0; j < chunk_count(p, s); ++j) {
    const ChunkAt ch = chunk_at(p, s, j, h);
    chunk_intra(p, ch, w);
    chunk_new_values(p, ch, w, w.S, width, p.V);
    chunk_advance(p, ch, w, w.S, width);
  }
  copy_state(w.S, p.maps + h * per_head, per_head);
}

// The FIRST sequence's backward span map for d_o: X = [dh_ext | M^T] taken back through its chunks, last
// first; stored as [dh_ext | M].
GDNV_HD void gdr_first_backward_span_map_task(const GdrParams& p, i64 h) {
  const i64 K = p.K, V = p.V, width = V + K;
  ChunkWork w = carve_work(p.work + h * p.work_stride, K, V);
  identity_map(w.S, K, V);
  for (i64 j = chunk_count(p, 0) - 1; j >= 0; --j) {
    const ChunkAt ch = chunk_at(p, 0, j, h);
    chunk_intra(p, ch, w);
    chunk_fold_backward(p, ch, w, w.S);
  }
  float* out = p.maps + h * K * width;
  for (i64 a = 0; a < K; ++a)
    for (i64 col = 0; col < width; ++col)
      out[a * width + col] = col < V ? w.S[a * width + col] : w.S[(col - V) * width + V + a];
}

// Head h: Forward S = M_j S + h_j for j = begin .. end-1 from zero, Backward dS = M_j^T dS + h_j for
// j = end-1 .. begin.
GDNV_HD void fold_span_maps_task(const FoldParams& p, i64 h) {
  const i64 K = p.K, V = p.V, width = V + K;
  const bool forward = p.direction == FoldDirection::Forward;
  float* S = p.out + h * K * V;
  float* next = p.work + h * K * V;
  for (i64 e = 0; e < K * V; ++e) S[e] = 0.0f;
  for (int step = 0; step < p.end - p.begin; ++step) {
    const int j = forward ? p.begin + step : p.end - 1 - step;
    const float* map = p.maps + (j * p.Hv + h) * K * width;
    for (i64 a = 0; a < K; ++a)
      for (i64 col = 0; col < V; ++col) {
        float x = 0;
        for (i64 b = 0; b < K; ++b) x += (forward ? map[a * width + V + b] : map[b * width + V + a]) * S[b * V + col];
        next[a * V + col] = x + map[a * width + col];
      }
    for (i64 e = 0; e < K * V; ++e) S[e] = next[e];
  }
}

}  // namespace gdnv::gpu
