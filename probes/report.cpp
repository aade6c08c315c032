#include "probes/report.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>

#include "core/text.hpp"

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
          sci(t.m.one_minus_cos),
          sci(t.m.snr_db),
          mismatched_str(t),
          std::to_string(t.m.nan_ref) + "/" + std::to_string(t.m.nan_cand),
          std::to_string(t.m.inf_ref) + "/" + std::to_string(t.m.inf_cand),
          t.why,
          is_float_result(t) ? sci(t.tol->min_atol) : "-",
          is_float_result(t) ? sci(t.tol->min_rtol) : "-",
          is_float_result(t) ? decade_histogram(*t.tol) : "-"};
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
  nlohmann::json j = cp::divergence_json(*c.divergence);
  j["dump"] = c.divergence_in;
  return j;
}

}  // namespace

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
  if (c.divergence && c.exit_code() != 0) out << cp::divergence_line(*c.divergence) << "\n";
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
      out << "    min atol " << r[12] << " (rtol 0), min rtol " << r[13] << " (atol 0), |err| by decade " << r[14]
          << "\n";
  }
  if (hidden)
    out << "(" << hidden << " passing tensor" << (hidden == 1 ? "" : "s") << " not listed: --all lists every one)\n";
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
                {"why", t.why}});
      if (is_float_result(t))
        j.update({{"min_atol", t.tol->min_atol},
                  {"min_rtol", t.tol->min_rtol},
                  {"exact", t.tol->exact},
                  {"decades", t.tol->decades},
                  {"histogram", decade_histogram(*t.tol)}});
    }
    tensors.push_back(std::move(j));
  }
  const nlohmann::json report = {{"name", c.name},           {"policy", c.policy},
                                 {"compared", c.compared()}, {"bitwise", c.bitwise()},
                                 {"failed", c.failed()},     {"structural_mismatch", c.structural_mismatch()},
                                 {"summary", c.summary()},   {"pass", c.exit_code() == 0},
                                 {"tensors", tensors},       {"first_divergence", divergence_json(c)}};
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
  md << "\n**" << c.summary() << "** — " << (c.exit_code() == 0 ? "PASS" : "FAIL") << "\n";
  if (c.divergence && c.exit_code() != 0) md << "\n`" << cp::divergence_line(*c.divergence) << "`\n";
  return md.str();
}

}  // namespace gdnv::probes
