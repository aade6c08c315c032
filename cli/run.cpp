// gdn-verify run: the layer fwd+bwd under one CP mode on an in-process world, every tensor judged
// against the fp64 oracle, plus the collectives each direction performed.
#include <algorithm>
#include <fstream>
#include <iomanip>
#include <limits>
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

// The decades every row's |error| spans: the run table's one axis.
std::pair<int, int> decade_span(const std::vector<harness::TensorVerdict>& rows) {
  int lo = std::numeric_limits<int>::max(), hi = std::numeric_limits<int>::min();
  for (const auto& r : rows)
    if (!r.tol.decades.empty()) {
      lo = std::min(lo, r.tol.decades.begin()->first);
      hi = std::max(hi, r.tol.decades.rbegin()->first);
    }
  return {lo, hi};  // lo > hi: no error anywhere
}

void print_rows(const std::vector<harness::TensorVerdict>& rows, std::ostream& out) {
  out << "  " << std::left << std::setw(32) << "tensor" << std::right << std::setw(11) << "max_abs" << std::setw(11)
      << "rel_rms" << std::setw(11) << "gate" << std::setw(11) << "1-cos" << std::setw(8) << "result\n";
  for (const auto& r : rows) {
    out << "  " << std::left << std::setw(32) << r.name << std::right << std::scientific << std::setprecision(3)
        << std::setw(11) << r.m.max_abs << std::setw(11) << r.m.rel_rms << std::setw(11) << r.gate << std::setw(11);
    if (r.m.bitwise) out << "-";  // bitwise identical: no angle to measure
    else out << r.m.one_minus_cos;
    out << std::setw(7) << (r.pass ? "pass" : "FAIL") << "\n";
  }
  const auto [lo, hi] = decade_span(rows);
  out << "  what would pass elementwise, and |error| by decade (bar height: log count, per tensor):\n"
      << "  " << std::left << std::setw(32) << "tensor" << std::right << std::setw(11) << "min_atol" << std::setw(11)
      << "min_rtol" << std::setw(8) << "exact"
      << (hi < lo ? "" : "  " + decade_str(lo) + " .. " + decade_str(hi) + " (one column a decade)") << "\n";
  for (const auto& r : rows)
    out << "  " << std::left << std::setw(32) << r.name << std::right << std::scientific << std::setprecision(3)
        << std::setw(11) << r.tol.min_atol << std::setw(11) << r.tol.min_rtol << std::setw(8) << r.tol.exact << "  |"
        << decade_bars(r.tol, lo, hi) << "|" << (r.tol.nonfinite ? " nan/inf " + std::to_string(r.tol.nonfinite) : "")
        << "\n";
  out << std::defaultfloat;
}

// Every micro-batch of one run of `spec`, judged against its oracle (stages included when spec.stages).
struct Evaluated {
  std::vector<harness::Case> cases;
  std::vector<harness::MicroBatchRun> runs;
  std::vector<harness::Answer> oracles;  // by run
  std::vector<std::vector<harness::TensorVerdict>> verdicts;
  bool pass = true;
};

Evaluated evaluate(const harness::CheckedRun& run, const cp::BackendFactory& factory) {
  const harness::RunSpec& spec = run.spec;
  Evaluated e;
  // One case per micro-batch when each has its own packing (and then its own oracle), else one for all.
  e.cases = harness::make_cases(spec);
  e.runs = harness::run_in_process(run, e.cases, factory);
  for (std::size_t i = 0; i < e.runs.size(); ++i) {
    const harness::Case& k = e.cases[e.cases.size() == 1 ? 0 : i];
    e.oracles.push_back(harness::oracle_answer(k, harness::stage_request(spec, e.runs[i].cp_size)));
    e.verdicts.push_back(
        harness::judge_answer(e.oracles[i], e.runs[i].answer, harness::oracle_gates(k, e.oracles[i], spec.dtype)));
    for (const auto& v : e.verdicts[i]) e.pass = e.pass && v.pass;
  }
  return e;
}

// A failing micro-batch's tensors, error / gate over each CP rank's own elements: which rank goes wrong.
void print_rank_grid(const std::vector<harness::TensorVerdict>& rows, const Evaluated& e, std::size_t i,
                     std::ostream& out) {
  std::vector<std::pair<std::string, probes::Rule>> gated;
  for (const auto& v : rows) {
    if (v.missing) continue;
    probes::Rule rule;
    rule.max_rel_rms = v.gate;
    gated.emplace_back(v.name, rule);
  }
  const harness::Case& k = e.cases[e.cases.size() == 1 ? 0 : i];
  probes::write_rank_table(
      probes::rank_grid("  error / gate over each rank's own elements (above 1 fails):", gated,
                        probes::answer_file(e.oracles[i]), probes::answer_file(e.runs[i].answer), e.runs[i], k),
      out);
}

// The active configuration in the upstream layer's own words, printed once when CP is in use.
std::string upstream_config_line(const harness::RunSpec& spec) {
  const ref::LayerConfig layer(spec.layer);
  return "[GDN CP] linear_cp_mode=" + std::string(cp::mode_name(spec.cp.mode)) + " TP=" + std::to_string(spec.cp.tp) +
         " max_CP=" + std::to_string(spec.cp.cp) + " key_heads=" + std::to_string(layer.Hk()) +
         " value_heads=" + std::to_string(layer.Hv()) + "\n";
}

std::string indented(const std::string& lines) {
  std::string out;
  std::size_t begin = 0;
  while (begin < lines.size()) {
    const std::size_t end = lines.find('\n', begin);
    out += "    " + lines.substr(begin, end - begin + 1);
    begin = end == std::string::npos ? lines.size() : end + 1;
  }
  return out;
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
  Evaluated e;
  try {
    e = evaluate(checked, factory);
    // A failure without --stages: the same run again with the stages recorded, to say where it starts.
    if (!e.pass && !spec.stages) {
      spec.stages = checked.spec.stages = true;
      e = evaluate(checked, factory);
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
    print_rows(rows, out);
    if (!std::all_of(rows.begin(), rows.end(), [](const harness::TensorVerdict& v) { return v.pass; }))
      print_rank_grid(rows, e, i, out);
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
