#pragma once
// The leaf kernels of the CPU backend in the compute type C (float or double; explicitly instantiated
// for both). Inputs arrive converted from storage, outputs leave in C; the backend class does the
// storage conversions (bf16 rounding) and the argument checks. Arrays are row-major.
#include <cstdint>
#include <vector>

#include "core/span_map.hpp"
#include "cpu/host.hpp"

namespace gdnv::cpu {

using Offsets = std::vector<std::int64_t>;  // [n+1] packed sequence offsets

template <class C>
struct Norm {
  struct Out {
    Array<C> y;     // like x
    Array<C> rstd;  // [rows]
  };
  struct Grads {
    Array<C> dx;  // like x
    Array<C> dz;  // like z (gated norm only)
    Array<C> dw;  // [n]
  };
  // Over rows of n = w.size(): y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
  static Out rmsnorm(const Array<C>& x, const Array<C>& w, double eps);
  static Grads rmsnorm_backward(const Array<C>& dy, const Array<C>& x, const Array<C>& w, const Array<C>& rstd);
  // y = rmsnorm(o) * w * silu(z), z with the layout of o.
  static Out gated(const Array<C>& o, const Array<C>& z, const Array<C>& w, double eps);
  static Grads gated_backward(const Array<C>& dy, const Array<C>& o, const Array<C>& z, const Array<C>& w,
                              const Array<C>& rstd);
};

template <class C>
struct Linear {
  struct Grads {
    Array<C> dx;  // [N, in]
    Array<C> dw;  // [out, in]
  };
  // y [N, out] = x [N, in] w^T, w [out, in].
  static Array<C> forward(const Array<C>& x, const Array<C>& w, std::int64_t in, std::int64_t out);
  static Grads backward(const Array<C>& dy, const Array<C>& x, const Array<C>& w, std::int64_t in, std::int64_t out);
};

template <class C>
struct Conv {
  struct Input {
    Array<C> x;       // [N, D]
    Array<C> weight;  // [D, W]; weight[:, W-1] multiplies the current token
    Array<C> bias;    // [D], or empty
    Array<C> halo;    // [W-1, D] tokens before the first sequence, oldest first, or empty (zeros)
    Offsets cu;
    std::int64_t D, W;
  };
  struct Grads {
    Array<C> dx;     // [N, D]
    Array<C> dw;     // [D, W]
    Array<C> dbias;  // [D], empty without bias
    Array<C> dhalo;  // [W-1, D], empty without halo
  };
  // y = silu(bias + sum_{i<W} weight[:, i] * x[t - (W-1) + i]) within each sequence.
  static Array<C> forward(const Input& in);
  static Grads backward(const Input& in, const Array<C>& dy);
};

template <class C>
struct GateMath {
  struct Out {
    Array<C> g, beta;  // [N, Hv]
  };
  struct Grads {
    Array<C> da, db;            // [N, Hv]
    Array<C> dA_log, ddt_bias;  // [Hv]
  };
  // g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b). `bf16_storage`: the backend stores bf16
  // (where the planted fault GateBf16BeforeExp rounds g and beta to it).
  static Out forward(const Array<C>& a, const Array<C>& b, const Array<C>& A_log, const Array<C>& dt_bias,
                     bool bf16_storage);
  static Grads backward(const Array<C>& dg, const Array<C>& dbeta, const Array<C>& a, const Array<C>& b,
                        const Array<C>& A_log, const Array<C>& dt_bias);
};

template <class C>
struct Gdr {
  struct Input {
    Array<C> q, k;     // [N, Hk, K]  (L2-normalised in the kernel)
    Array<C> v;        // [N, Hv, V]
    Array<C> g, beta;  // [N, Hv]
    Array<C> h0;       // [Hv, K, V] initial state of the first sequence, or empty (zero)
    Offsets cu;
    std::int64_t Hk, Hv, K, V;
    double scale;
    double l2_eps = 1e-6;  // q, k L2 norm: x / sqrt(sum x^2 + l2_eps)
  };
  struct Out {
    Array<C> o;            // [N, Hv, V]
    Array<C> final_state;  // [Hv, K, V] of the last sequence
  };
  struct Grads {
    Array<C> dq, dk;     // [N, Hk, K]  summed over each GVA group
    Array<C> dv;         // [N, Hv, V]
    Array<C> dg, dbeta;  // [N, Hv]
    Array<C> dh0;        // [Hv, K, V] of the first sequence
  };
  static Out forward(const Input& in);
  // Chunkwise CP's span maps, [Hv, K, V+K] = [h | M] per value head (in.h0 ignored):
  //   last_span_map:           h = h_ext of the LAST sequence (its final state from a zero state), M = prod A_t;
  //   first_backward_span_map: h = dh_ext of the FIRST sequence (its initial state's gradient for d_o and a
  //                            zero final-state gradient), M = prod A_t over that sequence.
  static Array<C> last_span_map(const Input& in);
  static Array<C> first_backward_span_map(const Input& in, const Array<C>& d_o);
  // maps [cp, Hv, K, V+K]: S = M_j S + h_j for j = begin .. end-1 from S = 0 (Forward), or
  // dS = M_j^T dS + h_j for j = end-1 .. begin from dS = 0 (Backward); returns [Hv, K, V].
  static Array<C> fold_span_maps(const Array<C>& maps, std::int64_t Hv, std::int64_t K, std::int64_t V, int begin,
                                 int end, FoldDirection direction);
  // d_o [N, Hv, V]; dht [Hv, K, V] gradient of the last sequence's final state, or empty (zero).
  static Grads backward(const Input& in, const Array<C>& d_o, const Array<C>& dht);
};

}  // namespace gdnv::cpu
