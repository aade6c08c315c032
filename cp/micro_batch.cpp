#include "cp/micro_batch.hpp"

#include "layouts/headwise.hpp"
#include "layouts/partition.hpp"
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

}  // namespace

std::shared_ptr<const MicroBatch> make_micro_batch(Backend& be, const MicroBatchSpec& spec, Communicator& group) {
  auto mb = std::make_shared<MicroBatch>();
  mb->format = spec.format;
  mb->cp = &group;
  mb->cp_size = group.size();
  mb->cp_rank = group.rank();
  if (spec.format == Format::Thd) {
    mb->cu = layouts::checked_cu_seqlens(spec.cu_seqlens);
  } else {
    mb->batch = spec.batch;
    mb->seq_len = spec.seq_len;
    for (std::int64_t b = 0; b <= spec.batch; ++b) mb->cu.push_back(b * spec.seq_len);
  }
  mb->full = make_varlen(be, mb->cu);

  std::vector<std::int64_t> received_from_natural;
  for (int p = 0; p < mb->cp_size; ++p) {
    const auto positions = layouts::thd_partition(layouts::Layout::zigzag, mb->cu, mb->cp_size, p).positions();
    mb->counts.push_back(static_cast<std::int64_t>(positions.size()));
    if (p == mb->cp_rank) mb->own_positions = upload_index(be, positions);
    received_from_natural.insert(received_from_natural.end(), positions.begin(), positions.end());
  }
  mb->local_tokens = mb->counts[static_cast<std::size_t>(mb->cp_rank)];
  mb->received_from_natural = upload_index(be, received_from_natural);
  mb->natural_from_received = upload_index(be, layouts::inverse_permutation(received_from_natural));
  if (spec.format == Format::Sbhd) plan_sbhd(be, *mb);
  plan_peer_major(be, *mb);
  return mb;
}

}  // namespace gdnv::cp
