#include "layouts/validate.hpp"

#include <atomic>
#include <string>

#include "core/error.hpp"

namespace gdnv::layouts {
namespace {

std::atomic<std::uint64_t> checks{0};

std::string list_str(std::span<const std::int64_t> values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "]";
}

std::int64_t round_up(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// "sequence 1 (length 6), sequence 3 (length 10)", the first 8 of them and how many more.
std::string offending_lengths(std::span<const std::int64_t> cu_seqlens, std::int64_t multiple) {
  constexpr int kShown = 8;
  std::string s;
  int bad = 0;
  for (std::size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const std::int64_t length = cu_seqlens[i + 1] - cu_seqlens[i];
    if (length % multiple == 0) continue;
    if (bad++ < kShown)
      s += (bad > 1 ? ", " : "") + std::string("sequence ") + std::to_string(i) + " (length " + std::to_string(length) +
           ")";
  }
  if (bad > kShown) s += " and " + std::to_string(bad - kShown) + " more";
  return s;
}

}  // namespace

Layout parse_layout(std::string_view name) {
  if (name == "zigzag") return Layout::zigzag;
  if (name == "contiguous") return Layout::contiguous;
  throw ConfigError("unknown layout '" + std::string(name) + "'; use zigzag or contiguous");
}

std::string_view layout_name(Layout layout) { return layout == Layout::zigzag ? "zigzag" : "contiguous"; }

void check_cp(int cp_size, int cp_rank) {
  if (cp_size < 1)
    throw ConfigError("cp_size must be at least 1, got " + std::to_string(cp_size) +
                      "; use 1 for no context parallelism");
  if (cp_rank < 0 || cp_rank >= cp_size)
    throw ConfigError("cp_rank " + std::to_string(cp_rank) + " is out of range for cp_size " + std::to_string(cp_size) +
                      "; use a rank in [0, " + std::to_string(cp_size - 1) + "]");
}

std::uint64_t cu_seqlens_checks() { return checks.load(); }

std::vector<std::int64_t> checked_cu_seqlens(std::span<const std::int64_t> cu_seqlens) {
  ++checks;
  if (cu_seqlens.empty())
    throw ConfigError("cu_seqlens is empty; give the packed sequence boundaries starting at 0, e.g. 0,16,40");
  if (cu_seqlens[0] != 0) throw ConfigError("cu_seqlens must start at 0, got " + list_str(cu_seqlens) + "; prepend 0");
  std::vector<std::int64_t> kept{0};
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] < cu_seqlens[i - 1])
      throw ConfigError("cu_seqlens decreases at index " + std::to_string(i) + " (" +
                        std::to_string(cu_seqlens[i - 1]) + " -> " + std::to_string(cu_seqlens[i]) + ") in " +
                        list_str(cu_seqlens) + "; boundaries must be cumulative sums of the sequence lengths");
    if (cu_seqlens[i] != kept.back()) kept.push_back(cu_seqlens[i]);
  }
  return kept;
}

void check_zigzag_lengths(std::span<const std::int64_t> cu_seqlens, int cp_size) {
  if (cp_size == 1) return;  // one rank holds every sequence whole
  const std::int64_t multiple = 2 * std::int64_t{cp_size};
  const std::string bad = offending_lengths(cu_seqlens, multiple);
  if (!bad.empty())
    throw ConfigError("zigzag layout needs every sequence length divisible by 2*cp_size = " + std::to_string(multiple) +
                      "; not divisible: " + bad + "; pad each sequence to a multiple of " + std::to_string(multiple));
}

void check_contiguous_total(std::int64_t total_tokens, int cp_size) {
  if (total_tokens % cp_size != 0)
    throw ConfigError("contiguous layout needs the token total divisible by cp_size = " + std::to_string(cp_size) +
                      ", got " + std::to_string(total_tokens) + " tokens; pad the packed buffer to " +
                      std::to_string(round_up(total_tokens, cp_size)) + " tokens");
}

void check_sbhd_seq_len(Layout layout, std::int64_t seq_len, int cp_size) {
  if (seq_len < 0) throw ConfigError("seq_len must be >= 0, got " + std::to_string(seq_len));
  const std::int64_t multiple = layout == Layout::zigzag && cp_size > 1 ? 2 * std::int64_t{cp_size} : cp_size;
  if (seq_len % multiple != 0)
    throw ConfigError("SBHD " + std::string(layout_name(layout)) + " layout needs seq_len divisible by " +
                      (layout == Layout::zigzag ? "2*cp_size = " : "cp_size = ") + std::to_string(multiple) + ", got " +
                      std::to_string(seq_len) + "; pad the sequence to " + std::to_string(round_up(seq_len, multiple)) +
                      " tokens");
}

}  // namespace gdnv::layouts
