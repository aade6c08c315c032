#pragma once
// What every step of `gdn-verify gate` shares: what it is asked to run, and what it returns: how many
// cases it checked, how many failed (with the first failure's label, detail and reproduce command), or
// that it was skipped and why. Every case has a label unique within its step, so
// `gate --step S --case LABEL` runs that case alone.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace gdnv::gate {

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

// A step: its name as the gate prints it and what runs it. Each step's file (gate/<step>.cpp) ends in its
// Step; gate/steps.cpp collects them in the order the gate runs them.
struct Step {
  const char* name;
  StepResult (*run)(const StepOptions&);
};

// Seeded THD cu_seqlens for the gate's cases: 1..max_sequences sequences, each 2W times 1..max_units tokens
// (zigzag needs multiples of 2W), drawn from the stream `stream` of `seed` (core/rng.hpp).
std::vector<std::int64_t> seeded_cu(int W, std::uint64_t seed, const char* stream, int max_sequences, int max_units);

// Counts the case `what`: the relative RMS of `got` against `ref` below `gate`.
void check_rel_rms(StepResult& r, const std::string& what, const Tensor& ref, const Tensor& got, double gate);

}  // namespace gdnv::gate
