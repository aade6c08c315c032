#include "cp/cp_config.hpp"

#include <algorithm>
#include <atomic>

#include "core/error.hpp"
#include "core/text.hpp"
#include "cp/rule.hpp"

namespace gdnv::cp {
namespace {

std::atomic<std::uint64_t> rulings{0};

// Every §3.1 check throws through its rule id (cp/rule.hpp), so the table of cp/illegal.hpp can tell
// which rule fired.
[[noreturn]] void illegal(Rule rule, const std::string& what) { throw IllegalCombination(rule, what); }

void check_heads(const CpConfig& cp, const ref::LayerConfig& layer, int cp_size) {
  const std::int64_t Hk = layer.Hk(), Hv = layer.Hv();
  if (cp.mode == CpMode::Headwise) {
    const std::int64_t n = static_cast<std::int64_t>(cp.tp) * cp_size;
    if (Hk % n != 0 || Hv % n != 0)
      illegal(Rule::HeadwiseHeadsNotDivisibleByTpCp,
              "linear_cp_mode='headwise' needs Hk and Hv divisible by tp*cp = " + std::to_string(cp.tp) + "*" +
                  std::to_string(cp_size) + " = " + std::to_string(n) + " (Hk=" + std::to_string(Hk) + ", Hv=" +
                  std::to_string(Hv) + "): use linear_cp_mode='chunkwise' or 'all_gather', or a smaller tp*cp");
  } else if (Hk % cp.tp != 0 || Hv % cp.tp != 0) {
    illegal(Rule::HeadsNotDivisibleByTp, "linear_cp_mode='" + std::string(mode_name(cp.mode)) +
                                             "' needs Hk and Hv divisible by tp = " + std::to_string(cp.tp) +
                                             " (Hk=" + std::to_string(Hk) + ", Hv=" + std::to_string(Hv) +
                                             "): choose a tensor-parallel size that divides both head counts");
  }
}

}  // namespace

CpMode parse_mode(std::string_view name) {
  if (name == "headwise") return CpMode::Headwise;
  if (name == "chunkwise") return CpMode::Chunkwise;
  if (name == "all_gather") return CpMode::AllGather;
  illegal(Rule::UnknownMode,
          "unknown linear_cp_mode '" + std::string(name) +
              "': use one of 'headwise', 'chunkwise', 'all_gather' (the mode is static; there is no 'auto')");
}

std::string_view mode_name(CpMode mode) {
  switch (mode) {
    case CpMode::Headwise:
      return "headwise";
    case CpMode::Chunkwise:
      return "chunkwise";
    case CpMode::AllGather:
      return "all_gather";
  }
  return "?";
}

Format parse_format(std::string_view name) {
  if (name == "thd") return Format::Thd;
  if (name == "sbhd") return Format::Sbhd;
  throw ConfigError("unknown input format '" + std::string(name) + "': use 'thd' or 'sbhd'");
}

std::string_view format_name(Format format) { return format == Format::Thd ? "thd" : "sbhd"; }

void validate_static(const CpConfig& cp, const ref::LayerConfig& layer) {
  if (cp.tp < 1)
    illegal(Rule::TpBelowOne, "tp = " + std::to_string(cp.tp) + " is invalid: the tensor-parallel size must be >= 1");
  if (cp.cp < 1)
    illegal(Rule::CpBelowOne, "cp = " + std::to_string(cp.cp) + " is invalid: the context-parallel size must be >= 1");
  if (layer.Hv() % layer.Hk() != 0)
    illegal(Rule::HvNotMultipleOfHk, "Hv % Hk != 0 (Hk=" + std::to_string(layer.Hk()) +
                                         ", Hv=" + std::to_string(layer.Hv()) +
                                         "): make linear_num_value_heads a multiple of linear_num_key_heads");
  for (int c : cp.dynamic_cp)
    if (c < 1 || cp.cp % c != 0)
      illegal(Rule::DynamicCpSizeNotDividing, "dynamic CP size " + std::to_string(c) +
                                                  " does not divide the static CP size " + std::to_string(cp.cp) +
                                                  ": use divisors of " + std::to_string(cp.cp));
  check_heads(cp, layer, cp.cp);
  const bool any_cp = cp.cp > 1;
  if (cp.mode == CpMode::Chunkwise) {
    if (cp.allgather_cp)
      illegal(Rule::ChunkwiseWithAllgatherCp,
              "linear_cp_mode='chunkwise' cannot run with allgather_cp=True: set allgather_cp=False or use "
              "linear_cp_mode='all_gather'");
    if (cp.deterministic && (any_cp || !cp.dynamic_cp.empty()))
      illegal(Rule::ChunkwiseDeterministicWithCp,
              "linear_cp_mode='chunkwise' is not deterministic with CP>1 or dynamic CP (its state fold order "
              "depends on the rank split): use linear_cp_mode='headwise', or deterministic=False");
  }
  if (cp.inference && cp.mode != CpMode::Headwise)
    illegal(Rule::InferenceNotHeadwise,
            "linear_cp_mode='" + std::string(mode_name(cp.mode)) +
                "' does not support inference: use linear_cp_mode='headwise' for inference");
  if (cp.mode == CpMode::AllGather && cp.deterministic)
    illegal(Rule::AllGatherDeterministic,
            "linear_cp_mode='all_gather' is not deterministic (its backward reduce-scatters gradients): use "
            "linear_cp_mode='headwise', or deterministic=False");
}

std::uint64_t micro_batch_rulings() { return rulings.load(); }

int validate_micro_batch(const CpConfig& cp, const ref::LayerConfig& layer, const MicroBatchShape& mb) {
  ++rulings;
  if (mb.has_cp_group != (mb.local_cp_size != 0))
    illegal(Rule::OnlyOneOfGroupAndLocalSize,
            "only one of cp_group and local_cp_size is set: pass both for a dynamic-CP micro-batch, or neither");
  int c = cp.cp;
  if (mb.has_cp_group) {
    if (mb.local_cp_size != mb.group_size)
      illegal(Rule::LocalCpSizeNotGroupSize, "local_cp_size = " + std::to_string(mb.local_cp_size) +
                                                 " but the cp_group has " + std::to_string(mb.group_size) +
                                                 " ranks: pass the group's size as local_cp_size");
    c = mb.local_cp_size;
    if (c < 1 || cp.cp % c != 0)
      illegal(Rule::DynamicCpSizeNotDividing, "dynamic CP size " + std::to_string(c) +
                                                  " does not divide the static CP size " + std::to_string(cp.cp) +
                                                  ": use divisors of " + std::to_string(cp.cp));
    if (cp.mode == CpMode::Chunkwise && cp.deterministic && c > 1)
      illegal(Rule::ChunkwiseDeterministicWithDynamicCp,
              "linear_cp_mode='chunkwise' is not deterministic with dynamic CP: use linear_cp_mode='headwise'");
  }
  if (mb.format == Format::Thd && mb.batch != 1)
    illegal(Rule::ThdBatchNotOne, "THD input needs batch == 1 (got " + std::to_string(mb.batch) +
                                      "): pack the sequences along T with cu_seqlens");
  if (mb.format == Format::Sbhd && cp.mode == CpMode::Chunkwise && mb.batch > 1 && c > 1)
    illegal(Rule::ChunkwiseSbhdBatch, "linear_cp_mode='chunkwise' with SBHD input needs batch == 1 (got " +
                                          std::to_string(mb.batch) +
                                          "): use THD (packed) input, or linear_cp_mode='headwise'");
  if (mb.format == Format::Sbhd && cp.mode == CpMode::AllGather && c > 1)
    illegal(Rule::AllGatherSbhdWithCp,
            "linear_cp_mode='all_gather' supports THD input only when CP>1: use THD input, or "
            "linear_cp_mode='headwise' or 'chunkwise'");
  check_heads(cp, layer, c);
  if (c == 1) return c;  // nothing is split (docs/DESIGN.md §3: CP=1 is the plain layer): any length
  std::vector<std::int64_t> not_cp, not_2cp;
  for (auto L : mb.lengths) {
    if (L % c != 0) not_cp.push_back(L);
    else if (L % (2 * c) != 0) not_2cp.push_back(L);
  }
  if (!not_cp.empty())
    illegal(Rule::LengthsNotDivisibleByCp, "sequence lengths " + comma_list(not_cp) +
                                               " are not divisible by cp = " + std::to_string(c) +
                                               ": pad each sequence to a multiple of 2*cp = " + std::to_string(2 * c));
  if (!not_2cp.empty())
    illegal(Rule::LengthsNotDivisibleByTwoCp,
            "sequence lengths " + comma_list(not_2cp) + " are not divisible by 2*cp = " + std::to_string(2 * c) +
                " (zigzag layout): pad each sequence to a multiple of " + std::to_string(2 * c));
  return c;
}

}  // namespace gdnv::cp
