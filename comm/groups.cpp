#include "comm/groups.hpp"

#include <string>

namespace gdnv::comm {

TpCpGrid make_tp_cp_grid(Communicator& world, int tp) {
  if (tp < 1 || world.size() % tp != 0)
    throw ConfigError("TP x CP grid: tp=" + std::to_string(tp) + " does not divide the world size " +
                      std::to_string(world.size()) + "; use a tp that divides it");
  const int r = world.rank();
  TpCpGrid grid;
  grid.tp = world.split(r / tp, r);
  grid.cp = world.split(r % tp, r);
  return grid;
}

DynamicCpGroups::DynamicCpGroups(Communicator& static_group, std::span<const int> sizes) : static_(static_group) {
  const int w = static_group.size();
  for (const int size : sizes)  // all checked before the first split: a bad list costs no collective
    if (size < 1 || w % size != 0)
      throw ConfigError("dynamic CP size " + std::to_string(size) + " does not divide the static CP size " +
                        std::to_string(w) + "; use a divisor of " + std::to_string(w));
  const int r = static_group.rank();
  for (const int size : sizes)
    if (size != w && !groups_.count(size)) groups_[size] = static_group.split(r / size, r);
}

Communicator& DynamicCpGroups::group(int size) const {
  if (size == static_.size()) return static_;
  const auto it = groups_.find(size);
  if (it == groups_.end())
    throw ConfigError("dynamic CP size " + std::to_string(size) +
                      " was not prepared; list it in the sizes given to "
                      "DynamicCpGroups (static CP size " +
                      std::to_string(static_.size()) + ")");
  return *it->second;
}

}  // namespace gdnv::comm
