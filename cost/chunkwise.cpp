// The cost of cp/chunkwise.cpp: the route swap zigzag <-> contiguous (one all-to-all each way, in each
// direction), the layer on this rank's contiguous span of T/cp tokens, and the two exchanges that cross
// span boundaries: the conv halo (all-gather of every rank's tail; its gradient reduce-scattered back)
// and the (M, h_ext) state maps (all-gathered once per direction). Both run on every rank or on none:
// only when some span starts inside a sequence. Everything here is derived from the geometry by
// interval arithmetic, independently of layouts/'s route and context builders; the zigzag rows a rank
// holds are the partition's own (layouts::zigzag_runs).
#include <algorithm>

#include "cost/cost.hpp"
#include "layouts/partition.hpp"

namespace gdnv::cost {
namespace {

struct Interval {
  std::int64_t begin, end;
};

std::int64_t overlap(Interval a, Interval b) {
  return std::max<std::int64_t>(0, std::min(a.end, b.end) - std::max(a.begin, b.begin));
}

std::int64_t tokens_in(const std::vector<layouts::Run>& runs, Interval span) {
  std::int64_t n = 0;
  for (const layouts::Run& r : runs) n += overlap({r.begin, r.end()}, span);
  return n;
}

// The sequence containing position x strictly inside it (not at its start), or none.
const Interval* sequence_around(const std::vector<Interval>& seqs, std::int64_t x) {
  for (const Interval& s : seqs)
    if (s.begin < x && x < s.end) return &s;
  return nullptr;
}

struct Span {
  std::int64_t n;                    // tokens per span, T / cp
  std::vector<Interval> seqs;        // non-empty sequences, global positions
  std::vector<std::int64_t> pieces;  // lengths of the sequence pieces in this rank's span
  int pre = 0, post = 0;             // earlier / later ranks the first / last local sequence reaches
  bool any_continues = false;        // some rank's span starts inside a sequence

  Interval of(int p) const { return {p * n, (p + 1) * n}; }
  int pre_of(int p) const {
    const Interval* s = sequence_around(seqs, p * n);
    return s ? p - static_cast<int>(s->begin / n) : 0;
  }
};

Span span_of(const CostContext& cc) {
  Span sp{cc.T / cc.c, {}, {}};
  for (std::size_t i = 1; i < cc.g.cu.size(); ++i)
    if (cc.g.cu[i] > cc.g.cu[i - 1]) sp.seqs.push_back({cc.g.cu[i - 1], cc.g.cu[i]});
  const int r = cc.at.cp_rank;
  for (const Interval& s : sp.seqs)
    if (const std::int64_t piece = overlap(s, sp.of(r)); piece > 0) sp.pieces.push_back(piece);
  sp.pre = sp.pre_of(r);
  if (const Interval* s = sequence_around(sp.seqs, (r + 1) * sp.n)) sp.post = static_cast<int>((s->end - 1) / sp.n) - r;
  for (int p = 0; p < cc.c; ++p) sp.any_continues = sp.any_continues || sp.pre_of(p) > 0;
  return sp;
}

// The route swap, zigzag -> contiguous of a [*, width] tensor (`reverse`: contiguous -> zigzag).
void route_swap(const CostContext& cc, const Span& sp, PhaseCost& phase, bool reverse) {
  // Rank p holds chunks p and 2cp-1-p of 2cp of every sequence (layouts::zigzag_runs).
  const std::vector<layouts::Run> mine = layouts::zigzag_runs(cc.g.cu, cc.c, cc.at.cp_rank);
  std::vector<std::int64_t> to_span, from_span;  // elements this rank's zigzag rows give to / take from
  for (int p = 0; p < cc.c; ++p) {
    to_span.push_back(tokens_in(mine, sp.of(p)) * cc.hidden);
    from_span.push_back(tokens_in(layouts::zigzag_runs(cc.g.cu, cc.c, p), sp.of(cc.at.cp_rank)) * cc.hidden);
  }
  if (reverse) std::swap(to_span, from_span);
  count_all_to_all_v(cc, phase, to_span, from_span, cc.e);
}

}  // namespace

RankCost chunkwise_cost(const CostContext& cc) {
  const Span sp = span_of(cc);
  const MixerGeometry& m = cc.local;
  const auto z = cc.sizes();
  const bool halo_exchange = sp.any_continues && m.W > 1;
  const std::int64_t tail = std::min(m.W - 1, sp.n);
  const std::vector<std::int64_t> tails(static_cast<std::size_t>(cc.c), tail * m.conv_dim());
  const std::vector<std::int64_t> maps(static_cast<std::size_t>(cc.c), m.Hv * m.dk * (m.dv + m.dk));
  RankCost cost;
  cost.route_builds = 1;

  PhaseCost& fwd = cost.forward;
  route_swap(cc, sp, fwd, false);
  cost.saved_bytes = sp.n * cc.hidden * cc.e + in_proj_forward_cost(cc, fwd, sp.n);  // the span's h, x, rstd
  if (halo_exchange) count_all_gather_v(cc, fwd, tails, cc.e);
  if (sp.pre > 0 && m.W > 1) cost.saved_bytes += (m.W - 1) * m.conv_dim() * cc.e;  // the halo
  cost.saved_bytes += mixer_core_inputs_cost(cc, fwd, m, sp.pieces);
  if (sp.any_continues) {
    if (sp.post > 0) fwd.ops.push_back(span_map_cost(z, sp.pieces.back(), m.Hk, m.Hv, m.dk, m.dv));
    count_all_gather_v(cc, fwd, maps, cc.s);
  }
  if (sp.pre > 0) {
    fwd.ops.push_back(fold_cost(z, sp.pre, m.Hv, m.dk, m.dv));
    cost.saved_bytes += m.Hv * m.dk * m.dv * cc.s;  // h0
  }
  cost.saved_bytes += mixer_core_cost(cc, fwd, m, sp.pieces) + sp.n * m.v_dim() * cc.e;  // + y
  out_proj_forward_cost(cc, fwd, sp.n);
  route_swap(cc, sp, fwd, true);

  PhaseCost& bwd = cost.backward;
  route_swap(cc, sp, bwd, false);
  out_proj_backward_cost(cc, bwd, sp.n);
  mixer_norm_backward_cost(cc, bwd, m, sp.n);
  if (sp.any_continues) {
    if (sp.pre > 0) bwd.ops.push_back(span_map_cost(z, sp.pieces.front(), m.Hk, m.Hv, m.dk, m.dv));
    count_all_gather_v(cc, bwd, maps, cc.s);
    if (sp.post > 0) bwd.ops.push_back(fold_cost(z, sp.post, m.Hv, m.dk, m.dv));
  }
  mixer_core_backward_cost(cc, bwd, m, sp.pieces);
  if (halo_exchange) count_reduce_scatter_v(cc, bwd, tails, cc.e);
  in_proj_backward_cost(cc, bwd, sp.n);
  route_swap(cc, sp, bwd, true);
  return cost;
}

}  // namespace gdnv::cost
