#pragma once
// What rank r of the chunkwise CP mode needs to know about its contiguous span [r*T/W, (r+1)*T/W) of the
// packed buffer (docs/DESIGN.md §3; FLA get_cp_cu_seqlens / build_cp_context semantics): the rank-local
// cu_seqlens of the sequence pieces in the span, how far its first and last local sequences reach into
// other ranks (the state fold runs over ranks [r - pre_num_ranks, r); the backward fold over
// (r, r + post_num_ranks]), and where the conv halo comes from.
#include <cstdint>
#include <span>
#include <vector>

namespace gdnv::layouts {

// Halo tokens [global_begin, global_begin + length) held by an earlier rank at its contiguous local rows
// [local_begin, local_begin + length).
struct HaloPiece {
  int rank;
  std::int64_t local_begin, global_begin, length;
};

struct ChunkwiseContext {
  int cp_size, cp_rank;
  std::int64_t conv_width;
  std::vector<std::int64_t> local_cu_seqlens;  // [0, ..., T/W]
  int pre_num_ranks;                           // earlier ranks the first local sequence continues from
  int post_num_ranks;                          // later ranks the last local sequence continues into
  bool is_first_rank, is_last_rank;            // pre_num_ranks == 0, post_num_ranks == 0
  std::int64_t pre_num_conv_tokens;            // tokens of the first local sequence before the span
  // The min(conv_width - 1, pre_num_conv_tokens) tokens just before the span, in global order; several
  // pieces when spans are shorter than the conv width.
  std::vector<HaloPiece> halo;

  std::int64_t halo_tokens() const;
};

// Validates (ConfigError: cp, cu_seqlens, token total % cp_size, conv_width >= 1) and drops zero-length
// segments.
ChunkwiseContext chunkwise_context(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank,
                                   std::int64_t conv_width);
// Unchecked, for callers that validated already (cu_seqlens as checked_cu_seqlens returns, its total divisible
// by cp_size, conv_width >= 1).
ChunkwiseContext chunkwise_context_unchecked(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank,
                                             std::int64_t conv_width);

}  // namespace gdnv::layouts
