#pragma once
// The sequences of a batched ([B, T, ...]) or packed (B == 1 with cu_seqlens) input, shared by the
// gated delta rule and conv1d oracles.
#include <cstdint>
#include <optional>
#include <vector>

namespace gdnv::ref {

// Tokens [begin, begin + len) of batch row b; n indexes initial_state / final_state.
struct Sequence {
  std::int64_t b, begin, len, n;
};

// Validates cu_seqlens [N + 1] against B and T (ConfigError naming the fix) and lists the sequences;
// without cu_seqlens every batch row is one sequence. Zero-length sequences are kept (their final
// state is their initial state).
std::vector<Sequence> sequences_of(std::int64_t B, std::int64_t T,
                                   const std::optional<std::vector<std::int64_t>>& cu_seqlens);

}  // namespace gdnv::ref
