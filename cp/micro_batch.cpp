#include "cp/micro_batch.hpp"

#include <algorithm>

#include "faults/seams.hpp"
#include "layouts/headwise.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"
#include "layouts/validate.hpp"

namespace gdnv::cp {
namespace {

Varlen make_varlen(Backend& be, std::vector<std::int64_t> cu) {
  Buffer device = upload_index(be, cu);
  return {std::move(cu), device};
}

// (s, b) rows of an SBHD shard [S_loc, B] -> batch-major rows b*S_loc + s, and the inverse.
void plan_sbhd(Backend& be, MicroBatch& mb) {
  const std::int64_t B = mb.batch, S_loc = mb.local_tokens / B;
  std::vector<std::int64_t> to_rows(static_cast<std::size_t>(mb.local_tokens)), to_sbhd(to_rows.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S_loc; ++s) {
      to_rows[b * S_loc + s] = s * B + b;
      to_sbhd[s * B + b] = b * S_loc + s;
    }
  mb.sbhd_to_rows = upload_index(be, to_rows);
  mb.rows_to_sbhd = upload_index(be, to_sbhd);
}

void plan_peer_major(Backend& be, MicroBatch& mb) {
  const std::int64_t N = mb.local_tokens, c = mb.cp_size;
  std::vector<std::int64_t> to(static_cast<std::size_t>(N * c)), from(to.size());
  for (std::int64_t j = 0; j < c; ++j)
    for (std::int64_t n = 0; n < N; ++n) {
      to[j * N + n] = n * c + j;
      from[n * c + j] = j * N + n;
    }
  mb.to_peer_major = upload_index(be, to);
  mb.from_peer_major = upload_index(be, from);
}

// Rank p's zigzag rows (natural positions).
std::vector<std::int64_t> zigzag_positions(const std::vector<std::int64_t>& cu, int cp_size, int p) {
  return faults::zigzag_positions(layouts::positions_of(layouts::zigzag_runs(cu, cp_size, p)), cu, cp_size);
}

std::vector<std::int64_t> iota(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// The halo's pieces as rows of the all-gathered tails -> rows of the right-aligned halo.
void plan_halo(Backend& be, const MicroBatch& mb, std::int64_t conv_width, ChunkwisePlan& plan) {
  const std::int64_t n = mb.cu.back() / mb.cp_size;
  std::vector<std::int64_t> from, rows;
  std::int64_t at = conv_width - 1 - plan.context.halo_tokens();
  for (const layouts::HaloPiece& piece : plan.context.halo) {
    const int rank = faults::halo_rank(piece.rank, mb.cp_size);
    const std::int64_t read = faults::halo_rows_read(piece.length, rank, mb.cp_rank);
    for (std::int64_t i = 0; i < read; ++i) {
      from.push_back(rank * plan.tail + piece.local_begin + i - (n - plan.tail));
      rows.push_back(at + i);
    }
    at += piece.length;
  }
  if (from.empty()) return;
  plan.halo_from = upload_index(be, from);
  plan.halo_rows = upload_index(be, rows);
}

std::shared_ptr<const ChunkwisePlan> plan_chunkwise(Backend& be, const MicroBatch& mb, std::int64_t conv_width) {
  auto plan = std::make_shared<ChunkwisePlan>();
  mb.cp->accounting().route_build();
  const layouts::Route route = layouts::zigzag_contiguous_route_unchecked(mb.cu, mb.cp_size, mb.cp_rank);
  plan->send_counts = route.send_counts;
  plan->recv_counts = route.recv_counts;
  plan->route_index = upload_index(be, faults::route_index(route.index));

  plan->context = layouts::chunkwise_context_unchecked(mb.cu, mb.cp_size, mb.cp_rank, conv_width);
  plan->span = make_varlen(be, plan->context.local_cu_seqlens);
  for (int p = 0; p < mb.cp_size; ++p) {
    const auto peer = layouts::chunkwise_context_unchecked(mb.cu, mb.cp_size, p, conv_width);
    plan->halo_exchange = plan->halo_exchange || !peer.halo.empty();
    plan->state_exchange = plan->state_exchange || peer.pre_num_ranks > 0;
  }
  const std::int64_t n = mb.cu.back() / mb.cp_size;
  plan->tail = faults::halo_tail(std::min(conv_width - 1, n), n);
  plan->tail_rows = upload_index(be, iota(n - plan->tail, n));
  plan_halo(be, mb, conv_width, *plan);
  return plan;
}

}  // namespace

CheckedMicroBatch check_micro_batch(const CpConfig& cp, const ref::LayerConfig& layer, const MicroBatchSpec& spec,
                                    int group_size, int local_cp_size) {
  CheckedMicroBatch mb;
  mb.format_ = spec.format;
  MicroBatchShape shape{spec.format, spec.format == Format::Thd ? 1 : spec.batch, {}, group_size != 0, local_cp_size,
                        group_size};
  if (spec.format == Format::Thd) {
    mb.cu_ = layouts::checked_cu_seqlens(spec.cu_seqlens);
    for (std::size_t i = 1; i < mb.cu_.size(); ++i) shape.lengths.push_back(mb.cu_[i] - mb.cu_[i - 1]);
  } else {
    mb.batch_ = spec.batch;
    mb.seq_len_ = spec.seq_len;
    for (std::int64_t b = 0; b <= spec.batch; ++b) mb.cu_.push_back(b * spec.seq_len);
    shape.lengths = {spec.seq_len};
  }
  mb.cp_size_ = validate_micro_batch(cp, layer, shape);
  mb.dynamic_ = group_size != 0;
  return mb;
}

std::shared_ptr<const MicroBatch> make_micro_batch(Backend& be, const CheckedMicroBatch& checked,
                                                   comm::Communicator& group, CpMode mode, std::int64_t conv_width) {
  auto mb = std::make_shared<MicroBatch>();
  mb->format = checked.format();
  mb->cp = &group;
  mb->cp_size = group.size();
  mb->cp_rank = group.rank();
  mb->batch = checked.batch();
  mb->seq_len = checked.seq_len();
  mb->cu = checked.cu();
  mb->full = make_varlen(be, mb->cu);

  std::vector<std::int64_t> received_from_natural;
  for (int p = 0; p < mb->cp_size; ++p) {
    const auto positions = zigzag_positions(mb->cu, mb->cp_size, p);
    mb->counts.push_back(static_cast<std::int64_t>(positions.size()));
    if (p == mb->cp_rank) mb->own_positions = upload_index(be, positions);
    received_from_natural.insert(received_from_natural.end(), positions.begin(), positions.end());
  }
  mb->local_tokens = mb->counts[static_cast<std::size_t>(mb->cp_rank)];
  mb->received_from_natural = upload_index(be, received_from_natural);
  mb->natural_from_received = upload_index(be, layouts::inverse_permutation(received_from_natural));
  if (mb->format == Format::Sbhd) plan_sbhd(be, *mb);
  plan_peer_major(be, *mb);
  if (mode == CpMode::Chunkwise && mb->cp_size > 1) mb->chunkwise = plan_chunkwise(be, *mb, conv_width);
  return mb;
}

}  // namespace gdnv::cp
