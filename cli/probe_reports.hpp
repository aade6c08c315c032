#pragma once
// The report options shared by `compare` and the `probe` subcommands: the text report on stdout, and
// on request the same Comparison as JSON and markdown files (written atomically).
#include <chrono>
#include <iosfwd>

#include "cli/command.hpp"
#include "core/file.hpp"
#include "probes/compare.hpp"
#include "probes/report.hpp"

namespace gdnv::cli {

using Clock = std::chrono::steady_clock;

// --failures-only, --all: which tensors the text report lists.
void add_listing_options(po::options_description& options);
// The listing the options ask for; without either, failures only when stdout is a terminal and `c`
// fails (a terminal shows the failure first; a pipe or a file gets every tensor). The counts line's
// time is from `start`.
probes::TextOptions listing(const probes::Comparison& c, const po::variables_map& vm, Clock::time_point start);
void add_report_options(po::options_description& options);  // --json FILE, --markdown FILE, and the listing
// --json and --markdown as given, for check_outputs before the comparison runs.
std::vector<OutputPath> report_outputs(const po::variables_map& vm);
// Writes the requested files (both or neither), then the text report (its counts line timed from `start`:
// when the command began its work); returns the comparison's exit code.
int report(const probes::Comparison& c, const po::variables_map& vm, std::ostream& out,
           Clock::time_point start = Clock::now());

}  // namespace gdnv::cli
