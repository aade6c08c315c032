#include "comm/rank_sum.hpp"

#include <vector>

#include "core/error.hpp"

namespace gdnv {
namespace {

template <class T>
void rank_sum_typed(void* out, std::span<const void* const> inputs, std::int64_t count) {
  std::vector<const T*> in;
  for (const void* p : inputs) in.push_back(static_cast<const T*>(p));
  T* o = static_cast<T*>(out);
  const int n = static_cast<int>(in.size());
  for (std::int64_t i = 0; i < count; ++i) o[i] = rank_ordered_sum<T>(n, [&](int r) { return in[r][i]; });
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

}  // namespace gdnv
