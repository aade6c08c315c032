#include "gate/common.hpp"

#include <cstdio>

#include "core/metrics.hpp"
#include "core/rng.hpp"

namespace gdnv::gate {

std::vector<std::int64_t> seeded_cu(int W, std::uint64_t seed, const char* stream, int max_sequences, int max_units) {
  const Rng rng(seed, stream);
  std::vector<std::int64_t> cu{0};
  const int n = 1 + static_cast<int>(rng.uniform(0) * max_sequences);
  for (int i = 0; i < n; ++i)
    cu.push_back(cu.back() + 2 * W * (1 + static_cast<std::int64_t>(rng.uniform(i + 1) * max_units)));
  return cu;
}

void check_rel_rms(StepResult& r, const std::string& what, const Tensor& ref, const Tensor& got, double gate) {
  const double e = compare(ref, got).rel_rms;
  char buf[96];
  std::snprintf(buf, sizeof buf, "rel_rms %.3e >= gate %.3e", e, gate);
  r.check(e < gate, what, buf);
}

}  // namespace gdnv::gate
