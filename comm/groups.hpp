#pragma once
// Sub-groups the CP layer holds: the TP x CP grid over a world, and the per-micro-batch dynamic CP
// groups inside a static CP group (split once per size, up front, so no split happens inside a
// forward and its collective counts stay exact).
#include <map>
#include <memory>
#include <span>

#include "comm/communicator.hpp"

namespace gdnv::comm {

// world.size() == tp * cp; rank = cp_rank * tp + tp_rank (TP innermost, as Megatron lays out
// ranks). `tp` holds the tp ranks sharing one cp_rank, `cp` the cp ranks sharing one tp_rank.
// Collective over `world`: two splits.
struct TpCpGrid {
  std::unique_ptr<Communicator> tp, cp;
};
TpCpGrid make_tp_cp_grid(Communicator& world, int tp);

// Dynamic CP: groups of `size` consecutive ranks of a static CP group, for each size in `sizes`
// (each a divisor of the static size). Construction is collective (one split per size other than
// the static size itself, which is the static group); group() afterwards is local.
class DynamicCpGroups {
 public:
  DynamicCpGroups(Communicator& static_group, std::span<const int> sizes);
  // The group of `size` ranks this rank belongs to: ranks [size * (r / size), size * (r / size + 1))
  // of the static group.
  Communicator& group(int size) const;
  Communicator& static_group() const { return static_; }

 private:
  Communicator& static_;
  std::map<int, std::unique_ptr<Communicator>> groups_;
};

}  // namespace gdnv::comm
