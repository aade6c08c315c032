// gdn-verify run: the layer fwd+bwd under one CP mode on an in-process world, every tensor judged
// against the fp64 oracle, plus the collectives each direction performed.
#include <algorithm>
#include <fstream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/metrics.hpp"
#include "core/text.hpp"
#include "cpu/backend.hpp"
#include "gpu/cuda_backend.hpp"
#include "harness/verdict.hpp"
#include "harness/world.hpp"
#include "probes/build_info.hpp"
#include "probes/checks.hpp"
#include "probes/image.hpp"
#include "probes/report.hpp"

namespace gdnv::cli {
namespace {

using cp::Format;

po::options_description run_options() {
  po::options_description o("run options");
  // clang-format off
  o.add_options()
      ("mode", po::value<std::string>()->default_value("headwise"),
       "linear_cp_mode: headwise (this project's default, as the upstream PR's; upstream Megatron-Core's is chunkwise) | chunkwise | all_gather")
      ("cp", po::value<int>()->default_value(2), "static CP size (in-process ranks per TP rank)")
      ("tp", po::value<int>()->default_value(1), "tensor-parallel size")
      ("dtype", po::value<std::string>()->default_value("fp32"), "storage dtype: fp64 | fp32 | bf16")
      ("backend", po::value<std::string>()->default_value("cpu"), "compute backend: cpu | emu (the CUDA kernels emulated on host streams) | cuda; emu and cuda store fp32 or bf16")
      ("deterministic", po::bool_switch(), "request deterministic mode (validation matrix)")
      ("allgather-cp", po::bool_switch(), "request allgather_cp (validation matrix)")
      ("inference", po::bool_switch(), "request inference (validation matrix)")
      ("dynamic-cp", po::value<std::string>(), "one micro-batch per listed CP size, e.g. 1,2,4 (divisors of --cp)")
      ("stages", po::bool_switch(), "record and judge the layer's named stages (stage::*, stage_grad::*) on every rank; "
       "without it they are recorded, by a second run, only when a tensor fails")
      ("json", po::value<std::string>(), "also write the results as JSON to FILE");
  // clang-format on
  add_geometry_options(o);
  return o;
}

harness::RunSpec spec_from(const po::variables_map& vm) {
  harness::RunSpec s = geometry_spec(vm);
  s.cp = cp_flags(vm);
  s.cp.mode = cp::parse_mode(vm["mode"].as<std::string>());
  s.cp.cp = vm["cp"].as<int>();
  s.dtype = parse_dtype_option(vm["dtype"].as<std::string>());
  if (vm.count("dynamic-cp")) {
    for (auto c : parse_int_list(vm["dynamic-cp"].as<std::string>(), "--dynamic-cp", "1,2,4")) {
      s.cp.dynamic_cp.push_back(static_cast<int>(c));
      s.micro_batches.push_back(static_cast<int>(c));
    }
  }
  const std::size_t lists = s.micro_batch_lengths.size(),
                    micro_batches = std::max<std::size_t>(1, s.micro_batches.size());
  if (lists > 1 && lists != micro_batches)
    throw ConfigError("--lengths given " + std::to_string(lists) + " times for " + std::to_string(micro_batches) +
                      " micro-batch(es)" +
                      (vm.count("dynamic-cp") ? " (--dynamic-cp " + vm["dynamic-cp"].as<std::string>() + ")" : "") +
                      ": give one --lengths for every micro-batch, or one per --dynamic-cp entry in its order");
  return s;
}

// The active configuration in the upstream layer's own words, printed once when CP is in use.
std::string upstream_config_line(const harness::RunSpec& spec) {
  const ref::LayerConfig layer(spec.layer);
  return "[GDN CP] linear_cp_mode=" + std::string(cp::mode_name(spec.cp.mode)) + " TP=" + std::to_string(spec.cp.tp) +
         " max_CP=" + std::to_string(spec.cp.cp) + " key_heads=" + std::to_string(layer.Hk()) +
         " value_heads=" + std::to_string(layer.Hv()) + "\n";
}

}  // namespace

int run_main(const std::vector<std::string>& args, std::ostream& out) {
  const auto vm = parse_options("run", "[--mode MODE] [options]", run_options(), {}, args, out);
  if (!vm) return kPass;
  check_outputs(output_options(*vm, {"json"}));
  harness::RunSpec spec = spec_from(*vm);
  spec.stages = (*vm)["stages"].as<bool>();
  harness::CheckedRun checked = harness::validate_run(spec);
  const std::string backend = (*vm)["backend"].as<std::string>();
  const cp::BackendFactory factory = parse_backend_option(backend);
  if (spec.cp.cp > 1 || !spec.cp.dynamic_cp.empty()) out << upstream_config_line(spec) << std::flush;
  harness::JudgedRun e;
  try {
    e = harness::run_and_judge(checked, factory);
    // A failure without --stages: the same run again with the stages recorded, to say where it starts.
    if (!e.pass && !spec.stages) {
      spec.stages = checked.spec.stages = true;
      e = harness::run_and_judge(checked, factory);
    }
  } catch (const ConfigError&) {
    throw;
  } catch (const Error& ex) {
    // The configuration was legal: the implementation under test failed to complete, a failed verdict.
    out << "the run did not complete: " << printable(ex.what()) << "\nFAIL\n";
    return kNumericFailure;
  }

  out << "gdn-verify run: mode=" << cp::mode_name(spec.cp.mode) << " cp=" << spec.cp.cp << " tp=" << spec.cp.tp
      << " dtype=" << (*vm)["dtype"].as<std::string>() << " format=" << (*vm)["format"].as<std::string>()
      << " gates=" << (*vm)["gates"].as<std::string>() << " seed=" << spec.seed << " backend=" << backend << "\n";
  nlohmann::json report = nlohmann::json::array();
  std::string first_line;
  for (std::size_t i = 0; i < e.runs.size(); ++i) {
    const std::vector<harness::TensorVerdict>& rows = e.verdicts[i];
    out << "micro-batch " << i + 1 << "/" << e.runs.size() << " (cp=" << e.runs[i].cp_size << ")"
        << (spec.micro_batch_lengths.empty() ? "" : ", lengths " + comma_list(spec.micro_batch_lengths[i])) << "\n";
    probes::write_verdict_rows(rows, out);
    if (!std::all_of(rows.begin(), rows.end(), [](const harness::TensorVerdict& v) { return v.pass; }))
      probes::write_verdict_grid(rows, e.oracles[i], e.runs[i], e.cases[e.cases.size() == 1 ? 0 : i], out);
    out << "  collectives of rank 0, forward:\n"
        << indented(comm::format_counters(e.runs[i].forward)) << "  collectives of rank 0, backward:\n"
        << indented(comm::format_counters(e.runs[i].backward));
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& r : rows)
      tensors.push_back({{"name", r.name},
                         {"max_abs", r.m.max_abs},
                         {"rel_rms", r.m.rel_rms},
                         {"gate", r.gate},
                         {"one_minus_cos", r.m.one_minus_cos},
                         {"pass", r.pass},
                         {"min_atol", r.tol.min_atol},
                         {"min_rtol", r.tol.min_rtol},
                         {"histogram", decade_histogram(r.tol)}});
    report.push_back({{"cp", e.runs[i].cp_size},
                      {"tensors", tensors},
                      {"forward", probes::counters_json(e.runs[i].forward)},
                      {"backward", probes::counters_json(e.runs[i].backward)}});
    if (spec.format == Format::Thd) report.back()["lengths"] = harness::lengths_of(spec, i);
    const harness::Case& k = e.cases[e.cases.size() == 1 ? 0 : i];
    if (const auto d = harness::first_divergence(rows, e.oracles[i], e.runs[i], k)) {
      report.back()["first_divergence"] = harness::divergence_json(*d);
      if (first_line.empty()) first_line = harness::divergence_line(*d);
    }
  }
  if (vm->count("json")) write_file_atomic((*vm)["json"].as<std::string>(), report.dump(2) + "\n");
  if (!first_line.empty()) out << first_line << "\n";
  out << (e.pass ? "PASS" : "FAIL") << "\n";
  return e.pass ? kPass : kNumericFailure;
}

}  // namespace gdnv::cli
