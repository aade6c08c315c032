#pragma once
// fp64 oracle of the gated delta rule (docs/DESIGN.md §1.1, FLA chunk_gated_delta_rule semantics).
// Two independent forms: recurrent (slow, obviously correct) and chunked WY/UT (fast).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.hpp"

namespace gdnv::ref {

struct GdrInputs {
  Tensor q;                                             // [B, T, Hk, K]  F64
  Tensor k;                                             // [B, T, Hk, K]  F64
  Tensor v;                                             // [B, T, Hv, V]  F64
  Tensor g;                                             // [B, T, Hv]     F64, log decay
  Tensor beta;                                          // [B, T, Hv]     F64
  std::optional<Tensor> initial_state;                  // [N, Hv, K, V]  F64
  std::optional<std::vector<std::int64_t>> cu_seqlens;  // [N + 1], only with B == 1
  std::optional<double> scale;                          // default 1/sqrt(K)
  bool use_qk_l2norm = false;                           // x / sqrt(sum x^2 + 1e-6) on q and k
};

// The chunked forward's intermediates of every chunk (the state entering it, its intra-chunk stage and
// V_new), for the backward of the same inputs and chunk size: per value head and chunk of c tokens
// K V + 4 c^2 + c (K + 2 V + 1) doubles, 448 KiB at c = 64, K = V = 128 (docs/DESIGN.md §1.1).
struct GdrTape;

struct GdrOutputs {
  Tensor o;                             // [B, T, Hv, V]
  Tensor final_state;                   // [N, Hv, K, V]  (N = B without cu_seqlens)
  std::shared_ptr<const GdrTape> tape;  // the chunked form's, when asked for
};

struct GdrGrads {
  Tensor dq, dk;  // [B, T, Hk, K]  (summed over the value heads of each GVA group)
  Tensor dv;      // [B, T, Hv, V]
  Tensor dg;      // [B, T, Hv]
  Tensor dbeta;   // [B, T, Hv]
  Tensor dh0;     // [N, Hv, K, V]
};

// Validates shapes (throws ConfigError naming the tensor and the fix).
void validate(const GdrInputs& in);

// Both forms run (sequence, key head) pieces on `threads` threads (0: one per core); every piece is
// computed the same way on any thread, so the thread count changes no bit.
GdrOutputs gdr_recurrent_forward(const GdrInputs& in, int threads = 0);
// d_o [B, T, Hv, V]; dht [N, Hv, K, V] optional gradient of final_state.
GdrGrads gdr_recurrent_backward(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht,
                                int threads = 0);

GdrOutputs gdr_chunked_forward(const GdrInputs& in, int chunk_size = 64, int threads = 0, bool keep_tape = false);
// With `tape` (the forward's of these inputs) the backward takes each chunk's intermediates from it instead
// of running the forward's state pass again: the same bits.
GdrGrads gdr_chunked_backward(const GdrInputs& in, const Tensor& d_o, const std::optional<Tensor>& dht,
                              int chunk_size = 64, int threads = 0, const GdrTape* tape = nullptr);
// [B, T, Hv]: the magnitude m_t of the sum dgamma_t that a kernel forming its decays from a cumsum gamma of
// g computes over chunks of chunk_size tokens (no gradient of the final state), every product carrying
// gamma_t counted with its absolute value (docs/DESIGN.md §4, cumsum-decay).
Tensor gdr_dgamma_magnitudes(const GdrInputs& in, const Tensor& d_o, int chunk_size = 64);

}  // namespace gdnv::ref
