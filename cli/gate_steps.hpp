#pragma once
// The steps of `gdn-verify gate`, in the order it runs them. Each returns how many cases it checked,
// how many failed (with the first failure's label, detail and reproduce command), or that it was
// skipped and why. Every case has a label unique within its step, so `gate --step S --case LABEL`
// runs that case alone.
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace gdnv::harness {
struct Answer;
}

namespace gdnv::cli {

// What a step is asked to run: the --quick matrix (a subset of the full one) or the full one, or,
// from `gate --case LABEL`, only the full matrix's case of that label.
struct StepOptions {
  bool quick = false;
  std::string only;

  // The --quick matrix, unless one case of the full matrix is asked for.
  bool quick_matrix() const { return quick && only.empty(); }
};

struct StepResult {
  explicit StepResult(const StepOptions& options = {}) : only(options.only) {}

  int cases = 0;
  int failed = 0;
  std::string label;        // the first failing case's
  std::string detail;       // the first failure: "<label>: <why>"
  std::string reproduce;    // the first failure's own command (run/probe/fixtures), if it has one
  std::string divergence;   // the first failure's "first divergence: ..." line (CP matrix steps), if known
  std::string skip_reason;  // non-empty: the step could not run here (never a pass)
  std::string only;         // StepOptions::only
  int notes = 0;            // things worth a look that are no failure (a precision gain), and the first
  std::string first_note;
  struct Failure {
    std::string label, why, reproduce;
  };
  std::vector<Failure> failures;  // every failing case check() saw, in order (for a report per case)

  // Whether the case of this label runs (steps skip the work of unselected cases).
  bool selected(const std::string& case_label) const { return only.empty() || case_label == only; }
  // Counts one case; a failure keeps the first label, detail and command. An unselected case is not
  // counted.
  void check(bool ok, const std::string& case_label, const std::string& why, const std::string& command = "") {
    if (!selected(case_label)) return;
    ++cases;
    if (ok) return;
    ++failed;
    failures.push_back({case_label, why, command});
    if (!detail.empty()) return;
    label = case_label;
    detail = case_label + (why.empty() ? "" : ": " + why);
    reproduce = command;
  }
  // Runs a selected case whose check returns "" when it holds, else why not (an Error is a failure too).
  void check_case(const std::string& case_label, const std::function<std::string()>& why) {
    if (!selected(case_label)) return;
    std::string what;
    try {
      what = why();
    } catch (const Error& e) {
      what = e.what();
    }
    check(what.empty(), case_label, what);
  }
  void add_note(const std::string& text) {
    if (notes++ == 0) first_note = text;
  }
};

struct GateStep {
  std::string name;
  std::function<StepResult(const StepOptions&)> run;
};

const std::vector<GateStep>& gate_steps();

// Seeded THD cu_seqlens for the gate's cases: 1..max_sequences sequences, each 2W times 1..max_units tokens
// (zigzag needs multiples of 2W), drawn from the stream `stream` of `seed` (core/rng.hpp).
std::vector<std::int64_t> seeded_cu(int W, std::uint64_t seed, const char* stream, int max_sequences, int max_units);

// The CP matrices' judgement of one micro-batch (cli/gate_steps_cp.cpp): "" when out, grad_hidden and
// every parameter gradient of `got` are within their gates and finite, else the first that is not,
// "<name>: rel_rms <e> >= gate <g>", "<name>: <n> NaN, <m> Inf" or "<name>: missing from the run".
std::string first_tensor_outside_gate(const harness::Answer& oracle, const harness::Answer& got,
                                      const std::map<std::string, double>& gates);

// Steps by theme (cli/gate_steps_*.cpp).
StepResult safetensors_round_trip(const StepOptions& options);
StepResult reference_vectors(const StepOptions& options);
StepResult verdict_known_answers(const StepOptions& options);  // cli/gate_steps_judge.cpp
StepResult oracle_self_checks(const StepOptions& options);
StepResult layout_properties(const StepOptions& options);
StepResult adjoint_dot_products(const StepOptions& options);
StepResult cp_mode_matrix(const StepOptions& options);
StepResult precision_rules(const StepOptions& options);         // cli/gate_steps_rules.cpp
StepResult communicator_semantics(const StepOptions& options);  // cli/gate_steps_rules.cpp
StepResult mpi_transport(const StepOptions& options);           // cli/gate_steps_rules.cpp
StepResult illegal_combinations(const StepOptions& options);
StepResult fixture_verification(const StepOptions& options);
StepResult probe_self_compare(const StepOptions& options);
StepResult gpu_mode_matrix(const StepOptions& options);
StepResult emu_mode_matrix(const StepOptions& options);
StepResult training_known_answers(const StepOptions& options);  // cli/gate_steps_train.cpp
StepResult training_equivalence(const StepOptions& options);    // cli/gate_steps_train.cpp

// Precision regression (cli/gate_steps_precision.cpp): the catalog's deviations from the oracle against
// the committed baseline, or the one at `baseline_path`.
StepResult precision_regression(const StepOptions& options);
StepResult precision_regression_against(const StepOptions& options, const std::string& baseline_path);
// The committed baseline in the source tree (fixtures/precision_baseline.json).
std::string committed_precision_baseline();
// Runs the whole catalog and writes its deviations to `path` atomically; a line per step on `log`.
void write_precision_baseline(const std::string& path, std::ostream& log);

}  // namespace gdnv::cli
