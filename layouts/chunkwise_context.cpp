#include "layouts/chunkwise_context.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "layouts/partition.hpp"
#include "layouts/validate.hpp"

namespace gdnv::layouts {
namespace {

// The `length` tokens before span `mine`, cut where the spans of earlier ranks meet.
std::vector<HaloPiece> halo_before(Run mine, std::int64_t length) {
  std::vector<HaloPiece> pieces;
  for (std::int64_t at = mine.begin - length; at < mine.begin;) {
    const std::int64_t rank = at / mine.length;
    const std::int64_t take = std::min(mine.begin, (rank + 1) * mine.length) - at;
    pieces.push_back(HaloPiece{static_cast<int>(rank), at - rank * mine.length, at, take});
    at += take;
  }
  return pieces;
}

// Boundaries of sequences [first, last) clamped to `mine`, relative to its start.
std::vector<std::int64_t> local_boundaries(std::span<const std::int64_t> cu, std::size_t first, std::size_t last,
                                           Run mine) {
  std::vector<std::int64_t> local{0};
  for (std::size_t i = first + 1; i < last; ++i) local.push_back(cu[i] - mine.begin);
  local.push_back(mine.length);
  return local;
}

}  // namespace

std::int64_t ChunkwiseContext::halo_tokens() const {
  std::int64_t n = 0;
  for (const HaloPiece& piece : halo) n += piece.length;
  return n;
}

ChunkwiseContext chunkwise_context(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank,
                                   std::int64_t conv_width) {
  check_cp(cp_size, cp_rank);
  if (conv_width < 1)
    throw ConfigError("conv width must be at least 1, got " + std::to_string(conv_width) +
                      "; use the model's linear_conv_kernel_dim (4 by default)");
  const std::vector<std::int64_t> cu = checked_cu_seqlens(cu_seqlens);
  check_contiguous_total(cu.back(), cp_size);
  return chunkwise_context_unchecked(cu, cp_size, cp_rank, conv_width);
}

ChunkwiseContext chunkwise_context_unchecked(std::span<const std::int64_t> cu, int cp_size, int cp_rank,
                                             std::int64_t conv_width) {
  const Run mine = contiguous_span(cu.back(), cp_size, cp_rank);
  ChunkwiseContext ctx{cp_size, cp_rank, conv_width, {0}, 0, 0, true, true, 0, {}};
  if (mine.length == 0) return ctx;

  const auto [first, last] = sequences_overlapping(cu, mine);
  ctx.local_cu_seqlens = local_boundaries(cu, first, last, mine);
  const std::int64_t first_seq_begin = cu[first], last_seq_end = cu[last];
  ctx.pre_num_ranks = cp_rank - static_cast<int>(first_seq_begin / mine.length);
  ctx.post_num_ranks = static_cast<int>((last_seq_end - 1) / mine.length) - cp_rank;
  ctx.is_first_rank = ctx.pre_num_ranks == 0;
  ctx.is_last_rank = ctx.post_num_ranks == 0;
  ctx.pre_num_conv_tokens = mine.begin - first_seq_begin;
  ctx.halo = halo_before(mine, std::min(conv_width - 1, ctx.pre_num_conv_tokens));
  return ctx;
}

}  // namespace gdnv::layouts
