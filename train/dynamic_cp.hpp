#pragma once
// Dynamic CP (docs/DESIGN.md §13): each micro-batch gets its own CP size from its own
// packed length, and runs on a sub-group of the static world; sub-groups of one world process different
// micro-batches at once.
//
// The rule: the smallest allowed c whose per-rank share ceil(T_c / c) of the micro-batch padded for c
// (T_c tokens) is at most the per-rank budget; the largest allowed c when none is.
#include <cstdint>
#include <vector>

#include "train/data.hpp"

namespace gdnv::train {

int choose_cp(const MicroBatchData& mb, const std::vector<int>& allowed, std::int64_t rank_budget);

// Where a micro-batch runs: CP size c on sub-group `group`, the static ranks [group c, (group + 1) c)
// (comm/groups.hpp DynamicCpGroups).
struct Placement {
  int cp = 1;
  int group = 0;
  bool holds(int world_rank) const { return world_rank / cp == group; }
};

// The micro-batches of each size go round-robin over that size's W / c sub-groups, in micro-batch order.
// Every rank then processes its micro-batches in that order, so the collectives of overlapping groups
// never wait on each other in a cycle.
std::vector<Placement> place(const std::vector<int>& cps, int world);

}  // namespace gdnv::train
