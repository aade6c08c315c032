#pragma once
// The report options shared by `compare` and the `probe` subcommands: the text report on stdout, and
// on request the same Comparison as JSON and markdown files (written atomically).
#include <iosfwd>

#include "cli/command.hpp"
#include "core/file.hpp"
#include "probes/compare.hpp"

namespace gdnv::cli {

void add_report_options(po::options_description& options);  // --json FILE, --markdown FILE
// --json and --markdown as given, for check_outputs before the comparison runs.
std::vector<OutputPath> report_outputs(const po::variables_map& vm);
// Writes the requested files (both or neither), then the text report; returns the comparison's exit code.
int report(const probes::Comparison& c, const po::variables_map& vm, std::ostream& out);

}  // namespace gdnv::cli
