#include "layouts/partition.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace gdnv::layouts {
namespace {

// Appends `run`, merging it into the last run when they touch, so a partition's runs are maximal.
void append_run(std::vector<Run>& runs, Run run) {
  if (run.length == 0) return;
  if (!runs.empty() && runs.back().end() == run.begin) runs.back().length += run.length;
  else runs.push_back(run);
}

std::int64_t total_length(const std::vector<Run>& runs) {
  std::int64_t n = 0;
  for (const Run& run : runs) n += run.length;
  return n;
}

Partition make_partition(Layout layout, int cp_size, int cp_rank, std::int64_t total_tokens, std::vector<Run> runs) {
  const std::int64_t local_tokens = total_length(runs);
  return Partition{layout, cp_size, cp_rank, total_tokens, local_tokens, std::move(runs)};
}

}  // namespace

std::vector<std::int64_t> Partition::positions() const { return positions_of(runs); }

std::vector<std::int64_t> positions_of(std::span<const Run> runs) {
  std::vector<std::int64_t> out;
  for (const Run& run : runs)
    for (std::int64_t p = run.begin; p < run.end(); ++p) out.push_back(p);
  return out;
}

Run contiguous_span(std::int64_t total_tokens, int cp_size, int cp_rank) {
  const std::int64_t span = total_tokens / cp_size;
  return Run{cp_rank * span, span};
}

std::pair<Run, Run> zigzag_chunks(Run seq, int cp_size, int cp_rank) {
  if (cp_size == 1) return {seq, Run{seq.end(), 0}};  // nothing is split: any length, odd ones too
  const std::int64_t cl = seq.length / (2 * std::int64_t{cp_size});
  return {Run{seq.begin + cp_rank * cl, cl}, Run{seq.begin + (2 * std::int64_t{cp_size} - 1 - cp_rank) * cl, cl}};
}

std::vector<Run> zigzag_runs(std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank) {
  std::vector<Run> runs;
  runs.reserve(2 * (cu_seqlens.size() - 1));
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const auto [first, second] = zigzag_chunks(Run{cu_seqlens[i], cu_seqlens[i + 1] - cu_seqlens[i]}, cp_size, cp_rank);
    append_run(runs, first);
    append_run(runs, second);
  }
  return runs;
}

std::pair<std::size_t, std::size_t> sequences_overlapping(std::span<const std::int64_t> cu_seqlens, Run span) {
  const auto ends = cu_seqlens.subspan(1);
  const auto first = static_cast<std::size_t>(std::upper_bound(ends.begin(), ends.end(), span.begin) - ends.begin());
  std::size_t last = first;
  while (last + 1 < cu_seqlens.size() && cu_seqlens[last] < span.end()) ++last;
  return {first, last};
}

Run intersection(Run a, Run b) {
  const std::int64_t begin = std::max(a.begin, b.begin), end = std::min(a.end(), b.end());
  return Run{begin, std::max<std::int64_t>(0, end - begin)};
}

Partition thd_partition(Layout layout, std::span<const std::int64_t> cu_seqlens, int cp_size, int cp_rank) {
  check_cp(cp_size, cp_rank);
  const std::vector<std::int64_t> cu = checked_cu_seqlens(cu_seqlens);
  const std::int64_t total = cu.back();
  if (layout == Layout::zigzag) {
    check_zigzag_lengths(cu_seqlens, cp_size);
    return make_partition(layout, cp_size, cp_rank, total, zigzag_runs(cu, cp_size, cp_rank));
  }
  check_contiguous_total(total, cp_size);
  std::vector<Run> runs;
  append_run(runs, contiguous_span(total, cp_size, cp_rank));
  return make_partition(layout, cp_size, cp_rank, total, std::move(runs));
}

Partition sbhd_partition(Layout layout, std::int64_t seq_len, int cp_size, int cp_rank) {
  check_cp(cp_size, cp_rank);
  check_sbhd_seq_len(layout, seq_len, cp_size);
  const std::int64_t cu[] = {0, seq_len};
  return thd_partition(layout, cu, cp_size, cp_rank);
}

void check_local_length(const Partition& partition, std::int64_t local_tokens) {
  if (local_tokens == partition.local_tokens) return;
  throw ConfigError("local tensor has " + std::to_string(local_tokens) + " tokens but cp rank " +
                    std::to_string(partition.cp_rank) + " of " + std::to_string(partition.cp_size) + " holds " +
                    std::to_string(partition.local_tokens) + " of the " + std::to_string(partition.total_tokens) +
                    " tokens under the " + std::string(layout_name(partition.layout)) +
                    " layout; shard the input with the same cu_seqlens, layout and cp_size");
}

}  // namespace gdnv::layouts
