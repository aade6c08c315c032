// RapidCheck properties of layouts/ over random packings (zero-length segments and empty packings
// included), W in 1..8, THD and SBHD. Each layout fact is checked against a formula written here from the
// definition, independently of the library; a test-only mutant (the old per-sequence contiguous layout)
// shows the suite rejects a plausible wrong layout.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <numeric>

#include "layouts/apply.hpp"
#include "layouts/chunkwise_context.hpp"
#include "layouts/headwise.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"

namespace gdnv::layouts {
namespace {

using Ints = std::vector<std::int64_t>;

// --- generated packings ---

struct Packing {
  bool sbhd = false;
  int W = 1;
  Ints cu;  // as generated, zero-length segments kept; SBHD: {0, S}
  std::int64_t total() const { return cu.back(); }
};

// Every length a multiple of 2W (as zigzag needs), zero lengths included; SBHD is one sequence.
Packing zigzag_packing() {
  Packing p;
  p.W = *rc::gen::inRange(1, 9);
  p.sbhd = *rc::gen::arbitrary<bool>();
  const int n = p.sbhd ? 1 : *rc::gen::inRange(0, 9);
  p.cu = {0};
  for (int i = 0; i < n; ++i) p.cu.push_back(p.cu.back() + 2 * p.W * *rc::gen::inRange(0, 6));
  return p;
}

// Any lengths, zero included, the last one padded so the total divides by W (as contiguous needs).
Packing contiguous_packing() {
  Packing p;
  p.W = *rc::gen::inRange(1, 9);
  const int n = *rc::gen::inRange(0, 9);
  p.cu = {0};
  for (int i = 0; i < n; ++i) p.cu.push_back(p.cu.back() + *rc::gen::inRange(0, 21));
  if (p.total() % p.W) p.cu.push_back(p.cu.back() + p.W - p.total() % p.W);
  return p;
}

Ints partition_positions(const Packing& p, Layout layout, int r) {
  return (p.sbhd ? sbhd_partition(layout, p.total(), p.W, r) : thd_partition(layout, p.cu, p.W, r)).positions();
}

Route route_of(const Packing& p, int r) {
  return p.sbhd ? sbhd_zigzag_contiguous_route(p.total(), p.W, r) : zigzag_contiguous_route(p.cu, p.W, r);
}

// Index of the (non-empty) sequence holding global position g.
std::size_t sequence_of(const Ints& cu, std::int64_t g) {
  return static_cast<std::size_t>(std::upper_bound(cu.begin(), cu.end(), g) - cu.begin()) - 1;
}

// --- three independent zigzag formulas ---

// (1) Per position, from docs/DESIGN.md §2: chunk c = offset/cl of its sequence goes to rank c (c < W) or
// 2W-1-c, at local row cu_i/W + offset within the rank's two chunks of that sequence.
std::vector<Ints> zigzag_by_owner_formula(const Ints& cu, int W) {
  const std::int64_t T = cu.back();
  std::vector<Ints> held(static_cast<std::size_t>(W), Ints(static_cast<std::size_t>(T / W), -1));
  for (std::int64_t g = 0; g < T; ++g) {
    const std::size_t i = sequence_of(cu, g);
    const std::int64_t cl = (cu[i + 1] - cu[i]) / (2 * W), offset = g - cu[i], c = offset / cl;
    const std::int64_t owner = c < W ? c : 2 * W - 1 - c;
    const std::int64_t row = cu[i] / W + (c < W ? 0 : cl) + offset % cl;
    held[static_cast<std::size_t>(owner)][static_cast<std::size_t>(row)] = g;
  }
  return held;
}

// (2) TransformerEngine thd_partition_indices_kernel: per local row, with local boundaries cu/W,
// global = cu_s*W + index + (seq_len/2) * (index < seq_len/2 ? rank : 2W-2-rank).
Ints zigzag_by_transformer_engine(const Ints& cu, int W, int rank) {
  Ints cu_s(cu.size());
  std::transform(cu.begin(), cu.end(), cu_s.begin(), [&](std::int64_t c) { return c / W; });
  Ints out;
  for (std::int64_t t = 0; t < cu.back() / W; ++t) {
    const std::size_t i = sequence_of(cu_s, t);
    const std::int64_t seq_len = cu_s[i + 1] - cu_s[i], index = t - cu_s[i];
    const std::int64_t offset = index < seq_len / 2 ? rank : 2 * (W - 1) - rank;
    out.push_back(cu_s[i] * W + index + seq_len / 2 * offset);
  }
  return out;
}

// (3) From the segment-intersection routes: rank r receives peer p's rows of span r in p's order, so the
// blocks from p over r = 0..W-1, mapped to global positions, are p's zigzag rows.
std::vector<Ints> zigzag_by_routes(const Packing& p) {
  const std::int64_t span = p.total() / p.W;
  std::vector<Ints> held(static_cast<std::size_t>(p.W));
  for (int r = 0; r < p.W; ++r) {
    const Route route = route_of(p, r);
    std::size_t k = 0;
    for (int peer = 0; peer < p.W; ++peer)
      for (std::int64_t n = 0; n < route.recv_counts[static_cast<std::size_t>(peer)]; ++n, ++k)
        held[static_cast<std::size_t>(peer)].push_back(r * span + route.index[k]);
  }
  return held;
}

// --- the in-process all-to-all-v ---

std::size_t row_bytes(const Tensor& t) { return t.dim(0) ? t.nbytes() / static_cast<std::size_t>(t.dim(0)) : 0; }

// send[src] holds counts[src][dst] rows for each dst in turn; returns what each dst receives, sources in order.
std::vector<Tensor> all_to_all_v(const std::vector<Tensor>& send, const std::vector<Ints>& counts, std::int64_t width) {
  const std::size_t W = send.size();
  std::vector<Tensor> recv;
  for (std::size_t dst = 0; dst < W; ++dst) {
    std::int64_t rows = 0;
    for (std::size_t src = 0; src < W; ++src) rows += counts[src][dst];
    Tensor out(DType::I64, {rows, width});
    std::size_t at = 0;
    for (std::size_t src = 0; src < W; ++src) {
      const std::size_t rb = row_bytes(send[src]);
      const std::size_t from = static_cast<std::size_t>(displacements(counts[src])[dst]) * rb;
      const std::size_t n = static_cast<std::size_t>(counts[src][dst]) * rb;
      if (n) std::memcpy(out.bytes() + at, send[src].bytes() + from, n);  // an empty tensor's bytes() is null
      at += n;
    }
    recv.push_back(std::move(out));
  }
  return recv;
}

// Rows (g, -1-g) for each global position g: every row distinct, every column non-constant.
Tensor tagged_rows(const Ints& positions) {
  std::vector<std::int64_t> values;
  for (std::int64_t g : positions) values.insert(values.end(), {g, -1 - g});
  return Tensor::from(values, {static_cast<std::int64_t>(positions.size()), 2});
}

Ints first_column(const Tensor& t) {
  Ints out;
  for (std::int64_t k = 0; k < t.dim(0); ++k) out.push_back(t.data<std::int64_t>()[2 * k]);
  return out;
}

Ints iota(std::int64_t begin, std::int64_t n) {
  Ints out(static_cast<std::size_t>(n));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

// --- the property bodies, parameterised by the layout under test so the mutant can run them too ---

using LayoutFn = std::function<Ints(const Packing&, Layout, int rank)>;

const LayoutFn library_layout = partition_positions;

// The old, wrong per-sequence contiguous layout: chunk c of 2W of every sequence goes to rank c/2.
Ints per_sequence_contiguous_mutant(const Packing& p, Layout layout, int r) {
  if (layout == Layout::zigzag) return partition_positions(p, layout, r);
  Ints out;
  for (std::size_t i = 0; i + 1 < p.cu.size(); ++i) {
    const std::int64_t cl = (p.cu[i + 1] - p.cu[i]) / (2 * p.W);
    for (std::int64_t g = p.cu[i] + 2 * r * cl; g < p.cu[i] + (2 * r + 2) * cl; ++g) out.push_back(g);
  }
  return out;
}

void every_token_held_once_in_increasing_order(const LayoutFn& layout_of, const Packing& p) {
  for (Layout layout : {Layout::zigzag, Layout::contiguous}) {
    Ints seen(static_cast<std::size_t>(p.total()), 0);
    for (int r = 0; r < p.W; ++r) {
      const Ints held = layout_of(p, layout, r);
      RC_ASSERT(std::is_sorted(held.begin(), held.end()));
      RC_ASSERT(static_cast<std::int64_t>(held.size()) * p.W == p.total());
      for (std::int64_t g : held) {
        RC_ASSERT(g >= 0 && g < p.total());
        ++seen[static_cast<std::size_t>(g)];
      }
    }
    RC_ASSERT(std::all_of(seen.begin(), seen.end(), [](std::int64_t n) { return n == 1; }));
  }
}

// FLA's convention: the packed buffer cut into W spans, so concatenating ranks 0..W-1 gives 0..T-1.
void contiguous_is_the_packed_buffer_cut_in_rank_order(const LayoutFn& layout_of, const Packing& p) {
  Ints all;
  for (int r = 0; r < p.W; ++r) {
    const Ints held = layout_of(p, Layout::contiguous, r);
    all.insert(all.end(), held.begin(), held.end());
  }
  RC_ASSERT(all == iota(0, p.total()));
}

// Zigzag buffers of tagged rows through the route and the in-process all-to-all land in the contiguous
// layout; the same route brings them back bit-exact.
void route_round_trip_is_identity(const LayoutFn& layout_of, const Packing& p) {
  std::vector<Route> routes;
  std::vector<Tensor> zigzag;
  std::vector<Ints> send_counts, recv_counts;
  for (int r = 0; r < p.W; ++r) {
    routes.push_back(route_of(p, r));
    zigzag.push_back(tagged_rows(layout_of(p, Layout::zigzag, r)));
    send_counts.push_back(routes.back().send_counts);
    recv_counts.push_back(routes.back().recv_counts);
  }
  const std::vector<Tensor> received = all_to_all_v(zigzag, send_counts, 2);
  std::vector<Tensor> send_back;
  for (int r = 0; r < p.W; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const Tensor contiguous = scatter_from_receive_order(routes[ur], received[ur]);
    RC_ASSERT(first_column(contiguous) == layout_of(p, Layout::contiguous, r));
    send_back.push_back(gather_to_send_order(routes[ur], contiguous));
  }
  const std::vector<Tensor> back = all_to_all_v(send_back, recv_counts, 2);
  for (int r = 0; r < p.W; ++r)
    RC_ASSERT(back[static_cast<std::size_t>(r)].bitwise_equal(zigzag[static_cast<std::size_t>(r)]));
}

// The chunkwise context's local sequences are the contiguous rows split where the sequence changes.
void chunkwise_sequences_match_contiguous_rows(const LayoutFn& layout_of, const Packing& p) {
  for (int r = 0; r < p.W; ++r) {
    const Ints held = layout_of(p, Layout::contiguous, r);
    Ints boundaries{0};
    for (std::size_t k = 1; k < held.size(); ++k)
      if (sequence_of(p.cu, held[k]) != sequence_of(p.cu, held[k - 1]) || held[k] != held[k - 1] + 1)
        boundaries.push_back(static_cast<std::int64_t>(k));
    if (!held.empty()) boundaries.push_back(static_cast<std::int64_t>(held.size()));
    RC_ASSERT(chunkwise_context(p.cu, p.W, r, 4).local_cu_seqlens == boundaries);
  }
}

// --- partitions, routes, formulas ---

RC_GTEST_PROP(LayoutsProperties, EveryTokenHeldByExactlyOneRankInIncreasingOrder, ()) {
  every_token_held_once_in_increasing_order(library_layout, zigzag_packing());
}

RC_GTEST_PROP(LayoutsProperties, ContiguousIsThePackedBufferCutInRankOrder, ()) {
  contiguous_is_the_packed_buffer_cut_in_rank_order(library_layout, zigzag_packing());
  contiguous_is_the_packed_buffer_cut_in_rank_order(library_layout, contiguous_packing());
}

RC_GTEST_PROP(LayoutsProperties, RouteForwardThenBackwardIsIdentity, ()) {
  const Packing p = zigzag_packing();
  route_round_trip_is_identity(library_layout, p);
  // Not a vacuous pass: with W > 1 and tokens, some rows change rank.
  if (p.W > 1 && p.total() > 0) RC_ASSERT(!route_of(p, 0).is_identity());
}

RC_GTEST_PROP(LayoutsProperties, ChunkwiseSequencesMatchContiguousRows, ()) {
  chunkwise_sequences_match_contiguous_rows(library_layout, zigzag_packing());
  chunkwise_sequences_match_contiguous_rows(library_layout, contiguous_packing());
}

RC_GTEST_PROP(LayoutsProperties, SendCountMatrixIsTransposeOfReceiveCountMatrix, ()) {
  const Packing p = zigzag_packing();
  std::vector<Route> routes;
  for (int r = 0; r < p.W; ++r) routes.push_back(route_of(p, r));
  for (std::size_t a = 0; a < routes.size(); ++a) {
    for (std::size_t b = 0; b < routes.size(); ++b) RC_ASSERT(routes[a].send_counts[b] == routes[b].recv_counts[a]);
    const Ints& send = routes[a].send_counts;
    RC_ASSERT(std::accumulate(send.begin(), send.end(), std::int64_t{0}) * p.W == p.total());
  }
}

// Nothing is split at W = 1: any lengths, odd ones too, are legal and held whole, in natural order.
RC_GTEST_PROP(LayoutsProperties, RouteAtW1IsIdentityWithNothingMoved, ()) {
  Packing p = zigzag_packing();
  const int n = static_cast<int>(p.cu.size()) - 1;
  p.W = 1;
  p.cu = {0};
  for (int i = 0; i < n; ++i) p.cu.push_back(p.cu.back() + *rc::gen::inRange(0, 12));
  RC_ASSERT(partition_positions(p, Layout::zigzag, 0) == iota(0, p.total()));
  const Route route = route_of(p, 0);
  RC_ASSERT(route.is_identity());
  RC_ASSERT(route.index == iota(0, p.total()));
  RC_ASSERT(route.send_counts == Ints{p.total()});
  RC_ASSERT(route.recv_counts == Ints{p.total()});
}

RC_GTEST_PROP(LayoutsProperties, ThreeZigzagIndexFormulasAgree, ()) {
  const Packing p = zigzag_packing();
  const std::vector<Ints> by_owner = zigzag_by_owner_formula(p.cu, p.W), by_route = zigzag_by_routes(p);
  for (int r = 0; r < p.W; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const Ints by_te = zigzag_by_transformer_engine(p.cu, p.W, r);
    RC_ASSERT(by_owner[ur] == by_te);
    RC_ASSERT(by_route[ur] == by_te);
    RC_ASSERT(partition_positions(p, Layout::zigzag, r) == by_te);
  }
}

// --- the mutant: the suite must reject the old per-sequence contiguous layout ---

TEST(LayoutsProperties, SuiteRejectsPerSequenceContiguousMutant) {
  const LayoutFn mutant = per_sequence_contiguous_mutant;
  std::cout << "Expected failures follow: the properties run on the per-sequence contiguous mutant.\n";
  // Coverage alone cannot tell the two contiguous layouts apart; the mutant passes it.
  EXPECT_TRUE(rc::check("mutant covers every token once",
                        [&] { every_token_held_once_in_increasing_order(mutant, zigzag_packing()); }));
  EXPECT_FALSE(rc::check("mutant is the packed buffer cut in rank order",
                         [&] { contiguous_is_the_packed_buffer_cut_in_rank_order(mutant, zigzag_packing()); }));
  EXPECT_FALSE(
      rc::check("mutant agrees with the route", [&] { route_round_trip_is_identity(mutant, zigzag_packing()); }));
  EXPECT_FALSE(rc::check("mutant agrees with the chunkwise context",
                         [&] { chunkwise_sequences_match_contiguous_rows(mutant, zigzag_packing()); }));
}

// --- headwise ---

struct HeadwiseCase {
  HeadwiseGeometry g;
  std::int64_t group;  // Hv / Hk
};

HeadwiseCase headwise_case() {
  const int tp = *rc::gen::inRange(1, 4), cp = *rc::gen::inRange(1, 5);
  const std::int64_t Hk = tp * cp * *rc::gen::inRange(1, 4), group = *rc::gen::inRange(1, 4);
  return {HeadwiseGeometry{Hk, Hk * group, *rc::gen::inRange(1, 5), *rc::gen::inRange(1, 5), tp, cp}, group};
}

struct Feature {
  int section;  // 0..5 = q, k, v, z, beta, alpha
  std::int64_t head;
};

// Section and head of a TP-local in_proj row, walking the section sizes.
Feature feature_of_row(const HeadwiseGeometry& g, std::int64_t row) {
  const std::int64_t hk = g.Hk / g.tp, hv = g.Hv / g.tp;
  const std::int64_t dims[6] = {g.dk, g.dk, g.dv, g.dv, 1, 1}, heads[6] = {hk, hk, hv, hv, hv, hv};
  for (int s = 0; s < 6; ++s) {
    if (row < heads[s] * dims[s]) return {s, row / dims[s]};
    row -= heads[s] * dims[s];
  }
  return {-1, -1};
}

// The key head a section's head belongs to (value heads read key head h / group).
std::int64_t key_head_of(const Feature& f, std::int64_t group) { return f.section < 2 ? f.head : f.head / group; }

RC_GTEST_PROP(LayoutsProperties, SectionPermutationGivesRankJItsKeyHeadsAndMatchingValueHeads, ()) {
  const auto [g, group] = headwise_case();
  const Ints perm = in_proj_row_permutation(g);
  const std::int64_t features = 2 * (g.Hk / g.tp) * g.dk + 2 * (g.Hv / g.tp) * g.dv + 2 * (g.Hv / g.tp);
  RC_ASSERT(static_cast<std::int64_t>(perm.size()) == features);
  RC_ASSERT(inverse_permutation(perm).size() == perm.size());  // throws unless a permutation
  const std::int64_t per_rank = g.Hk / (std::int64_t{g.tp} * g.cp), block = features / g.cp;
  for (int j = 0; j < g.cp; ++j) {
    int last_section = 0;
    for (std::int64_t f = j * block; f < (j + 1) * block; ++f) {
      const Feature feature = feature_of_row(g, perm[static_cast<std::size_t>(f)]);
      RC_ASSERT(feature.section >= last_section);  // q, k, v, z, beta, alpha in order
      last_section = feature.section;
      const std::int64_t key = key_head_of(feature, group);
      RC_ASSERT(key >= j * per_rank && key < (j + 1) * per_rank);
    }
  }
}

RC_GTEST_PROP(LayoutsProperties, ConvChannelsAndGateParamsFollowTheSameHeads, ()) {
  const auto [g, group] = headwise_case();
  const std::int64_t per_rank = g.Hk / (std::int64_t{g.tp} * g.cp);
  RC_ASSERT(inverse_permutation(conv_channel_permutation(g)).size() ==
            static_cast<std::size_t>(2 * (g.Hk / g.tp) * g.dk + (g.Hv / g.tp) * g.dv));
  for (int j = 0; j < g.cp; ++j) {
    // Conv channels are the first three in_proj sections, so a channel decodes like a row.
    for (std::int64_t c : conv_channels_of(g, j)) {
      const Feature feature = feature_of_row(g, c);
      RC_ASSERT(feature.section <= 2);
      RC_ASSERT(key_head_of(feature, group) / per_rank == j);
    }
    for (std::int64_t h : value_head_indices_of(g, j)) RC_ASSERT(h / group / per_rank == j);
    RC_ASSERT(static_cast<std::int64_t>(value_head_indices_of(g, j).size()) == per_rank * group);
  }
}

RC_GTEST_PROP(LayoutsProperties, SourceMajorTokenOrderRoundTripsToNaturalOrder, ()) {
  const Packing p = zigzag_packing();
  // The all-to-all's receive buffer: every rank's zigzag rows (owner formula), source rank major.
  Ints received;
  for (const Ints& rows : zigzag_by_owner_formula(p.cu, p.W)) received.insert(received.end(), rows.begin(), rows.end());
  const Tensor tagged = tagged_rows(received);
  const Ints to_natural =
      p.sbhd ? sbhd_natural_from_source_major(p.total(), p.W) : natural_from_source_major(p.cu, p.W);
  const Ints to_source = p.sbhd ? sbhd_source_major_from_natural(p.total(), p.W) : source_major_from_natural(p.cu, p.W);
  const Tensor natural = gather_rows(tagged, to_natural);
  RC_ASSERT(first_column(natural) == iota(0, p.total()));
  RC_ASSERT(gather_rows(natural, to_source).bitwise_equal(tagged));
}

// --- chunkwise context ---

RC_GTEST_PROP(LayoutsProperties, ChunkwiseContextAgreesWithPerPositionDefinitions, ()) {
  const Packing p = contiguous_packing();
  const std::int64_t conv_width = *rc::gen::inRange(1, 7), span = p.total() / p.W;
  for (int r = 0; r < p.W; ++r) {
    const ChunkwiseContext ctx = chunkwise_context(p.cu, p.W, r, conv_width);
    RC_ASSERT(ctx.local_cu_seqlens.back() == span);
    if (span == 0) continue;
    const std::size_t first_seq = sequence_of(p.cu, r * span), last_seq = sequence_of(p.cu, (r + 1) * span - 1);
    // Ranks other than r holding a token of the first / last local sequence.
    int before = 0, after = 0;
    for (int q = 0; q < p.W; ++q) {
      bool holds_first = false, holds_last = false;
      for (std::int64_t g = q * span; g < (q + 1) * span; ++g) {
        holds_first |= sequence_of(p.cu, g) == first_seq;
        holds_last |= sequence_of(p.cu, g) == last_seq;
      }
      before += q < r && holds_first;
      after += q > r && holds_last;
    }
    RC_ASSERT(ctx.pre_num_ranks == before);
    RC_ASSERT(ctx.post_num_ranks == after);
    RC_ASSERT(ctx.is_first_rank == (before == 0));
    RC_ASSERT(ctx.is_last_rank == (after == 0));
    // Halo: the up to conv_width-1 positions right before the span that are in the same sequence, each
    // found at the rank and local row the piece names.
    Ints expected, found;
    for (std::int64_t g = std::max<std::int64_t>(0, r * span - (conv_width - 1)); g < r * span; ++g)
      if (sequence_of(p.cu, g) == first_seq) expected.push_back(g);
    for (const HaloPiece& piece : ctx.halo) {
      RC_ASSERT(piece.rank < r);
      const Ints held = partition_positions(p, Layout::contiguous, piece.rank);
      for (std::int64_t j = 0; j < piece.length; ++j) {
        RC_ASSERT(held[static_cast<std::size_t>(piece.local_begin + j)] == piece.global_begin + j);
        found.push_back(piece.global_begin + j);
      }
    }
    RC_ASSERT(found == expected);
    RC_ASSERT(ctx.halo_tokens() == static_cast<std::int64_t>(expected.size()));
  }
}

}  // namespace
}  // namespace gdnv::layouts
