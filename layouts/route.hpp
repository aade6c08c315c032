#pragma once
// The zigzag <-> contiguous swap as ONE all-to-all-v (docs/DESIGN.md §2), built once per micro-batch on the host
// and reused by every layer and both directions.
//
// Zigzag -> contiguous, on rank r: the send buffer IS the zigzag local buffer (its rows are increasing in
// global position and the contiguous spans are ordered, so the rows for peer 0, 1, ... are consecutive);
// send_counts[p] rows go to peer p. The receive buffer holds recv_counts[p] rows from each peer p in turn,
// each block increasing in global position; receive row k belongs at contiguous local row index[k].
// Contiguous -> zigzag is the mirror: send row k = contiguous local row index[k], send_counts and
// recv_counts swap roles, and the receive buffer IS the zigzag local buffer.
#include <cstdint>
#include <span>
#include <vector>

namespace gdnv::layouts {

struct Route {
  int cp_size, cp_rank;
  std::vector<std::int64_t> send_counts;  // [W] rows to each peer, zigzag -> contiguous
  std::vector<std::int64_t> recv_counts;  // [W] rows from each peer, zigzag -> contiguous
  std::vector<std::int64_t> index;        // [T/W] contiguous local row of each receive-buffer row

  // True when the swap moves nothing: all rows stay on this rank in the same order (always so at W = 1).
  bool is_identity() const;
};

// Validates (ConfigError) and drops zero-length segments. Cost O(num_seqs * W + T/W).
Route zigzag_contiguous_route(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank);
Route sbhd_zigzag_contiguous_route(std::int64_t seq_len, int cp_size, int cp_rank);
// Unchecked, for callers that validated already (cu_seqlens as checked_cu_seqlens returns, lengths zigzag at
// cp_size).
Route zigzag_contiguous_route_unchecked(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank);

// Exclusive prefix sums of per-peer counts: the displacements an all-to-all-v takes.
std::vector<std::int64_t> displacements(std::span<const std::int64_t> counts);

}  // namespace gdnv::layouts
