#pragma once
// Everything a micro-batch's geometry decides, built once on the host before the first layer and
// reused by every layer and both directions: the CP group, the local sequences, and the index maps
// (uploaded to the backend) that the modes gather with.
#include <cstdint>
#include <memory>
#include <vector>

#include "cp/backend.hpp"
#include "cp/cp_config.hpp"
#include "layouts/chunkwise_context.hpp"

namespace gdnv::cp {

// Per-peer row counts -> element counts of [rows, width] tensors.
inline std::vector<std::int64_t> scaled_counts(const std::vector<std::int64_t>& rows, std::int64_t width) {
  std::vector<std::int64_t> out;
  for (auto n : rows) out.push_back(n * width);
  return out;
}

// Chunkwise CP (docs/DESIGN.md §3, cp/chunkwise.cpp): the zigzag <-> contiguous route and this rank's
// contiguous span, its conv halo and its place in the state fold.
struct ChunkwisePlan {
  layouts::ChunkwiseContext context;
  std::vector<std::int64_t> send_counts, recv_counts;  // rows to / from each peer, zigzag -> contiguous
  Buffer route_index;                                  // I64 [T/W]: contiguous local row of each receive-buffer row
  Varlen span;                                         // the span's sequence pieces (context.local_cu_seqlens)

  // Conv halo: every rank's last `tail` rows of the conv input are all-gathered ([cp * tail, D],
  // rank-major); the halo [W_conv - 1, D] takes rows `halo_from` of that into rows `halo_rows`
  // (right-aligned: zeros where the first sequence starts less than W_conv - 1 tokens back).
  std::int64_t tail = 0;        // min(W_conv - 1, T/W): equal on every rank
  Buffer tail_rows;             // I64 [tail]
  Buffer halo_from, halo_rows;  // I64 [halo tokens]; empty without halo
  // Whether any rank of the group needs a halo / a folded state: the exchanges run on every rank or on none.
  bool halo_exchange = false, state_exchange = false;
};

struct MicroBatch {
  Format format = Format::Thd;
  std::int64_t batch = 1;            // B (SBHD); THD: 1
  std::int64_t seq_len = 0;          // S (SBHD)
  comm::Communicator* cp = nullptr;  // the group this micro-batch runs on
  int cp_size = 1, cp_rank = 0;

  // Sequences as packed rows: THD cu_seqlens, or SBHD [0, S, 2S, ..., B*S] (batch-major rows);
  // zero-length segments dropped.
  std::vector<std::int64_t> cu;
  Varlen full;                       // every sequence, natural order
  std::vector<std::int64_t> counts;  // zigzag rows held by each CP rank

  // Elements each CP rank holds of a [rows, width] tensor: the counts of a variable collective.
  std::vector<std::int64_t> element_counts(std::int64_t width) const { return scaled_counts(counts, width); }
  std::int64_t local_tokens = 0;

  Buffer sbhd_to_rows, rows_to_sbhd;               // SBHD: [S_loc*B] (s, b) order <-> batch-major rows
  Buffer natural_from_received;                    // [T] natural row g = received (source-rank-major) row [g]
  Buffer received_from_natural;                    // [T] source-rank-major row k = natural row [k]
  Buffer own_positions;                            // [N_loc] natural positions of this rank's zigzag rows
  Buffer to_peer_major;                            // [N_loc*cp] rows (n, j) of [N_loc, cp, E] -> (j, n)
  Buffer from_peer_major;                          // [N_loc*cp] rows (j, n) of [cp, N_loc, E] -> (n, j)
  std::shared_ptr<const ChunkwisePlan> chunkwise;  // chunkwise mode at CP > 1 only
};

struct MicroBatchSpec {
  Format format = Format::Thd;
  std::vector<std::int64_t> cu_seqlens;  // THD
  std::int64_t seq_len = 0, batch = 1;   // SBHD
};

// A micro-batch ruled legal (docs/DESIGN.md §3.1) at the CP size it runs with, its sequences checked: only
// check_micro_batch makes one, once per micro-batch. GdnCpLayer::prepare and make_micro_batch take it as it
// is and cut it with the layouts' unchecked building blocks, so no rank rules on it again.
class CheckedMicroBatch {
 public:
  Format format() const { return format_; }
  std::int64_t batch() const { return batch_; }      // B (SBHD); THD: 1
  std::int64_t seq_len() const { return seq_len_; }  // S (SBHD)
  // Sequences as packed rows: THD cu_seqlens without zero-length segments, SBHD [0, S, 2S, ..., B*S].
  const std::vector<std::int64_t>& cu() const { return cu_; }
  int cp_size() const { return cp_size_; }   // the CP size it runs with
  bool dynamic() const { return dynamic_; }  // on a per-micro-batch group (dynamic CP)

 private:
  friend CheckedMicroBatch check_micro_batch(const CpConfig&, const ref::LayerConfig&, const MicroBatchSpec&, int, int);
  CheckedMicroBatch() = default;
  Format format_ = Format::Thd;
  std::int64_t batch_ = 1, seq_len_ = 0;
  std::vector<std::int64_t> cu_;
  int cp_size_ = 1;
  bool dynamic_ = false;
};

// Checks one micro-batch: its cu_seqlens (THD, layouts::checked_cu_seqlens), then docs/DESIGN.md §3.1 at the
// CP size it runs with (validate_micro_batch): ConfigError naming the fix. A dynamic-CP micro-batch gives
// Megatron's two arguments, its group's size and local_cp_size (both 0: the static group).
CheckedMicroBatch check_micro_batch(const CpConfig& cp, const ref::LayerConfig& layer, const MicroBatchSpec& spec,
                                    int group_size = 0, int local_cp_size = 0);

// Plans `mb` on `cp_group`, the group it was checked for; chunkwise CP also plans its route (counted in the
// group's accounting as a route build) and halo for conv width `conv_width`.
std::shared_ptr<const MicroBatch> make_micro_batch(Backend& backend, const CheckedMicroBatch& mb,
                                                   comm::Communicator& cp_group, CpMode mode, std::int64_t conv_width);

}  // namespace gdnv::cp
