#pragma once
// Fail-fast checks of layout inputs (docs/DESIGN.md §2). Each throws ConfigError with one line that names the
// bad values and says how to fix them.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace gdnv::layouts {

enum class Layout { zigzag, contiguous };

Layout parse_layout(std::string_view name);
std::string_view layout_name(Layout layout);

void check_cp(int cp_size, int cp_rank);
// cu_seqlens with zero-length segments dropped ([0,16,40,40,40] -> [0,16,40]); rejects an empty list, a
// first entry other than 0 and a decrease.
std::vector<std::int64_t> checked_cu_seqlens(std::span<const std::int64_t> cu_seqlens);
// How many times checked_cu_seqlens has run in this process: a test counts the checks of a run with it.
std::uint64_t cu_seqlens_checks();
// Zigzag cuts every sequence into 2*cp_size equal chunks when cp_size > 1 (at 1 any length is whole);
// the message lists every offending length.
void check_zigzag_lengths(std::span<const std::int64_t> cu_seqlens, int cp_size);
// Contiguous cuts the flattened buffer into cp_size equal spans.
void check_contiguous_total(std::int64_t total_tokens, int cp_size);
void check_sbhd_seq_len(Layout layout, std::int64_t seq_len, int cp_size);

}  // namespace gdnv::layouts
