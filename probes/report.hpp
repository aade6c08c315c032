#pragma once
// Renderers of a Comparison, swappable like google/benchmark's reporters: a text table (the CLI's
// stdout), JSON (machines) and markdown (a merge request comment). Each ends with the summary line.
#include <iosfwd>
#include <string>
#include <vector>

#include "harness/verdict.hpp"
#include "harness/world.hpp"
#include "probes/compare.hpp"

namespace gdnv::probes {

// How the text report lists tensors: every one (a bitwise-identical one on one line), or only those that
// fail or mismatch in structure (`failures_only`; the count left out is said). `seconds` >= 0 ends the
// report with a pytest-style line, "3 failed, 42 passed, 6 structural mismatches in 0.5 s".
struct TextOptions {
  bool failures_only = false;
  double seconds = -1;
};

void write_text(const Comparison& c, std::ostream& out, const TextOptions& options = {});
// write_text without the verdict line (PASS/FAIL) and the counts line, for callers that add checks of
// their own (then write_counts).
void write_rows(const Comparison& c, std::ostream& out, const TextOptions& options = {});
// "3 failed, 42 passed, 6 structural mismatches in 0.5 s" (zero counts left out, as pytest does).
std::string counts_line(const Comparison& c, double seconds);
// A failing comparison's "first divergence: ..." line (harness/verdict.hpp), nothing when it passes or
// names none.
void write_divergence(const Comparison& c, std::ostream& out);
// "<title>" then a row per tensor: its name, a cell per rank ("rank0" ...), and the whole tensor's.
void write_rank_table(const RankTable& table, std::ostream& out);
// run's table of an answer judged against the oracle: a row per tensor (max_abs, rel_rms, gate, 1-cos,
// result), then what would pass elementwise and |error| by decade on one axis for every tensor.
void write_verdict_rows(const std::vector<harness::TensorVerdict>& rows, std::ostream& out);
// The judged tensors' error / gate over each CP rank's own elements of `run`.
void write_verdict_grid(const std::vector<harness::TensorVerdict>& rows, const harness::Answer& oracle,
                        const harness::MicroBatchRun& run, const harness::Case& k, std::ostream& out);
std::string to_json(const Comparison& c);
std::string to_markdown(const Comparison& c);

}  // namespace gdnv::probes
