#include "cost/cost.hpp"

#include <cmath>
#include <numeric>

namespace gdnv::cost {
namespace {

double d(std::int64_t n) { return static_cast<double>(n); }

void record(PhaseCost& phase, CallCost call) {
  comm::Traffic& t = phase.comm[call.kind];
  ++t.calls;
  t.bytes_sent += static_cast<std::uint64_t>(call.sent);
  t.bytes_recv += static_cast<std::uint64_t>(call.recv);
  phase.calls.push_back(call);
}

// The TP all-reduce of a [N, width] tensor (column-parallel in_proj backward, row-parallel out_proj).
void tp_all_reduce(const CostContext& cc, PhaseCost& phase, std::int64_t n, std::int64_t esize) {
  if (cc.tp > 1) count_all_reduce(cc, phase, Group::Tp, n, esize);
}

// GdnCpLayer::reduce_grads: out_norm's gradient summed over TP, then every parameter gradient over CP.
void reduce_grads_cost(const CostContext& cc, PhaseCost& phase) {
  const MixerGeometry& m = cc.local;
  tp_all_reduce(cc, phase, m.dv, cc.s);
  if (cc.c == 1) return;
  std::vector<std::int64_t> grads{
      cc.hidden, m.in_dim() * cc.hidden, cc.hidden * m.v_dim(), m.conv_dim() * m.W, m.Hv, m.Hv, m.dv};
  if (cc.conv_bias) grads.push_back(m.conv_dim());
  for (std::int64_t n : grads) count_all_reduce(cc, phase, Group::Cp, n, cc.s);
}

}  // namespace

double PhaseCost::flops() const {
  double f = 0;
  for (const OpCost& op : ops) f += op.flops;
  return f;
}

double PhaseCost::bytes() const {
  double b = 0;
  for (const OpCost& op : ops) b += op.bytes;
  return b;
}

CostContext::CostContext(const CostGeometry& geometry, RankPlace place)
    : g(geometry),
      at(place),
      c(geometry.cp_size),
      tp(geometry.cp.tp),
      e(static_cast<std::int64_t>(dtype_size(geometry.dtype))),
      s(static_cast<std::int64_t>(dtype_size(state_dtype_for(geometry.dtype)))),
      hidden(geometry.config.hidden()),
      T(geometry.cu.back()),
      N_loc(geometry.cu.back() / geometry.cp_size),
      local{geometry.config.Hk() / geometry.cp.tp,
            geometry.config.Hv() / geometry.cp.tp,
            geometry.config.dk(),
            geometry.config.dv(),
            geometry.config.W(),
            geometry.config.eps(),
            1.0 / std::sqrt(static_cast<double>(geometry.config.dk()))},
      conv_bias(geometry.config.conv_bias()) {
  for (std::size_t i = 1; i < geometry.cu.size(); ++i)
    if (geometry.cu[i] > geometry.cu[i - 1]) lengths.push_back(geometry.cu[i] - geometry.cu[i - 1]);
}

std::int64_t CostContext::input_copy_bytes() const { return g.format == Format::Sbhd ? N_loc * hidden * e : 0; }

void count_all_to_all_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& send_counts,
                        const std::vector<std::int64_t>& recv_counts, std::int64_t esize) {
  std::int64_t sent = 0, recv = 0;
  for (int p = 0; p < cc.c; ++p)
    if (p != cc.at.cp_rank) {
      sent += send_counts[p] * esize;
      recv += recv_counts[p] * esize;
    }
  record(phase, {comm::Collective::AllToAllV, Group::Cp, cc.c, sent, recv});
}

void count_all_gather_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& counts,
                        std::int64_t esize) {
  const std::int64_t mine = counts[cc.at.cp_rank];
  const std::int64_t others = std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) - mine;
  record(phase, {comm::Collective::AllGather, Group::Cp, cc.c, (cc.c - 1) * mine * esize, others * esize});
}

void count_reduce_scatter_v(const CostContext& cc, PhaseCost& phase, const std::vector<std::int64_t>& counts,
                            std::int64_t esize) {
  const std::int64_t mine = counts[cc.at.cp_rank];
  const std::int64_t others = std::accumulate(counts.begin(), counts.end(), std::int64_t{0}) - mine;
  record(phase, {comm::Collective::ReduceScatter, Group::Cp, cc.c, others * esize, (cc.c - 1) * mine * esize});
}

void count_all_reduce(const CostContext& cc, PhaseCost& phase, Group group, std::int64_t n, std::int64_t esize) {
  const int size = group == Group::Tp ? cc.tp : cc.c, rank = group == Group::Tp ? cc.at.tp_rank : cc.at.cp_rank;
  // Reduce-scatter of the balanced partition (rank p owns [p n / size, (p+1) n / size)), then
  // all-gather of the summed parts: the rank sends every other part once and its own to every peer.
  const std::int64_t own = n * (rank + 1) / size - n * rank / size;
  const std::int64_t bytes = ((n - own) + (size - 1) * own) * esize;
  record(phase, {comm::Collective::AllReduce, group, size, bytes, bytes});
}

