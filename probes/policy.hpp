#pragma once
// Tolerance policies of `gdn-verify compare` and the probes: a default rule plus per-tensor rules
// matched by exact name, else by the first glob (`grad::*`) in file order. A rule's keys override the
// default's; keys it leaves out are inherited. JSON form:
//   {"default": {"atol": 2e-3, "rtol": 1e-2, "min_cos": 0.9999},
//    "tensors": {"grad::A_log": {"max_rel_rms": 5e-2}, "out": {"exact": true}}}
// Keys: atol, rtol (elementwise |cand - ref| <= atol + rtol |ref|, allowing max_mismatch_frac of the
// elements, default 0), normwise (true: the bound is atol + rtol max|ref| for every element, the
// upstream numeric probe's rule), min_cos (cosine similarity), max_rel_rms, exact (raw bytes identical).
// Unknown keys are errors, never ignored.
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gdnv::probes {

struct Rule {
  std::optional<double> atol, rtol, min_cos, max_rel_rms, max_mismatch_frac;
  std::optional<bool> exact, normwise;

  // This rule's keys over `base`'s.
  Rule over(const Rule& base) const;
};

struct Policy {
  std::string name;  // a built-in's name or the file's path
  Rule default_rule;
  std::vector<std::pair<std::string, Rule>> tensors;  // pattern -> rule, in file order

  Rule rule_for(const std::string& tensor) const;
};

// docs/DESIGN.md §4's gates: "cp1-vs-old" (atol 2e-4, rtol 2e-3, cos >= 0.99999), "cp-vs-cp1" (atol 2e-3,
// rtol 1e-2, cos >= 0.9999), "bitwise" (exact); and "upstream-probe", the upstream numeric probe's own
// pass rule: max_abs <= 2e-4 + 2e-3 max|ref| and cos >= 0.99999 (norm-wise, so looser than cp1-vs-old
// on small elements of a tensor with large ones).
const std::vector<Policy>& builtin_policies();
// A built-in name or a JSON file; ConfigError (bad name or key, wrong type) / IoError (unreadable).
Policy load_policy(const std::string& name_or_path);

}  // namespace gdnv::probes
