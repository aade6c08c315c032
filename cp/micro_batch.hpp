#pragma once
// Everything a micro-batch's geometry decides, built once on the host before the first layer and
// reused by every layer and both directions: the CP group, the local sequences, and the index maps
// (uploaded to the backend) that the modes gather with.
#include <cstdint>
#include <memory>
#include <vector>

#include "cp/backend.hpp"
#include "cp/cp_config.hpp"

namespace gdnv::cp {

struct MicroBatch {
  Format format = Format::Thd;
  std::int64_t batch = 1;    // B (SBHD); THD: 1
  std::int64_t seq_len = 0;  // S (SBHD)
  Communicator* cp = nullptr;  // the group this micro-batch runs on
  int cp_size = 1, cp_rank = 0;

  // Sequences as packed rows: THD cu_seqlens, or SBHD [0, S, 2S, ..., B*S] (batch-major rows);
  // zero-length segments dropped.
  std::vector<std::int64_t> cu;
  Varlen full;                   // every sequence, natural order
  std::vector<std::int64_t> counts;  // zigzag rows held by each CP rank

  // Elements each CP rank holds of a [rows, width] tensor: the counts of a variable collective.
  std::vector<std::int64_t> element_counts(std::int64_t width) const {
    std::vector<std::int64_t> out;
    for (auto n : counts) out.push_back(n * width);
    return out;
  }
  std::int64_t local_tokens = 0;

  Buffer sbhd_to_rows, rows_to_sbhd;  // SBHD: [S_loc*B] (s, b) order <-> batch-major rows
  Buffer natural_from_received;  // [T] natural row g = received (source-rank-major) row [g]
  Buffer received_from_natural;  // [T] source-rank-major row k = natural row [k]
  Buffer own_positions;          // [N_loc] natural positions of this rank's zigzag rows
  Buffer to_peer_major;          // [N_loc*cp] rows (n, j) of [N_loc, cp, E] -> (j, n)
  Buffer from_peer_major;        // [N_loc*cp] rows (j, n) of [cp, N_loc, E] -> (n, j)
};

struct MicroBatchSpec {
  Format format = Format::Thd;
  std::vector<std::int64_t> cu_seqlens;  // THD
  std::int64_t seq_len = 0, batch = 1;   // SBHD
};

// `cp_group` is the group the micro-batch runs on (validated by the caller).
std::shared_ptr<const MicroBatch> make_micro_batch(Backend& backend, const MicroBatchSpec& spec, Communicator& cp_group);

}  // namespace gdnv::cp
