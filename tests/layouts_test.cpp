// White-box tests of layouts/: the worked examples of docs/DESIGN.md §2, the external Megatron-Core and FLA vectors,
// the halo and headwise index maps on hand-checked geometries, and every validation message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.hpp"
#include "core/vectors.hpp"
#include "layouts/apply.hpp"
#include "layouts/chunkwise_context.hpp"
#include "layouts/headwise.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"
#include "layouts/upstream_vectors.hpp"

namespace gdnv::layouts {
namespace {

using Ints = std::vector<std::int64_t>;
using nlohmann::json;

// The integers [begin, end).
Ints range(std::int64_t begin, std::int64_t end) {
  Ints out(static_cast<std::size_t>(end - begin));
  std::iota(out.begin(), out.end(), begin);
  return out;
}

Ints concat(std::initializer_list<Ints> parts) {
  Ints out;
  for (const Ints& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

template <class F>
std::string config_error_of(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// --- fixed examples (docs/DESIGN.md §2) ---

TEST(LayoutsFixed, TwoSequencesAtW2GiveTheDesignExampleForRank0) {
  const Ints cu = {0, 16, 40};
  EXPECT_EQ(thd_partition(Layout::zigzag, cu, 2, 0).positions(),
            concat({range(0, 4), range(12, 16), range(16, 22), range(34, 40)}));
  EXPECT_EQ(thd_partition(Layout::contiguous, cu, 2, 0).positions(), range(0, 20));
}

TEST(LayoutsFixed, RouteOfRank0ForThreeShortSequencesAtW2) {
  const Route route = zigzag_contiguous_route(Ints{0, 8, 12, 16}, 2, 0);
  EXPECT_EQ(route.index, (Ints{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(route.send_counts, (Ints{4, 4}));
  EXPECT_EQ(route.recv_counts, (Ints{4, 4}));
  EXPECT_FALSE(route.is_identity());
}

TEST(LayoutsFixed, SbhdW3SwapMovesWholeChunks) {
  constexpr std::int64_t chunk = 5;  // S = 2W chunks of 5 tokens
  EXPECT_EQ(sbhd_zigzag_contiguous_route(6 * chunk, 3, 0).send_counts, (Ints{chunk, 0, chunk}));
  EXPECT_EQ(sbhd_zigzag_contiguous_route(6 * chunk, 3, 1).recv_counts, (Ints{0, 0, 2 * chunk}));
}

TEST(LayoutsFixed, ZeroLengthSegmentsAreDropped) {
  const Ints with_empty = {0, 16, 16, 40, 40, 40}, plain = {0, 16, 40};
  for (int r = 0; r < 2; ++r) {
    for (Layout layout : {Layout::zigzag, Layout::contiguous})
      EXPECT_EQ(thd_partition(layout, with_empty, 2, r).positions(), thd_partition(layout, plain, 2, r).positions());
    const Route a = zigzag_contiguous_route(with_empty, 2, r), b = zigzag_contiguous_route(plain, 2, r);
    EXPECT_EQ(a.index, b.index);
    EXPECT_EQ(a.send_counts, b.send_counts);
    EXPECT_EQ(chunkwise_context(with_empty, 2, r, 4).local_cu_seqlens,
              chunkwise_context(plain, 2, r, 4).local_cu_seqlens);
  }
}

TEST(LayoutsFixed, RouteAtW1IsIdentity) {
  const Route route = zigzag_contiguous_route(Ints{0, 6, 10}, 1, 0);
  EXPECT_TRUE(route.is_identity());
  EXPECT_EQ(route.index, range(0, 10));
  EXPECT_EQ(route.send_counts, Ints{10});
}

// Nothing is split at W = 1: every length is legal, odd ones too, in both formats, and the route is
// the identity; W = 2 still needs multiples of 4.
TEST(LayoutsFixed, ZigzagAtW1HoldsEverySequenceWholeWhateverItsLength) {
  EXPECT_EQ(thd_partition(Layout::zigzag, Ints{0, 5, 14, 17}, 1, 0).positions(), range(0, 17));
  EXPECT_EQ(sbhd_partition(Layout::zigzag, 7, 1, 0).positions(), range(0, 7));
  EXPECT_TRUE(zigzag_contiguous_route(Ints{0, 5, 14}, 1, 0).is_identity());
  EXPECT_TRUE(sbhd_zigzag_contiguous_route(7, 1, 0).is_identity());
  EXPECT_NE(config_error_of([] { thd_partition(Layout::zigzag, Ints{0, 5, 14}, 2, 0); }), "");
  EXPECT_NE(config_error_of([] { sbhd_partition(Layout::zigzag, 7, 2, 0); }), "");
}

TEST(LayoutsFixed, DisplacementsArePrefixSums) { EXPECT_EQ(displacements(Ints{4, 0, 3, 2}), (Ints{0, 4, 4, 7})); }

TEST(LayoutsFixed, RouteAppliesToTensorRowsOfEveryWidth) {
  // cu=[0,8,12,16], W=2, rank 0: contiguous rows hold global positions 0..7; the send order is the index.
  const Route route = zigzag_contiguous_route(Ints{0, 8, 12, 16}, 2, 0);
  std::vector<float> rows;
  for (int g = 0; g < 8; ++g) rows.insert(rows.end(), {float(g), float(-g - 1), float(100 + g)});
  const Tensor contiguous = Tensor::from(rows, {8, 3});
  const Tensor send = gather_to_send_order(route, contiguous);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(send.get(3 * k + 1), -double(route.index[k]) - 1) << "row " << k;
  EXPECT_TRUE(scatter_from_receive_order(route, send).bitwise_equal(contiguous));
}

// --- external vectors ---

// The checks the gate's "layout properties" step runs too (layouts/upstream_vectors.hpp), every field of
// every case.
const VectorSink kExpectEach = [](bool ok, const std::string& label, const std::string& why) {
  EXPECT_TRUE(ok) << label << ": " << why;
};

TEST(LayoutsVectors, MegatronThdRankIndicesReproducedExactly) { EXPECT_EQ(check_megatron_indices(kExpectEach), 22); }

TEST(LayoutsVectors, FlaChunkwiseContextReproducedExactly) { EXPECT_EQ(check_fla_contexts(kExpectEach), 31); }

// A context that differs from FLA's in one field is named by that field (the first/last-rank flags too).
TEST(LayoutsVectors, FlaContextDifferenceNamesTheField) {
  const json c = vector_cases("fla_cp_context.json").at(0);
  ChunkwiseContext ctx =
      chunkwise_context(c["cu_seqlens"].get<Ints>(), c["cp_size"].get<int>(), c["cp_rank"].get<int>(), 4);
  EXPECT_EQ(fla_context_difference(ctx, c), "");
  ctx.is_last_rank = !ctx.is_last_rank;
  EXPECT_EQ(fla_context_difference(ctx, c), std::string("is_last_rank ") + (ctx.is_last_rank ? "true" : "false") +
                                                ", FLA's " + c["is_last_rank"].dump());
  ctx.is_first_rank = !ctx.is_first_rank;
  EXPECT_TRUE(fla_context_difference(ctx, c).starts_with("is_first_rank ")) << fla_context_difference(ctx, c);
}

// --- conv halo ---

void expect_piece(const HaloPiece& piece, int rank, std::int64_t local_begin, std::int64_t global_begin,
                  std::int64_t length) {
  EXPECT_EQ(piece.rank, rank);
  EXPECT_EQ(piece.local_begin, local_begin);
  EXPECT_EQ(piece.global_begin, global_begin);
  EXPECT_EQ(piece.length, length);
}

TEST(LayoutsHalo, HaloComesFromThePreviousRankWithinTheSequence) {
  // cu=[0,5,12], W=3: spans of 4; rank 2 = [8,12) continues sequence [5,12), 3 tokens of it before the span.
  const ChunkwiseContext ctx = chunkwise_context(Ints{0, 5, 12}, 3, 2, 4);
  ASSERT_EQ(ctx.halo.size(), 1u);
  expect_piece(ctx.halo[0], 1, 1, 5, 3);
  EXPECT_EQ(ctx.halo_tokens(), 3);
  // A conv of width 2 needs only the one token before the span.
  const ChunkwiseContext narrow = chunkwise_context(Ints{0, 5, 12}, 3, 2, 2);
  ASSERT_EQ(narrow.halo.size(), 1u);
  expect_piece(narrow.halo[0], 1, 3, 7, 1);
}

TEST(LayoutsHalo, HaloSpansSeveralRanksWhenSpansAreShorterThanTheConv) {
  // One sequence of 12 over W=6: spans of 2; rank 3 = [6,8) needs tokens 3,4,5 from ranks 1 and 2.
  const ChunkwiseContext ctx = chunkwise_context(Ints{0, 12}, 6, 3, 4);
  ASSERT_EQ(ctx.halo.size(), 2u);
  expect_piece(ctx.halo[0], 1, 1, 3, 1);
  expect_piece(ctx.halo[1], 2, 0, 4, 2);
}

TEST(LayoutsHalo, NoHaloAtASequenceStartOrWidthOne) {
  EXPECT_TRUE(chunkwise_context(Ints{0, 4, 12}, 3, 1, 4).halo.empty());  // rank 1 = [4,8) starts sequence [4,12)
  EXPECT_TRUE(chunkwise_context(Ints{0, 12}, 3, 1, 1).halo.empty());
}

// --- headwise ---

TEST(LayoutsHeadwise, InProjRowsOfRank1AreItsKeyAndValueHeadsPerSection) {
  // Hk=4, Hv=8, tp=2 -> hk=2, hv=4 TP-local; cp=2 -> rank 1 has key head 1 and value heads 2,3.
  // Sections (dk=2, dv=3): q [0,4) k [4,8) v [8,20) z [20,32) beta [32,36) alpha [36,40).
  const HeadwiseGeometry g{4, 8, 2, 3, 2, 2};
  EXPECT_EQ(in_proj_rows_of(g, 1),
            concat({range(2, 4), range(6, 8), range(14, 20), range(26, 32), range(34, 36), range(38, 40)}));
  EXPECT_EQ(conv_channels_of(g, 1), concat({range(2, 4), range(6, 8), range(14, 20)}));
  EXPECT_EQ(value_head_indices_of(g, 1), (Ints{2, 3}));
  EXPECT_EQ(in_proj_row_permutation(g).size(), 40u);
}

TEST(LayoutsHeadwise, SourceMajorOrderOfTwoRanks) {
  // cu=[0,8], W=2: rank 0 holds 0,1,6,7 and rank 1 holds 2,3,4,5; received rank-major.
  EXPECT_EQ(source_major_from_natural(Ints{0, 8}, 2), (Ints{0, 1, 6, 7, 2, 3, 4, 5}));
  EXPECT_EQ(natural_from_source_major(Ints{0, 8}, 2), (Ints{0, 1, 4, 5, 6, 7, 2, 3}));
  EXPECT_EQ(sbhd_source_major_from_natural(8, 2), source_major_from_natural(Ints{0, 8}, 2));
}

// --- validation: every error names the bad values and the fix ---

TEST(LayoutsErrors, UnknownLayout) {
  EXPECT_EQ(config_error_of([] { parse_layout("ring"); }), "unknown layout 'ring'; use zigzag or contiguous");
}

TEST(LayoutsErrors, CpSizeBelowOne) {
  EXPECT_EQ(config_error_of([] {
              thd_partition(Layout::zigzag, Ints{0, 8}, 0, 0);
            }),
            "cp_size must be at least 1, got 0; use 1 for no context parallelism");
}

TEST(LayoutsErrors, CpRankOutOfRange) {
  EXPECT_EQ(config_error_of([] {
              zigzag_contiguous_route(Ints{0, 8}, 2, 2);
            }),
            "cp_rank 2 is out of range for cp_size 2; use a rank in [0, 1]");
  EXPECT_EQ(config_error_of([] {
              chunkwise_context(Ints{0, 8}, 4, -1, 4);
            }),
            "cp_rank -1 is out of range for cp_size 4; use a rank in [0, 3]");
}

TEST(LayoutsErrors, CuSeqlensEmpty) {
  EXPECT_EQ(config_error_of([] { thd_partition(Layout::contiguous, Ints{}, 2, 0); }),
            "cu_seqlens is empty; give the packed sequence boundaries starting at 0, e.g. 0,16,40");
}

TEST(LayoutsErrors, CuSeqlensNotStartingAtZero) {
  EXPECT_EQ(config_error_of([] {
              thd_partition(Layout::contiguous, Ints{4, 16}, 2, 0);
            }),
            "cu_seqlens must start at 0, got [4, 16]; prepend 0");
}

TEST(LayoutsErrors, CuSeqlensDecreasing) {
  EXPECT_EQ(config_error_of([] {
              zigzag_contiguous_route(Ints{0, 16, 12, 20}, 2, 0);
            }),
            "cu_seqlens decreases at index 2 (16 -> 12) in [0, 16, 12, 20]; boundaries must be cumulative sums of "
            "the sequence lengths");
}

TEST(LayoutsErrors, LengthsNotDivisibleByTwiceCpListsEachOffender) {
  EXPECT_EQ(config_error_of([] {
              thd_partition(Layout::zigzag, Ints{0, 6, 14, 24}, 2, 0);
            }),
            "zigzag layout needs every sequence length divisible by 2*cp_size = 4; not divisible: sequence 0 "
            "(length 6), sequence 2 (length 10); pad each sequence to a multiple of 4");
}

TEST(LayoutsErrors, ManyOffendingLengthsAreCounted) {
  Ints cu = {0};
  for (int i = 0; i < 11; ++i) cu.push_back(cu.back() + 3);
  const std::string message = config_error_of([&] { zigzag_contiguous_route(cu, 2, 0); });
  EXPECT_NE(message.find("sequence 7 (length 3) and 3 more; pad each sequence to a multiple of 4"), std::string::npos)
      << message;
}

TEST(LayoutsErrors, TokenTotalNotDivisibleByCpForContiguous) {
  EXPECT_EQ(config_error_of([] {
              thd_partition(Layout::contiguous, Ints{0, 16, 40}, 3, 0);
            }),
            "contiguous layout needs the token total divisible by cp_size = 3, got 40 tokens; pad the packed buffer "
            "to 42 tokens");
  EXPECT_EQ(config_error_of([] {
              chunkwise_context(Ints{0, 5, 11}, 4, 0, 4);
            }),
            "contiguous layout needs the token total divisible by cp_size = 4, got 11 tokens; pad the packed buffer "
            "to 12 tokens");
}

TEST(LayoutsErrors, SbhdSeqLenNotDivisible) {
  EXPECT_EQ(config_error_of([] { sbhd_partition(Layout::zigzag, 10, 3, 0); }),
            "SBHD zigzag layout needs seq_len divisible by 2*cp_size = 6, got 10; pad the sequence to 12 tokens");
  EXPECT_EQ(config_error_of([] { sbhd_zigzag_contiguous_route(-6, 3, 0); }), "seq_len must be >= 0, got -6");
}

TEST(LayoutsErrors, LocalLengthDiffersFromPartition) {
  const Partition p = thd_partition(Layout::zigzag, Ints{0, 16, 40}, 2, 1);
  EXPECT_NO_THROW(check_local_length(p, 20));
  EXPECT_EQ(config_error_of([&] { check_local_length(p, 40); }),
            "local tensor has 40 tokens but cp rank 1 of 2 holds 20 of the 40 tokens under the zigzag layout; shard "
            "the input with the same cu_seqlens, layout and cp_size");
}

TEST(LayoutsErrors, TensorRowsDifferFromRoute) {
  const Route route = zigzag_contiguous_route(Ints{0, 8, 12, 16}, 2, 0);
  EXPECT_EQ(config_error_of([&] {
              gather_to_send_order(route, Tensor(DType::F32, {6, 2}));
            }),
            "the contiguous local tensor has shape [6, 2] but the route of cp rank 0 of 2 moves 8 rows; build the "
            "route from this micro-batch's cu_seqlens");
}

TEST(LayoutsErrors, ConvWidthBelowOne) {
  EXPECT_EQ(config_error_of([] {
              chunkwise_context(Ints{0, 8}, 2, 0, 0);
            }),
            "conv width must be at least 1, got 0; use the model's linear_conv_kernel_dim (4 by default)");
}

TEST(LayoutsErrors, HeadwiseHeadsNotDivisibleByTpTimesCp) {
  EXPECT_EQ(config_error_of([] {
              in_proj_rows_of(HeadwiseGeometry{4, 8, 2, 2, 2, 4}, 0);
            }),
            "headwise CP needs Hk and Hv divisible by tp*cp = 8, got Hk=4 Hv=8; use a cp size that divides Hk/tp, or "
            "the chunkwise mode");
  EXPECT_EQ(config_error_of([] {
              check_headwise(HeadwiseGeometry{4, 6, 2, 2, 1, 1});
            }),
            "Hv must be a multiple of Hk for grouped value heads, got Hk=4 Hv=6; choose Hv = m*Hk");
  EXPECT_EQ(config_error_of([] {
              in_proj_row_permutation(HeadwiseGeometry{4, 8, 2, 2, 1, 0});
            }),
            "tp and cp must be at least 1, got tp=1 cp=0");
}

TEST(LayoutsErrors, RowIndexOutsideTensor) {
  EXPECT_EQ(config_error_of([] {
              gather_rows(Tensor(DType::F32, {3, 2}), Ints{0, 3});
            }),
            "row index 3 at position 1 is outside a tensor of 3 rows");
  EXPECT_EQ(config_error_of([] { inverse_permutation(Ints{0, 2, 2}); }), "not a permutation of [0, 3): entry 2 is 2");
}

}  // namespace
}  // namespace gdnv::layouts
