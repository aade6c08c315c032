#include "probes/report.hpp"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "core/text.hpp"
#include "probes/checks.hpp"
#include "probes/image.hpp"

namespace gdnv::probes {
namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

// "1.000e-02 at [3, 0, 7]"; no index for 0 (no element differs).
std::string located(double v, const Shape& shape, std::int64_t index) {
  return v > 0 ? sci(v) + " at " + index_str(shape, index) : sci(v);
}

// Names come from the files compared: printable, never raw control bytes.
std::string label(const TensorResult& t) { return printable(t.file.empty() ? t.name : t.file + ":" + t.name); }

std::string mismatched_str(const TensorResult& t) {
  if (!t.rule.atol && !t.rule.rtol) return "n/a (no atol/rtol)";
  char buf[64];
  const double pct = t.m.numel ? 100.0 * static_cast<double>(t.mismatched) / static_cast<double>(t.m.numel) : 0.0;
  std::snprintf(buf, sizeof buf, "%lld / %lld (%.3g%%)", static_cast<long long>(t.mismatched),
                static_cast<long long>(t.m.numel), pct);
  return buf;
}

// Tolerances are measured on float tensors only (an integer tensor is judged bitwise).
bool is_float_result(const TensorResult& t) { return t.structure.empty() && t.tol.has_value(); }

std::string result_str(const TensorResult& t) { return !t.structure.empty() ? "STRUCT" : t.pass ? "pass" : "FAIL"; }

// The cells of one row: what both reporters print.
std::vector<std::string> cells(const TensorResult& t, const Shape& shape) {
  if (!t.structure.empty()) return {label(t), result_str(t), t.structure};
  return {label(t),
          result_str(t),
          t.m.bitwise       ? "yes"
          : t.numeric_equal ? "no (numerically equal)"
                            : "no",
          located(t.m.max_abs, shape, t.m.max_abs_index),
          located(t.m.max_rel, shape, t.m.max_rel_index),
          sci(t.m.rel_rms),
          t.m.bitwise ? "-" : sci(t.m.one_minus_cos),  // nothing to measure
          sci(t.m.snr_db),
          mismatched_str(t),
          std::to_string(t.m.nan_ref) + "/" + std::to_string(t.m.nan_cand),
          std::to_string(t.m.inf_ref) + "/" + std::to_string(t.m.inf_cand),
          t.why,
          is_float_result(t) ? sci(t.tol->min_atol) : "-",
          is_float_result(t) ? sci(t.tol->min_rtol) : "-",
          is_float_result(t) ? decade_histogram(*t.tol) : "-"};
}

// "|err| by decade 1e-13 [▁▃█▂] 1e-10 (log height, most at 1e-11: 40), 5 exact": the histogram as bars.
std::string bars_line(const Tolerances& t) {
  std::string line = "|err| by decade ";
  if (t.decades.empty()) {
    line += "none above 0";
  } else {
    const auto peak = std::max_element(t.decades.begin(), t.decades.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    const int lo = t.decades.begin()->first, hi = t.decades.rbegin()->first;
    line += decade_str(lo) + " [" + decade_bars(t, lo, hi) + "] " + decade_str(hi) + " (log height, most at " +
            decade_str(peak->first) + ": " + std::to_string(peak->second) + ")";
  }
  line += ", " + std::to_string(t.exact) + " exact";
  if (t.nonfinite) line += ", " + std::to_string(t.nonfinite) + " nan/inf";
  return line;
}

// The bound a measured error is held to, printed beside it as torch.testing.assert_close does: max_abs
// against atol (norm-wise: atol + rtol max|ref|), max_rel against rtol (element-wise rules only).
std::optional<double> abs_bound(const TensorResult& t) {
  if (!t.rule.atol && !t.rule.rtol) return std::nullopt;
  const double atol = t.rule.atol.value_or(0), rtol = t.rule.rtol.value_or(0);
  return t.rule.normwise.value_or(false) ? atol + rtol * t.m.ref_max_abs : atol;
}
std::optional<double> rel_bound(const TensorResult& t) {
  if (!t.rule.rtol || t.rule.normwise.value_or(false)) return std::nullopt;
  return t.rule.rtol;
}
std::string allowed(const std::optional<double>& bound) { return bound ? " (up to " + sci(*bound) + " allowed)" : ""; }

const std::vector<std::string> kHeader = {"tensor",
                                          "result",
                                          "bitwise",
                                          "max_abs",
                                          "max_rel",
                                          "rel_rms",
                                          "1-cos",
                                          "snr_db",
                                          "mismatched",
                                          "nan ref/cand",
                                          "inf ref/cand",
                                          "why",
                                          "min atol (rtol 0)",
                                          "min rtol (atol 0)",
                                          "abs(err) by decade"};

// run --json's first_divergence plus the dump (mode) it was found in; null when the comparison passes.
nlohmann::json divergence_json(const Comparison& c) {
  if (!c.divergence || c.exit_code() == 0) return nullptr;
  nlohmann::json j = harness::divergence_json(*c.divergence);
  j["dump"] = c.divergence_in;
  return j;
}

nlohmann::json rank_tables_json(const Comparison& c) {
  nlohmann::json tables = nlohmann::json::array();
  for (const RankTable& table : c.rank_tables) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t i = 0; i < table.names.size(); ++i) {
      nlohmann::json row = {{"tensor", table.names[i]}, {"ranks", table.cells[i]}};
      if (!table.whole.empty()) row["whole"] = table.whole[i];
      rows.push_back(std::move(row));
    }
    tables.push_back({{"title", table.title}, {"world", table.world}, {"rows", std::move(rows)}});
  }
  return tables;
}

}  // namespace

