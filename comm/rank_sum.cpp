#include "comm/rank_sum.hpp"

#include <vector>

#include "core/error.hpp"
#include "faults/seams.hpp"

namespace gdnv::comm {
namespace {

// Planted fault ReduceRoundsPerHop: the running sum rounded to T after every rank's addition, as a
// ring that forwards partial sums in the buffer dtype does.
template <class T, class Contribution>
T sum_rounding_every_hop(int n, Contribution x) {
  T acc = x(0);
  for (int r = 1; r < n; ++r) acc = narrow<T>(widen(acc) + widen(x(r)));
  return acc;
}

template <class T>
void rank_sum_typed(void* out, std::span<const void* const> inputs, std::int64_t count) {
  std::vector<const T*> in;
  for (const void* p : inputs) in.push_back(static_cast<const T*>(p));
  T* o = static_cast<T*>(out);
  const int n = static_cast<int>(in.size());
  const bool every_hop = faults::sum_rounds_every_hop();
  for (std::int64_t i = 0; i < count; ++i) {
    const auto x = [&](int r) { return in[r][i]; };
    o[i] = every_hop ? sum_rounding_every_hop<T>(n, x) : rank_ordered_sum<T>(n, x);
  }
}

}  // namespace

void rank_sum(DType dtype, void* out, std::span<const void* const> inputs, std::int64_t count) {
  if (inputs.empty() || count == 0) return;
  switch (dtype) {
    case DType::F64:
      return rank_sum_typed<double>(out, inputs, count);
    case DType::F32:
      return rank_sum_typed<float>(out, inputs, count);
    case DType::BF16:
      return rank_sum_typed<bf16_t>(out, inputs, count);
    default:
      throw Error("rank_sum: no sum for dtype " + std::string(dtype_name(dtype)));
  }
}

}  // namespace gdnv::comm
