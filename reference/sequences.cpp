#include "reference/sequences.hpp"

#include <string>

#include "core/error.hpp"

namespace gdnv::ref {

std::vector<Sequence> sequences_of(std::int64_t B, std::int64_t T,
                                   const std::optional<std::vector<std::int64_t>>& cu_seqlens) {
  std::vector<Sequence> seqs;
  if (!cu_seqlens) {
    for (std::int64_t b = 0; b < B; ++b) seqs.push_back({b, 0, T, b});
    return seqs;
  }
  const auto& cu = *cu_seqlens;
  if (B != 1)
    throw ConfigError("cu_seqlens needs B == 1 (got B = " + std::to_string(B) +
                      "): pack the sequences along T into one batch row");
  if (cu.size() < 2)
    throw ConfigError("cu_seqlens has " + std::to_string(cu.size()) +
                      " entries; it needs N + 1 >= 2 offsets [0, ..., T]");
  if (cu.front() != 0) throw ConfigError("cu_seqlens must start at 0 (got " + std::to_string(cu.front()) + ")");
  for (std::size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1])
      throw ConfigError("cu_seqlens decreases at index " + std::to_string(i) + " (" + std::to_string(cu[i - 1]) +
                        " -> " + std::to_string(cu[i]) + "); offsets must be non-decreasing");
    seqs.push_back({0, cu[i - 1], cu[i] - cu[i - 1], static_cast<std::int64_t>(i - 1)});
  }
  if (cu.back() != T)
    throw ConfigError("cu_seqlens ends at " + std::to_string(cu.back()) + " but the packed length T is " +
                      std::to_string(T) + "; the last offset must equal T");
  return seqs;
}

}  // namespace gdnv::ref
