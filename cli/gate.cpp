// gdn-verify gate: the pre-merge job. Runs each step in order with a progress line (on a terminal, the
// step's time ticking while it runs), then a table
// (step, cases, result, time); exits 0 only when every step passes. --junit writes the same as JUnit
// XML for CI systems; --quick runs a smaller matrix; --list-faults lists the planted faults.
#include <unistd.h>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <ostream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/progress.hpp"
#include "core/vectors.hpp"
#include "faults/registry.hpp"
#include "fixtures/fixtures.hpp"
#include "gate/precision_regression.hpp"
#include "gate/report.hpp"
#include "gate/reproduce.hpp"
#include "gate/steps.hpp"

namespace gdnv::cli {
namespace {

using gate::gate_case_command;
using gate::junit_xml;
using gate::Step;
using gate::StepOptions;
using gate::StepResult;
using Row = gate::StepRow;

void list_faults(std::ostream& out) {
  out << "planted faults (GDNV_FAULT=<name>; honoured by the implementation under test, never by the oracle):\n";
  for (const auto& f : all_faults()) out << "  " << std::left << std::setw(32) << f.name << f.what << "\n";
}

// The steps to run: all, or the one --step names.
std::vector<Step> selected_steps(const po::variables_map& vm) {
  const auto& steps = gate::steps();
  if (!vm.count("step")) {
    if (vm.count("case")) throw ConfigError("gate --case needs --step: give the step the case belongs to");
    return steps;
  }
  const std::string name = vm["step"].as<std::string>();
  std::string known;
  for (const auto& step : steps) {
    if (step.name == name) return {step};
    known += std::string(known.empty() ? "'" : ", '") + step.name + "'";
  }
  throw ConfigError("gate --step '" + name + "' is not a gate step: use one of " + known);
}

void print_failure(std::ostream& out, const Step& step, const StepResult& result) {
  out << "    " << result.failed << " of " << result.cases << " failed; first: " << result.detail << "\n"
      << "    reproduce: " << (result.reproduce.empty() ? gate_case_command(step.name, result.label) : result.reproduce)
      << "\n";
  if (!result.divergence.empty()) out << "    " << result.divergence << "\n";
}

}  // namespace

int gate_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description options("gate options");
  // clang-format off
  options.add_options()
      ("junit", po::value<std::string>(), "also write the result as JUnit XML to FILE (a testcase per step and per failing case)")
      ("quick", po::bool_switch(), "a smaller matrix (under 15 s)")
      ("list-faults", po::bool_switch(), "list the planted faults and exit")
      ("step", po::value<std::string>(), "run only the step of this name")
      ("case", po::value<std::string>(), "with --step: run only the case of this label (a failing gate prints it)")
      ("backend", po::value<std::string>()->default_value("cpu"),
       "cpu: the CUDA step runs where a device is usable, else is skipped; cuda: the device is required");
  // clang-format on
  const auto vm = parse_options(
      "gate", "[--quick] [--junit FILE] [--list-faults] [--step NAME [--case LABEL]] [--backend cpu|cuda]", options, {},
      args, out);
  if (!vm) return kPass;
  if (const std::string backend = (*vm)["backend"].as<std::string>(); backend == "cuda")
    (void)parse_backend_option(backend);  // no device: the one line naming the fix, exit 3
  else if (backend != "cpu") throw ConfigError("gate --backend '" + backend + "' is not supported: use cpu or cuda");
  // The gate's inputs: the committed fixtures, precision baseline and reference vectors.
  check_outputs(output_options(*vm, {"junit"}),
                {fixtures::committed_fixtures_dir(), gate::committed_precision_baseline(), vector_path("")});
  if ((*vm)["list-faults"].as<bool>()) {
    list_faults(out);
    return kPass;
  }
  const StepOptions step_options{(*vm)["quick"].as<bool>(),
                                 vm->count("case") ? (*vm)["case"].as<std::string>() : std::string()};
  const bool quick = step_options.quick;
  const std::vector<Step> steps = selected_steps(*vm);
  std::vector<Row> rows;
  int failed_steps = 0;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    out << "[" << i + 1 << "/" << steps.size() << "] " << steps[i].name << " ..." << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    StepResult result(step_options);
    try {
      // A long step on a terminal shows its time going by after the "..." (erased before the verdict).
      const Ticker ticker("", ::isatty(STDOUT_FILENO) ? progress_style(false) : ProgressStyle::Off, std::cerr);
      result = steps[i].run(step_options);
    } catch (const std::exception& e) {
      // The step could not run its cases: one failure, reproduced by the step alone (no label).
      result = StepResult();
      result.cases = result.failed = 1;
      result.detail = e.what();
    }
    rows.push_back(
        {steps[i].name, result, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
    if (!step_options.only.empty() && result.cases == 0 && result.skip_reason.empty())
      throw ConfigError("gate step '" + std::string(steps[i].name) + "' has no case '" + step_options.only +
                        "': give a label exactly as a failing gate prints it");
    out << " " << (result.skip_reason.empty() ? (result.failed ? "FAIL" : "ok") : "skipped") << "\n";
    if (!result.skip_reason.empty()) out << "    " << result.skip_reason << "\n";
    if (result.notes) out << "    " << result.notes << " note(s); first: " << result.first_note << "\n";
    if (result.failed) {
      ++failed_steps;
      print_failure(out, steps[i], result);
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "\n"
      << std::left << std::setw(28) << "step" << std::right << std::setw(8) << "cases" << std::setw(8) << "result"
      << std::setw(10) << "time"
      << "\n";
  for (const auto& row : rows)
    out << std::left << std::setw(28) << row.name << std::right << std::setw(8) << row.result.cases << std::setw(8)
        << row.verdict() << std::setw(9) << std::fixed << std::setprecision(2) << row.seconds << "s\n";
  out << "gate" << (quick ? " --quick" : "") << ": " << rows.size() << " steps, " << failed_steps << " failed, "
      << std::setprecision(1) << total << " s\n"
      << (failed_steps ? "FAIL" : "PASS") << "\n";
  if (vm->count("junit")) write_file_atomic((*vm)["junit"].as<std::string>(), junit_xml(rows, total));
  return failed_steps ? kNumericFailure : kPass;
}

}  // namespace gdnv::cli
