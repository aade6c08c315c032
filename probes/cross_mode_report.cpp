#include "probes/cross_mode_report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "probes/report.hpp"

namespace gdnv::probes {

std::string band_only_line(const BandOnly& b) {
  char line[256];
  std::snprintf(line, sizeof line,
                "band only %s: cp1 itself rel_rms %.3e vs oracle > kernel gate %.0e; bound: the band or its "
                "class's oracle gate %.3e (docs/DESIGN.md §4)",
                b.tensor.c_str(), b.cp1_rel_rms, b.gate, b.class_gate);
  return line;
}

std::string deviation_line(const DeviationRatio& d) {
  char line[256];
  std::snprintf(line, sizeof line, "deviation %s %s: rel_rms %.3e vs oracle, %s %.3e, bound %.3e  %s", d.mode.c_str(),
                d.tensor.c_str(), d.rel_rms, d.base.c_str(), d.base_rel_rms, d.bound, d.pass() ? "pass" : "FAIL");
  return line;
}

void write_deviation(const CrossMode& r, std::ostream& out) {
  if (r.ratios.empty()) {
    out << "deviation ratio: skipped (" << r.skipped << ")\n";
    return;
  }
  int outside = 0;
  for (const auto& d : r.ratios) {
    out << deviation_line(d) << "\n";
    outside += !d.pass();
  }
  out << "deviation ratio ("
      << (r.ratios.front().base == "headwise"
              ? "<= 4x headwise's"
              : "<= sqrt((13 + W)/14 F(1 - 1e-6; nu, nu)) x cp1's, nu its effective roundings, docs/DESIGN.md §4")
      << ", floor 1e-6): " << r.ratios.size() << " checked, " << outside << " outside\n";
}

std::string first_failure(const CrossMode& r) {
  if (r.exit_code() == 0) return "";
  if (r.vs_cp1.divergence && r.vs_cp1.exit_code() != 0) return harness::divergence_line(*r.vs_cp1.divergence);
  for (const auto& d : r.ratios)
    if (!d.pass()) return "first divergence: " + deviation_line(d);
  return "";
}

std::string counts_line(const CrossMode& r, double seconds) {
  std::string line = counts_line(r.vs_cp1, seconds);
  const auto outside = std::count_if(r.ratios.begin(), r.ratios.end(), [](const auto& d) { return !d.pass(); });
  if (outside)
    line.insert(line.rfind(" in "),
                ", " + std::to_string(outside) + " deviation ratio" + (outside == 1 ? "" : "s") + " outside its bound");
  return line;
}

std::string to_json(const CrossMode& r) {
  nlohmann::json report = nlohmann::json::parse(to_json(r.vs_cp1));
  nlohmann::json band = nlohmann::json::array(), ratios = nlohmann::json::array();
  for (const auto& b : r.band_only)
    band.push_back({{"tensor", b.tensor},
                    {"cp1_rel_rms", b.cp1_rel_rms},
                    {"gate", b.gate},
                    {"class_gate", b.class_gate},
                    {"line", band_only_line(b)}});
  for (const auto& d : r.ratios)
    ratios.push_back({{"mode", d.mode},
                      {"tensor", d.tensor},
                      {"base", d.base},
                      {"rel_rms", d.rel_rms},
                      {"base_rel_rms", d.base_rel_rms},
                      {"bound", d.bound},
                      {"pass", d.pass()},
                      {"line", deviation_line(d)}});
  report.update(
      {{"pass", r.exit_code() == 0},
       {"band_only", band},
       {"deviation_ratios", ratios},
       {"deviation_skipped", r.skipped},
       {"first_failure", first_failure(r).empty() ? nlohmann::json(nullptr) : nlohmann::json(first_failure(r))}});
  return report.dump(2) + "\n";
}

}  // namespace gdnv::probes
