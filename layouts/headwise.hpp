#pragma once
// Index maps of the headwise (Ulysses) CP mode (docs/DESIGN.md §3). With t = tp and cp = CP size, each TP rank
// owns hk = Hk/t key heads and hv = Hv/t value heads; CP rank j computes TP-local key heads
// [j*Hk/(t*cp), (j+1)*Hk/(t*cp)) and the value heads that read them, [j*Hv/(t*cp), (j+1)*Hv/(t*cp)) (GVA:
// value head h reads key head h/(Hv/Hk)), for the FULL sequence.
//
// Sections: the TP-local in_proj rows are q [hk*dk], k [hk*dk], v [hv*dv], z [hv*dv], beta [hv],
// alpha [hv]; the conv channels are q, k, v; A_log and dt_bias are per value head. Every list below is in
// that section order, heads increasing within a section.
#include <cstdint>
#include <span>
#include <vector>

namespace gdnv::layouts {

struct HeadwiseGeometry {
  std::int64_t Hk, Hv, dk, dv;  // global head counts and head dims
  int tp, cp;
};

// ConfigError naming the fix unless Hv % Hk == 0, Hk % (tp*cp) == 0, Hv % (tp*cp) == 0 and tp, cp >= 1.
void check_headwise(const HeadwiseGeometry& g);

struct HeadRange {
  std::int64_t begin = 0, count = 0;
};
HeadRange key_heads_of(const HeadwiseGeometry& g, int cp_rank);    // TP-local
HeadRange value_heads_of(const HeadwiseGeometry& g, int cp_rank);  // TP-local

// TP-local rows of in_proj.weight that CP rank j computes (q, k, v, z, beta, alpha sections).
std::vector<std::int64_t> in_proj_rows_of(const HeadwiseGeometry& g, int cp_rank);
// TP-local conv1d channels that CP rank j computes (q, k, v sections).
std::vector<std::int64_t> conv_channels_of(const HeadwiseGeometry& g, int cp_rank);
// TP-local entries of A_log and dt_bias that CP rank j uses (its value heads).
std::vector<std::int64_t> value_head_indices_of(const HeadwiseGeometry& g, int cp_rank);

// The section permutations: the lists above for j = 0, 1, ..., cp-1, concatenated. Gathering the in_proj
// output features with it makes each CP rank's features one contiguous block, so the all-to-all sends
// block j to rank j.
std::vector<std::int64_t> in_proj_row_permutation(const HeadwiseGeometry& g);
std::vector<std::int64_t> conv_channel_permutation(const HeadwiseGeometry& g);

// Token orders around the all-to-all. Its receive buffer holds, from each source rank p = 0..W-1 in turn,
// p's zigzag local rows ("source-rank-major"). Both are gather indices (see apply.hpp gather_rows):
//   natural row g        = received row natural_from_source_major[g]
//   received-order row k = natural row source_major_from_natural[k]   (the global position of row k)
std::vector<std::int64_t> source_major_from_natural(std::span<const std::int64_t> cu_seqlens, int cp_size);
std::vector<std::int64_t> natural_from_source_major(std::span<const std::int64_t> cu_seqlens, int cp_size);
std::vector<std::int64_t> sbhd_source_major_from_natural(std::int64_t seq_len, int cp_size);
std::vector<std::int64_t> sbhd_natural_from_source_major(std::int64_t seq_len, int cp_size);

// inverse[perm[i]] = i; ConfigError unless perm is a permutation of [0, perm.size()).
std::vector<std::int64_t> inverse_permutation(std::span<const std::int64_t> perm);

}  // namespace gdnv::layouts
