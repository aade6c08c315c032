#pragma once
// Which global token positions each CP rank holds (docs/DESIGN.md §2). W = cp_size, r = cp_rank, T = total tokens.
//   THD zigzag:     per sequence i of length L_i (L_i % 2W == 0), chunk cl = L_i/2W; rank r holds chunk r
//                   then chunk 2W-1-r of every sequence, sequences in order (TransformerEngine
//                   thd_get_partitioned_indices). At W = 1 nothing is split: the one rank holds every
//                   sequence whole, of any length (Megatron leaves a CP=1 batch as it is).
//   THD contiguous: the flattened packed buffer cut into W equal spans [r*T/W, (r+1)*T/W); a sequence may
//                   straddle several ranks (FLA build_cp_context).
//   SBHD:           the THD layouts of a single sequence of length S (zigzag: chunks r and 2W-1-r of 2W;
//                   contiguous: chunks 2r and 2r+1).
// Rank-local order is increasing in global position in every layout.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "layouts/validate.hpp"

namespace gdnv::layouts {

// Global positions [begin, begin + length).
struct Run {
  std::int64_t begin = 0, length = 0;
  std::int64_t end() const { return begin + length; }
};

struct Partition {
  Layout layout;
  int cp_size, cp_rank;
  std::int64_t total_tokens;
  std::int64_t local_tokens;
  std::vector<Run> runs;  // increasing, non-adjacent, in local order

  // Global position of each local row.
  std::vector<std::int64_t> positions() const;
};

// Validates everything (ConfigError) and drops zero-length segments of cu_seqlens.
Partition thd_partition(Layout layout, std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank);
Partition sbhd_partition(Layout layout, std::int64_t seq_len, int cp_size, int cp_rank);

// ConfigError unless a rank-local tensor has exactly the partition's number of tokens.
void check_local_length(const Partition& partition, std::int64_t local_tokens);

// Unchecked building blocks, for callers that validated already (cu_seqlens as checked_cu_seqlens returns).
Run contiguous_span(std::int64_t total_tokens, int cp_size, int cp_rank);
// Chunks r and 2W-1-r of the sequence [seq.begin, seq.end()); at W = 1 the whole sequence and an empty run.
std::pair<Run, Run> zigzag_chunks(Run seq, int cp_size, int cp_rank);
std::vector<Run> zigzag_runs(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank);
// Global position of each row of `runs`, in order (Partition::positions of those runs).
std::vector<std::int64_t> positions_of(std::span<const Run> runs);
// Sequences [first, last) that overlap `span` (first == last when none does).
std::pair<std::size_t, std::size_t> sequences_overlapping(std::span<const std::int64_t> cu_seqlens, Run span);
Run intersection(Run a, Run b);

}  // namespace gdnv::layouts