std::int64_t in_proj_forward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N) {
  const auto z = cc.sizes();
  phase.ops.push_back(memory_cost(2 * z.e * d(N * cc.hidden) + z.s * d(N)));  // rmsnorm
  phase.ops.push_back(linear_cost(z, N, cc.hidden, cc.local.in_dim()));
  return N * cc.hidden * cc.e + N * cc.s;  // x = rmsnorm(h) * ln_w, rstd
}

void in_proj_backward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N) {
  const auto z = cc.sizes();
  phase.ops.push_back(linear_backward_cost(z, N, cc.hidden, cc.local.in_dim()));
  tp_all_reduce(cc, phase, N * cc.hidden, cc.e);
  phase.ops.push_back(memory_cost(3 * z.e * d(N * cc.hidden) + z.s * d(N)));  // rmsnorm backward
}

std::int64_t mixer_core_inputs_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                                    const std::vector<std::int64_t>& lengths) {
  const auto z = cc.sizes();
  const std::int64_t N = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  phase.ops.push_back(memory_cost(2 * z.e * d(N * m.in_dim())));  // section gathers
  phase.ops.push_back(conv_cost(z, N, m.conv_dim(), m.W));
  phase.ops.push_back(memory_cost(2 * z.e * d(N * m.conv_dim())));                  // q, k, v gathers
  phase.ops.push_back(memory_cost(2 * z.e * d(N * m.Hv) + 2 * z.s * d(N * m.Hv)));  // gates
  // Kept: p, its sections qkv, z, b, a, the conv output and its q, k, v, and the gates g, beta.
  return N * cc.e * (m.in_dim() + m.conv_dim() + m.v_dim() + 2 * m.Hv + m.conv_dim() + 2 * m.qk_dim() + m.v_dim()) +
         2 * N * m.Hv * cc.s;
}

std::int64_t mixer_core_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                             const std::vector<std::int64_t>& lengths) {
  const auto z = cc.sizes();
  const std::int64_t N = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  phase.ops.push_back(gdr_cost(z, lengths, m.Hk, m.Hv, m.dk, m.dv));
  phase.ops.push_back(memory_cost(3 * z.e * d(N * m.v_dim()) + z.s * d(N * m.Hv)));  // gated norm
  return N * m.v_dim() * cc.e + N * m.Hv * cc.s;                                     // o, the norm's rstd
}

void mixer_norm_backward_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m, std::int64_t N) {
  phase.ops.push_back(memory_cost(5 * cc.sizes().e * d(N * m.v_dim())));
}

void mixer_core_backward_cost(const CostContext& cc, PhaseCost& phase, const MixerGeometry& m,
                              const std::vector<std::int64_t>& lengths) {
  const auto z = cc.sizes();
  const std::int64_t N = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
  phase.ops.push_back(gdr_backward_cost(z, lengths, m.Hk, m.Hv, m.dk, m.dv));
  phase.ops.push_back(memory_cost(4 * z.e * d(N * m.Hv) + 2 * z.s * d(N * m.Hv)));  // gates backward
  phase.ops.push_back(memory_cost(2 * z.e * d(N * m.conv_dim())));                  // dq, dk, dv scatters
  phase.ops.push_back(conv_backward_cost(z, N, m.conv_dim(), m.W));
  phase.ops.push_back(memory_cost(2 * z.e * d(N * m.in_dim())));  // dp scatters
}

void out_proj_forward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N) {
  phase.ops.push_back(linear_cost(cc.sizes(), N, cc.local.v_dim(), cc.hidden));
  tp_all_reduce(cc, phase, N * cc.hidden, cc.e);
}

void out_proj_backward_cost(const CostContext& cc, PhaseCost& phase, std::int64_t N) {
  phase.ops.push_back(linear_backward_cost(cc.sizes(), N, cc.local.v_dim(), cc.hidden));
}

RankCost layer_cost(const CostGeometry& geometry, RankPlace at) {
  const CostContext cc(geometry, at);
  RankCost cost;
  if (cc.c == 1) cost = plain_cost(cc);
  else if (geometry.cp.mode == CpMode::Headwise) cost = headwise_cost(cc);
  else if (geometry.cp.mode == CpMode::AllGather) cost = all_gather_cost(cc);
  else cost = chunkwise_cost(cc);
  reduce_grads_cost(cc, cost.backward);
  return cost;
}

double layer_flops(const ref::LayerConfig& config, const std::vector<std::int64_t>& lengths) {
  CostGeometry geometry{.config = config, .cp = {}, .dtype = DType::F64, .format = Format::Thd, .cu = {0}};
  for (std::int64_t L : lengths) geometry.cu.push_back(geometry.cu.back() + L);
  const RankCost cost = layer_cost(geometry, {});
  return cost.forward.flops() + cost.backward.flops();
}

}  // namespace gdnv::cost
