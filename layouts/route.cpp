#include "layouts/route.hpp"

#include <algorithm>

#include "layouts/partition.hpp"
#include "layouts/validate.hpp"

namespace gdnv::layouts {
namespace {

// Adds each run's overlap with every contiguous span [p*span, (p+1)*span) to counts[p].
void count_per_span(const std::vector<Run>& runs, std::int64_t span, std::vector<std::int64_t>& counts) {
  for (const Run& run : runs) {
    for (std::int64_t at = run.begin; at < run.end();) {
      const std::int64_t peer = at / span;
      const std::int64_t take = std::min(run.end(), (peer + 1) * span) - at;
      counts[static_cast<std::size_t>(peer)] += take;
      at += take;
    }
  }
}

// Appends, for the positions of `run` inside `mine`, their contiguous local rows; returns how many.
std::int64_t append_local_rows(Run run, Run mine, std::vector<std::int64_t>& index) {
  const Run overlap = intersection(run, mine);
  for (std::int64_t p = overlap.begin; p < overlap.end(); ++p) index.push_back(p - mine.begin);
  return overlap.length;
}

Route route_of_checked(std::span<const std::int64_t> cu, int cp_size, int cp_rank) {
  const std::int64_t total = cu.back();
  const Run mine = contiguous_span(total, cp_size, cp_rank);
  Route route{cp_size, cp_rank, std::vector<std::int64_t>(cp_size), std::vector<std::int64_t>(cp_size), {}};
  if (total == 0) return route;
  count_per_span(zigzag_runs(cu, cp_size, cp_rank), mine.length, route.send_counts);
  route.index.reserve(static_cast<std::size_t>(mine.length));
  const auto [first, last] = sequences_overlapping(cu, mine);
  for (int peer = 0; peer < cp_size; ++peer) {
    for (std::size_t i = first; i < last; ++i) {
      const auto [lo, hi] = zigzag_chunks(Run{cu[i], cu[i + 1] - cu[i]}, cp_size, peer);
      route.recv_counts[static_cast<std::size_t>(peer)] +=
          append_local_rows(lo, mine, route.index) + append_local_rows(hi, mine, route.index);
    }
  }
  return route;
}

}  // namespace

bool Route::is_identity() const {
  for (int p = 0; p < cp_size; ++p)
    if (p != cp_rank && (send_counts[static_cast<std::size_t>(p)] || recv_counts[static_cast<std::size_t>(p)]))
      return false;
  for (std::size_t k = 0; k < index.size(); ++k)
    if (index[k] != static_cast<std::int64_t>(k)) return false;
  return true;
}

Route zigzag_contiguous_route(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank) {
  check_cp(cp_size, cp_rank);
  const std::vector<std::int64_t> cu = checked_cu_seqlens(cu_seqlens);
  check_zigzag_lengths(cu_seqlens, cp_size);
  return route_of_checked(cu, cp_size, cp_rank);
}

Route sbhd_zigzag_contiguous_route(std::int64_t seq_len, int cp_size, int cp_rank) {
  check_cp(cp_size, cp_rank);
  check_sbhd_seq_len(Layout::zigzag, seq_len, cp_size);
  const std::int64_t cu[] = {0, seq_len};
  return route_of_checked(checked_cu_seqlens(cu), cp_size, cp_rank);
}

Route zigzag_contiguous_route_unchecked(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank) {
  return route_of_checked(cu_seqlens, cp_size, cp_rank);
}

std::vector<std::int64_t> displacements(std::span<const std::int64_t> counts) {
  std::vector<std::int64_t> out(counts.size());
  std::int64_t at = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    out[p] = at;
    at += counts[p];
  }
  return out;
}

}  // namespace gdnv::layouts
