#include "cost/roofline.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/file.hpp"

namespace gdnv::cost {
namespace {

// Collective steps a call's latency is paid for: ring all-gather / reduce-scatter (size - 1),
// ring all-reduce (twice that), pairwise all-to-all (size - 1).
int steps(comm::Collective kind, int size) { return kind == comm::Collective::AllReduce ? 2 * (size - 1) : size - 1; }

double peak_flops(const HardwareProfile& hw, DType dtype) {
  const double tflops = dtype == DType::BF16 ? hw.bf16_tflops : dtype == DType::F64 ? hw.fp64_tflops : hw.fp32_tflops;
  return tflops * 1e12;
}

}  // namespace

HardwareProfile load_hardware(const std::string& name_or_file) {
  HardwareProfile hw;
  if (name_or_file == "h200") return hw;
  if (!std::filesystem::is_regular_file(name_or_file))
    throw ConfigError("--hw '" + name_or_file +
                      "' is neither a built-in profile nor a file: use h200, or a JSON file "
                      "of overrides such as {\"inter_node_gbps\": 25}");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_text(name_or_file));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("--hw " + name_or_file + ": not JSON (" + e.what() +
                      "): write an object of overrides such as "
                      "{\"inter_node_gbps\": 25}");
  }
  if (!j.is_object())
    throw ConfigError("--hw " + name_or_file +
                      ": expected a JSON object of overrides such as {\"inter_node_gbps\": 25}");
  const std::map<std::string, double*> numbers{
      {"bf16_tflops", &hw.bf16_tflops},         {"fp32_tflops", &hw.fp32_tflops},
      {"fp64_tflops", &hw.fp64_tflops},         {"hbm_gbps", &hw.hbm_gbps},
      {"intra_node_gbps", &hw.intra_node_gbps}, {"intra_node_latency_us", &hw.intra_node_latency_us},
      {"inter_node_gbps", &hw.inter_node_gbps}, {"inter_node_latency_us", &hw.inter_node_latency_us}};
  hw.name = std::filesystem::path(name_or_file).stem().string();
  for (const auto& [key, value] : j.items()) {
    if (key == "name") {
      if (!value.is_string()) throw ConfigError("--hw " + name_or_file + ": 'name' must be a string");
      hw.name = value.get<std::string>();
      continue;
    }
    const bool latency = key.ends_with("latency_us");
    if (!value.is_number() || value.get<double>() < 0 || (!latency && value.get<double>() == 0))
      throw ConfigError("--hw " + name_or_file + ": '" + key + "' must be a " +
                        (latency ? "non-negative" : "positive") + " number");
    if (key == "gpus_per_node") {
      hw.gpus_per_node = value.get<int>();
      if (hw.gpus_per_node < 1 || value.get<double>() != hw.gpus_per_node)
        throw ConfigError("--hw " + name_or_file + ": 'gpus_per_node' must be a positive integer");
      continue;
    }
    const auto it = numbers.find(key);
    if (it == numbers.end())
      throw ConfigError("--hw " + name_or_file + ": unknown key '" + key +
                        "': use name, gpus_per_node, bf16_tflops, "
                        "fp32_tflops, fp64_tflops, hbm_gbps, intra_node_gbps, intra_node_latency_us, inter_node_gbps, "
                        "inter_node_latency_us");
    *it->second = value.get<double>();
  }
  return hw;
}

PhaseTime phase_time(const PhaseCost& phase, const HardwareProfile& hw, DType dtype, int tp, int cp) {
  PhaseTime t;
  const double peak = peak_flops(hw, dtype), hbm = hw.hbm_gbps * 1e9;
  for (const OpCost& op : phase.ops) t.compute_s += std::max(op.flops / peak, op.bytes / hbm);
  for (const CallCost& call : phase.calls) t.comm_s += call_time(call, hw, tp, cp);
  return t;
}

double call_time(const CallCost& call, const HardwareProfile& hw, int tp, int cp) {
  const int span = call.group == Group::Tp ? tp : tp * cp;
  const bool across = span > hw.gpus_per_node;
  const double gbps = across ? hw.inter_node_gbps : hw.intra_node_gbps;
  const double latency_us = across ? hw.inter_node_latency_us : hw.intra_node_latency_us;
  return steps(call.kind, call.size) * latency_us * 1e-6 +
         static_cast<double>(std::max(call.sent, call.recv)) / (gbps * 1e9);
}

double bus_factor(comm::Collective kind, int size) {
  const double n = size;
  return kind == comm::Collective::AllReduce ? 2 * (n - 1) / n : (n - 1) / n;
}

}  // namespace gdnv::cost
