#pragma once
// Renderers of a Comparison, swappable like google/benchmark's reporters: a text table (the CLI's
// stdout), JSON (machines) and markdown (a merge request comment). Each ends with the summary line.
#include <iosfwd>
#include <string>

#include "probes/compare.hpp"

namespace gdnv::probes {

void write_text(const Comparison& c, std::ostream& out);
// write_text without the verdict line (PASS/FAIL), for callers that add checks of their own.
void write_rows(const Comparison& c, std::ostream& out);
// A failing comparison's "first divergence: ..." line (harness/verdict.hpp), nothing when it passes or
// names none.
void write_divergence(const Comparison& c, std::ostream& out);
std::string to_json(const Comparison& c);
std::string to_markdown(const Comparison& c);

}  // namespace gdnv::probes
