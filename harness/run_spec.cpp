#include "harness/run_spec.hpp"

#include "core/error.hpp"
#include "core/text.hpp"
#include "cp/illegal.hpp"

namespace gdnv::harness {
namespace {

void check_lengths_per_micro_batch(const RunSpec& s) {
  const std::size_t n = micro_batch_sizes(s).size();
  if (s.micro_batch_lengths.empty() || s.micro_batch_lengths.size() == n) return;
  throw ConfigError(std::to_string(s.micro_batch_lengths.size()) + " lists of sequence lengths for " +
                    std::to_string(n) + " micro-batch(es): give one list per micro-batch, in micro-batch order");
}

std::vector<std::int64_t> lengths_in(const std::vector<std::int64_t>& cu) {
  std::vector<std::int64_t> lengths;
  for (std::size_t i = 1; i < cu.size(); ++i) lengths.push_back(cu[i] - cu[i - 1]);
  return lengths;
}

}  // namespace

std::vector<int> micro_batch_sizes(const RunSpec& spec) {
  return spec.micro_batches.empty() ? std::vector<int>{spec.cp.cp} : spec.micro_batches;
}

const std::vector<std::int64_t>& lengths_of(const RunSpec& spec, std::size_t micro_batch) {
  return spec.micro_batch_lengths.empty() ? spec.lengths : spec.micro_batch_lengths.at(micro_batch);
}

GateRegime parse_gate_regime(std::string_view name) {
  if (name == "default") return GateRegime::Default;
  if (name == "weak") return GateRegime::Weak;
  if (name == "strong") return GateRegime::Strong;
  if (name == "extreme") return GateRegime::Extreme;
  throw ConfigError("unknown gate regime '" + std::string(name) + "': use default, weak, strong or extreme");
}

RunSpec gate_matrix_spec(CpMode mode, int W, int tp, DType dtype, Format format) {
  RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.cp.mode = mode;
  s.cp.cp = W;
  s.cp.tp = tp;
  s.dtype = dtype;
  s.format = format;
  s.lengths = {8 * W, 4 * W};
  s.seq_len = 8 * W;
  s.batch = mode == CpMode::Chunkwise ? 1 : 2;
  s.gates = GateRegime::Weak;
  return s;
}

bool is_legal(const RunSpec& spec) {
  try {
    validate_run(spec);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

std::string_view gate_regime_name(GateRegime regime) {
  constexpr std::string_view names[] = {"default", "weak", "strong", "extreme"};
  return names[static_cast<int>(regime)];
}

// A per-micro-batch group exactly when the micro-batch's CP size is not the static one (run_rank passes
// one then); several micro-batches: the message says which one.
cp::CheckedMicroBatch check_micro_batch_of(const RunSpec& s, const ref::LayerConfig& config,
                                           const std::vector<std::int64_t>& cu_seqlens, std::size_t m) {
  const std::vector<int> sizes = micro_batch_sizes(s);
  const int c = sizes[m];
  const int group = c != s.cp.cp ? c : 0;
  try {
    return cp::check_micro_batch(s.cp, config, {s.format, cu_seqlens, s.seq_len, s.batch}, group, group);
  } catch (const cp::IllegalCombination& e) {
    if (sizes.size() == 1) throw;
    throw ConfigError(
        "micro-batch " + std::to_string(m + 1) + "/" + std::to_string(sizes.size()) + " (cp=" + std::to_string(c) +
        (s.format == Format::Thd ? ", lengths " + comma_list(lengths_in(cu_seqlens)) : "") + "): " + e.what());
  }
}

CheckedRun validate_run(const RunSpec& spec) {
  const ref::LayerConfig config(spec.layer);
  cp::validate_static(spec.cp, config);
  check_lengths_per_micro_batch(spec);
  CheckedRun run{spec, {}};
  for (std::size_t m = 0; m < micro_batch_sizes(spec).size(); ++m) {
    std::vector<std::int64_t> cu{0};
    if (spec.format == Format::Thd)
      for (auto L : lengths_of(spec, m)) cu.push_back(cu.back() + L);
    run.micro_batches.push_back(check_micro_batch_of(spec, config, cu, m));
  }
  return run;
}

std::vector<cost::CostGeometry> planned_micro_batches(const RunSpec& spec) {
  const ref::LayerConfig config(spec.layer);
  std::vector<cost::CostGeometry> out;
  for (const cp::CheckedMicroBatch& mb : validate_run(spec).micro_batches)
    out.push_back({config, spec.cp, spec.dtype, spec.format, mb.cu(), mb.cp_size()});
  return out;
}

}  // namespace gdnv::harness
