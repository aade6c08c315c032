#pragma once
// Input validation and tensor access shared by the two gated delta rule forms (and nothing else:
// the forms share no math).
#include <Eigen/Dense>

#include "core/eigen.hpp"
#include "core/parallel.hpp"
#include "reference/gated_delta_rule.hpp"
#include "reference/sequences.hpp"

namespace gdnv::ref::detail {

using Vec = Eigen::VectorXd;
using Rows = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstRows = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using Gates = Eigen::Map<Vec, 0, Eigen::InnerStride<>>;
using ConstGates = Eigen::Map<const Vec, 0, Eigen::InnerStride<>>;

// Sizes of a validated GdrInputs.
struct GdrGeometry {
  std::int64_t B, T, Hk, Hv, K, V, N;
  double scale;
  std::vector<Sequence> seqs;

  std::int64_t key_head(std::int64_t h) const { return h / (Hv / Hk); }  // GVA
};

// Validates (see validate()) and returns the sizes.
GdrGeometry gdr_geometry(const GdrInputs& in);
// d_o [B, T, Hv, V] and dht [N, Hv, K, V] against the geometry.
void check_grad_inputs(const GdrGeometry& geo, const Tensor& d_o, const std::optional<Tensor>& dht);

// Rows [begin, begin + len) of sequence s, head h, of a [B, T, H, D] tensor, as a [len, D] view.
ConstRows head_rows(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len);
Rows head_rows(Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len);
// Entries [begin, begin + len) of sequence s, head h, of a [B, T, H] tensor.
ConstGates head_gates(const Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len);
Gates head_gates(Tensor& x, const Sequence& s, std::int64_t h, std::int64_t begin, std::int64_t len);
// State [K, V] of sequence slot n, head h, of an [N, H, K, V] tensor.
ConstMatrixMap state_of(const Tensor& x, std::int64_t n, std::int64_t h);
MatrixMap state_of(Tensor& x, std::int64_t n, std::int64_t h);
// State [K, V] of sequence s, head h, of an optional [N, H, K, V] tensor; zero when absent.
RowMatrix state_or_zero(const std::optional<Tensor>& x, const GdrGeometry& geo, const Sequence& s, std::int64_t h);

// Calls f(s, h) for every sequence s and value head h, in parallel over (sequence, key head) pieces. The
// value heads of one GVA group run in order on one thread: they sum into the same dq, dk rows.
template <class F>
void for_each_head_parallel(const GdrGeometry& geo, int threads, F&& f) {
  const std::int64_t G = geo.Hv / geo.Hk;
  parallel_for(static_cast<std::int64_t>(geo.seqs.size()) * geo.Hk, threads, [&](std::int64_t piece) {
    const Sequence& s = geo.seqs[static_cast<std::size_t>(piece / geo.Hk)];
    const std::int64_t kh = piece % geo.Hk;
    for (std::int64_t h = kh * G; h < (kh + 1) * G; ++h) f(s, h);
  });
}

// With the in-kernel L2 norm, turns dq, dk w.r.t. the normalised q, k into gradients w.r.t. the inputs.
void finish_qk_grads(const GdrInputs& in, GdrGrads& grads);

// Zero-filled outputs of the right shapes.
GdrOutputs make_outputs(const GdrGeometry& geo);
GdrGrads make_grads(const GdrGeometry& geo);

}  // namespace gdnv::ref::detail