void write_rank_table(const RankTable& table, std::ostream& out) {
  std::size_t width = 6;
  for (const auto& name : table.names) width = std::max(width, name.size());
  char cell[64];
  out << table.title << "\n  " << std::string(width, ' ');
  for (int r = 0; r < table.world; ++r) {
    std::snprintf(cell, sizeof cell, " %8s", ("rank" + std::to_string(r)).c_str());
    out << cell;
  }
  out << (table.whole.empty() ? "" : "     whole") << "\n";
  for (std::size_t i = 0; i < table.names.size(); ++i) {
    out << "  " << table.names[i] << std::string(width - table.names[i].size(), ' ');
    for (const std::string& c : table.cells[i]) {
      std::snprintf(cell, sizeof cell, " %8s", c.c_str());
      out << cell;
    }
    if (!table.whole.empty()) {
      std::snprintf(cell, sizeof cell, " %9s", table.whole[i].c_str());
      out << cell;
    }
    out << "\n";
  }
}

void write_text(const Comparison& c, std::ostream& out, const TextOptions& options) {
  write_rows(c, out, options);
  out << (c.exit_code() == 0 ? "PASS" : "FAIL") << "\n";
  write_divergence(c, out);
  if (options.seconds >= 0) out << counts_line(c, options.seconds) << "\n";
}

