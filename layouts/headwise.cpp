#include "layouts/headwise.hpp"

#include <string>

#include "core/error.hpp"
#include "layouts/partition.hpp"

namespace gdnv::layouts {
namespace {

std::int64_t tp_local(std::int64_t heads, const HeadwiseGeometry& g) { return heads / g.tp; }

// Rows [section + h*dim, section + (h+1)*dim) for the heads of `range`.
void append_heads(std::vector<std::int64_t>& rows, std::int64_t section, HeadRange range, std::int64_t dim) {
  for (std::int64_t r = section + range.begin * dim; r < section + (range.begin + range.count) * dim; ++r)
    rows.push_back(r);
}

void check_cp_rank(const HeadwiseGeometry& g, int cp_rank) {
  check_headwise(g);
  check_cp(g.cp, cp_rank);
}

std::vector<std::int64_t> concat_over_ranks(const HeadwiseGeometry& g,
                                            std::vector<std::int64_t> (*of)(const HeadwiseGeometry&, int)) {
  check_headwise(g);
  std::vector<std::int64_t> out;
  for (int j = 0; j < g.cp; ++j) {
    const auto part = of(g, j);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Every rank's zigzag positions, rank 0 first: the global position of each receive-buffer row.
template <class PartitionOf>
std::vector<std::int64_t> source_major_positions(int cp_size, PartitionOf partition_of) {
  check_cp(cp_size, 0);
  std::vector<std::int64_t> out;
  for (int p = 0; p < cp_size; ++p) {
    const auto positions = partition_of(p).positions();
    out.insert(out.end(), positions.begin(), positions.end());
  }
  return out;
}

}  // namespace

void check_headwise(const HeadwiseGeometry& g) {
  if (g.tp < 1 || g.cp < 1)
    throw ConfigError("tp and cp must be at least 1, got tp=" + std::to_string(g.tp) + " cp=" + std::to_string(g.cp));
  if (g.Hk < 1 || g.Hv % g.Hk != 0)
    throw ConfigError("Hv must be a multiple of Hk for grouped value heads, got Hk=" + std::to_string(g.Hk) +
                      " Hv=" + std::to_string(g.Hv) + "; choose Hv = m*Hk");
  const std::int64_t ways = std::int64_t{g.tp} * g.cp;
  if (g.Hk % ways != 0 || g.Hv % ways != 0)
    throw ConfigError("headwise CP needs Hk and Hv divisible by tp*cp = " + std::to_string(ways) +
                      ", got Hk=" + std::to_string(g.Hk) + " Hv=" + std::to_string(g.Hv) +
                      "; use a cp size that divides Hk/tp, or the chunkwise mode");
}

HeadRange key_heads_of(const HeadwiseGeometry& g, int cp_rank) {
  check_cp_rank(g, cp_rank);
  const std::int64_t per_rank = g.Hk / (std::int64_t{g.tp} * g.cp);
  return HeadRange{cp_rank * per_rank, per_rank};
}

HeadRange value_heads_of(const HeadwiseGeometry& g, int cp_rank) {
  check_cp_rank(g, cp_rank);
  const std::int64_t per_rank = g.Hv / (std::int64_t{g.tp} * g.cp);
  return HeadRange{cp_rank * per_rank, per_rank};
}

std::vector<std::int64_t> in_proj_rows_of(const HeadwiseGeometry& g, int cp_rank) {
  const HeadRange key = key_heads_of(g, cp_rank), value = value_heads_of(g, cp_rank);
  const std::int64_t hk = tp_local(g.Hk, g), hv = tp_local(g.Hv, g);
  const std::int64_t q = 0, k = q + hk * g.dk, v = k + hk * g.dk, z = v + hv * g.dv, beta = z + hv * g.dv,
                     alpha = beta + hv;
  std::vector<std::int64_t> rows;
  append_heads(rows, q, key, g.dk);
  append_heads(rows, k, key, g.dk);
  append_heads(rows, v, value, g.dv);
  append_heads(rows, z, value, g.dv);
  append_heads(rows, beta, value, 1);
  append_heads(rows, alpha, value, 1);
  return rows;
}

std::vector<std::int64_t> conv_channels_of(const HeadwiseGeometry& g, int cp_rank) {
  const HeadRange key = key_heads_of(g, cp_rank), value = value_heads_of(g, cp_rank);
  const std::int64_t hk = tp_local(g.Hk, g);
  const std::int64_t q = 0, k = q + hk * g.dk, v = k + hk * g.dk;
  std::vector<std::int64_t> channels;
  append_heads(channels, q, key, g.dk);
  append_heads(channels, k, key, g.dk);
  append_heads(channels, v, value, g.dv);
  return channels;
}

std::vector<std::int64_t> value_head_indices_of(const HeadwiseGeometry& g, int cp_rank) {
  std::vector<std::int64_t> heads;
  append_heads(heads, 0, value_heads_of(g, cp_rank), 1);
  return heads;
}

std::vector<std::int64_t> in_proj_row_permutation(const HeadwiseGeometry& g) {
  return concat_over_ranks(g, in_proj_rows_of);
}

std::vector<std::int64_t> conv_channel_permutation(const HeadwiseGeometry& g) {
  return concat_over_ranks(g, conv_channels_of);
}

std::vector<std::int64_t> source_major_from_natural(std::span<const std::int64_t> cu_seqlens, int cp_size) {
  return source_major_positions(cp_size, [&](int p) { return thd_partition(Layout::zigzag, cu_seqlens, cp_size, p); });
}

std::vector<std::int64_t> natural_from_source_major(std::span<const std::int64_t> cu_seqlens, int cp_size) {
  return inverse_permutation(source_major_from_natural(cu_seqlens, cp_size));
}

std::vector<std::int64_t> sbhd_source_major_from_natural(std::int64_t seq_len, int cp_size) {
  return source_major_positions(cp_size, [&](int p) { return sbhd_partition(Layout::zigzag, seq_len, cp_size, p); });
}

std::vector<std::int64_t> sbhd_natural_from_source_major(std::int64_t seq_len, int cp_size) {
  return inverse_permutation(sbhd_source_major_from_natural(seq_len, cp_size));
}

std::vector<std::int64_t> inverse_permutation(std::span<const std::int64_t> perm) {
  const auto n = static_cast<std::int64_t>(perm.size());
  std::vector<std::int64_t> inverse(perm.size(), -1);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t p = perm[static_cast<std::size_t>(i)];
    if (p < 0 || p >= n || inverse[static_cast<std::size_t>(p)] != -1)
      throw ConfigError("not a permutation of [0, " + std::to_string(n) + "): entry " + std::to_string(i) + " is " +
                        std::to_string(p));
    inverse[static_cast<std::size_t>(p)] = i;
  }
  return inverse;
}

}  // namespace gdnv::layouts
