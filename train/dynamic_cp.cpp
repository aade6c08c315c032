#include "train/dynamic_cp.hpp"

#include <algorithm>
#include <map>

#include "train/padding.hpp"

namespace gdnv::train {

int choose_cp(const MicroBatchData& mb, const std::vector<int>& allowed, std::int64_t rank_budget) {
  std::vector<int> sizes = allowed;
  std::sort(sizes.begin(), sizes.end());
  for (int c : sizes) {
    std::int64_t padded = 0;
    for (const Document& d : mb.docs) padded += static_cast<std::int64_t>(d.size()) + pad_for(d.size(), c);
    if ((padded + c - 1) / c <= rank_budget) return c;
  }
  return sizes.back();
}

std::vector<Placement> place(const std::vector<int>& cps, int world) {
  std::map<int, int> next;  // size -> its next sub-group
  std::vector<Placement> out;
  for (int c : cps) {
    int& g = next[c];
    out.push_back({c, g});
    g = (g + 1) % (world / c);
  }
  return out;
}

}  // namespace gdnv::train
