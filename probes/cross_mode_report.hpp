#pragma once
// `probe cross-mode`'s report beyond the comparison with cp1 (docs/DESIGN.md §4, §8): the third-party
// tensors judged by their band alone and the deviation ratios, as text lines and as the --json report
// (docs/json_format.md), so a gate reads the verdict from the JSON and never from the text.
#include <iosfwd>
#include <string>

#include "probes/checks.hpp"

namespace gdnv::probes {

std::string band_only_line(const BandOnly& b);
std::string deviation_line(const DeviationRatio& d);
// The deviation-ratio block of the text report: each mode's line and its rule's count.
void write_deviation(const CrossMode& r, std::ostream& out);
// The line naming where a failing image first fails: the first divergence from cp1, else "first divergence: "
// and the first failing deviation ratio in propagation order; "" when the image passes.
std::string first_failure(const CrossMode& r);
// The comparison's counts line, with the deviation ratios outside their bound counted before the time.
std::string counts_line(const CrossMode& r, double seconds);
// The comparison's JSON (to_json) with `pass` the whole verdict, `band_only`, `deviation_ratios` (each with
// its `pass` and text `line`), `deviation_skipped`, and `first_failure` (null when the image passes).
std::string to_json(const CrossMode& r);

}  // namespace gdnv::probes
