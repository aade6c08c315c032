#include "gate/reproduce.hpp"

#include "core/error.hpp"
#include "core/text.hpp"
#include "faults/registry.hpp"

namespace gdnv::gate {
namespace {

// Labels and names are quoted for a POSIX shell; they never hold a single quote (checked).
std::string quoted(const std::string& s) {
  if (s.find('\'') != std::string::npos) throw Error("gate label holds a single quote: " + s);
  return "'" + s + "'";
}

std::string ints(const std::vector<int>& v) { return comma_list(std::vector<std::int64_t>(v.begin(), v.end())); }

}  // namespace

std::string fault_prefix() {
  const Fault f = active_fault();
  return f == Fault::None ? "" : "GDNV_FAULT=" + std::string(fault_name(f)) + " ";
}

std::string run_command(const harness::RunSpec& spec, const std::string& backend) {
  const auto& L = spec.layer;
  std::string c = fault_prefix() + "gdn-verify run --mode " + std::string(cp::mode_name(spec.cp.mode)) + " --cp " +
                  std::to_string(spec.cp.cp) + " --tp " + std::to_string(spec.cp.tp) + " --dtype " +
                  std::string(dtype_option_name(spec.dtype)) + " --backend " + backend;
  if (!spec.micro_batches.empty()) c += " --dynamic-cp " + ints(spec.micro_batches);
  if (spec.format == cp::Format::Thd) {
    c += " --format thd";
    if (spec.micro_batch_lengths.empty()) c += " --lengths " + comma_list(spec.lengths);
    for (const auto& lengths : spec.micro_batch_lengths) c += " --lengths " + comma_list(lengths);
  } else {
    c += " --format sbhd --seq-len " + std::to_string(spec.seq_len) + " --batch " + std::to_string(spec.batch);
  }
  c += " --hidden " + std::to_string(L.hidden_size) + " --num-key-heads " + std::to_string(L.linear_num_key_heads) +
       " --num-value-heads " + std::to_string(L.linear_num_value_heads) + " --key-head-dim " +
       std::to_string(L.linear_key_head_dim) + " --value-head-dim " + std::to_string(L.linear_value_head_dim) +
       " --conv-width " + std::to_string(L.linear_conv_kernel_dim) + " --gates " +
       std::string(harness::gate_regime_name(spec.gates)) + " --seed " + std::to_string(spec.seed);
  if (spec.cp.deterministic) c += " --deterministic";
  if (spec.cp.allgather_cp) c += " --allgather-cp";
  if (spec.cp.inference) c += " --inference";
  return c;
}

std::string gate_case_command(const std::string& step, const std::string& label) {
  return fault_prefix() + "gdn-verify gate --step " + quoted(step) + (label.empty() ? "" : " --case " + quoted(label));
}

}  // namespace gdnv::gate