std::string counts_line(const Comparison& c, double seconds) {
  int structural = 0;
  for (const auto& t : c.tensors) structural += !t.structure.empty();
  std::string line;
  const auto add = [&](int n, const std::string& what) {
    if (n) line += (line.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(c.failed(), "failed");
  add(c.compared() - c.failed(), "passed");
  add(structural, structural == 1 ? "structural mismatch" : "structural mismatches");
  char time[32];
  std::snprintf(time, sizeof time, " in %.2f s", seconds);
  return (line.empty() ? "no tensors" : line) + time;
}

void write_divergence(const Comparison& c, std::ostream& out) {
  if (c.divergence && c.exit_code() != 0) out << harness::divergence_line(*c.divergence) << "\n";
}

void write_rows(const Comparison& c, std::ostream& out, const TextOptions& options) {
  out << "policy: " << c.policy << "\n";
  int hidden = 0;
  for (const auto& t : c.tensors) {
    const auto r = cells(t, t.shape);
    if (!t.structure.empty()) {
      out << r[0] << ": STRUCTURAL MISMATCH: " << t.structure << "\n";
      continue;
    }
    if (options.failures_only && t.pass) {
      ++hidden;
      continue;
    }
    if (t.pass && t.m.bitwise) {  // nothing to measure: no error, no bound
      out << r[0] << ": pass, bitwise yes\n";
      continue;
    }
    out << r[0] << ": " << r[1] << (t.why.empty() ? "" : " (" + t.why + ")") << ", bitwise " << r[2] << ", max_abs "
        << r[3] << allowed(abs_bound(t)) << ", max_rel " << r[4] << allowed(rel_bound(t)) << "\n"
        << "    rel_rms " << r[5] << allowed(t.rule.max_rel_rms) << ", 1-cos " << r[6]
        << allowed(t.rule.min_cos ? std::optional<double>(1 - *t.rule.min_cos) : std::nullopt) << ", snr " << r[7]
        << " dB, mismatched " << r[8] << ", nan " << r[9] << ", inf " << r[10] << "\n";
    if (is_float_result(t))
      out << "    min atol " << r[12] << " (rtol 0), min rtol " << r[13] << " (atol 0), " << bars_line(*t.tol) << "\n";
  }
  if (hidden)
    out << "(" << hidden << " passing tensor" << (hidden == 1 ? "" : "s") << " not listed: --all lists every one)\n";
  for (const RankTable& table : c.rank_tables) write_rank_table(table, out);
  out << c.summary() << "\n";
}

std::string to_json(const Comparison& c) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : c.tensors) {
    nlohmann::json j = {{"file", t.file}, {"name", t.name}, {"result", result_str(t)}};
    if (!t.structure.empty()) {
      j["structure"] = t.structure;
    } else {
      j.update({{"bitwise", t.m.bitwise},
                {"numeric_equal", t.numeric_equal},
                {"numel", t.m.numel},
                {"max_abs", t.m.max_abs},
                {"max_abs_index", index_str(t.shape, t.m.max_abs_index)},
                {"max_rel", t.m.max_rel},
                {"max_rel_index", index_str(t.shape, t.m.max_rel_index)},
                {"rel_rms", t.m.rel_rms},
                {"one_minus_cos", t.m.one_minus_cos},
                {"snr_db", t.m.snr_db},
                {"mismatched", t.mismatched},
                {"nan_ref", t.m.nan_ref},
                {"nan_cand", t.m.nan_cand},
                {"inf_ref", t.m.inf_ref},
                {"inf_cand", t.m.inf_cand},
                {"why", t.why},
                {"error_ratio", t.ratio}});
      if (is_float_result(t))
        j.update({{"min_atol", t.tol->min_atol},
                  {"min_rtol", t.tol->min_rtol},
                  {"exact", t.tol->exact},
                  {"decades", t.tol->decades},
                  {"histogram", decade_histogram(*t.tol)}});
    }
    tensors.push_back(std::move(j));
  }
  const nlohmann::json report = {{"name", c.name},
                                 {"policy", c.policy},
                                 {"compared", c.compared()},
                                 {"bitwise", c.bitwise()},
                                 {"failed", c.failed()},
                                 {"structural_mismatch", c.structural_mismatch()},
                                 {"summary", c.summary()},
                                 {"pass", c.exit_code() == 0},
                                 {"tensors", tensors},
                                 {"first_divergence", divergence_json(c)},
                                 {"rank_tables", rank_tables_json(c)}};
  return report.dump(2) + "\n";
}

std::string to_markdown(const Comparison& c) {
  std::ostringstream md;
  md << "### " << c.name << " (policy `" << c.policy << "`)\n\n|";
  for (const auto& h : kHeader) md << " " << h << " |";
  md << "\n|";
  for (std::size_t i = 0; i < kHeader.size(); ++i) md << " --- |";
  md << "\n";
  for (const auto& t : c.tensors) {
    auto row = cells(t, t.shape);
    row.resize(kHeader.size());
    md << "|";
    for (const auto& cell : row) md << " " << cell << " |";
    md << "\n";
  }
  for (const RankTable& table : c.rank_tables) {
    md << "\n" << table.title << "\n\n| tensor |";
    for (int r = 0; r < table.world; ++r) md << " rank" << r << " |";
    md << (table.whole.empty() ? "" : " whole |") << "\n|";
    for (int r = 0; r <= table.world + !table.whole.empty(); ++r) md << " --- |";
    md << "\n";
    for (std::size_t i = 0; i < table.names.size(); ++i) {
      md << "| " << table.names[i] << " |";
      for (const std::string& cell : table.cells[i]) md << " " << cell << " |";
      md << (table.whole.empty() ? "" : " " + table.whole[i] + " |") << "\n";
    }
  }
  md << "\n**" << c.summary() << "** — " << (c.exit_code() == 0 ? "PASS" : "FAIL") << "\n";
  if (c.divergence && c.exit_code() != 0) md << "\n`" << harness::divergence_line(*c.divergence) << "`\n";
  return md.str();
}

namespace {

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

}  // namespace

void write_verdict_rows(const std::vector<harness::TensorVerdict>& rows, std::ostream& out) {
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

void write_verdict_grid(const std::vector<harness::TensorVerdict>& rows, const harness::Answer& oracle,
                        const harness::MicroBatchRun& run, const harness::Case& k, std::ostream& out) {
  std::vector<std::pair<std::string, Rule>> gated;
  for (const auto& v : rows) {
    if (v.missing) continue;
    Rule rule;
    rule.max_rel_rms = v.gate;
    gated.emplace_back(v.name, rule);
  }
  write_rank_table(rank_grid("  error / gate over each rank's own elements (above 1 fails):", gated,
                             answer_file(oracle), answer_file(run.answer), run, k),
                   out);
}

}  // namespace gdnv::probes
