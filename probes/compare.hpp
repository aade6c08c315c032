#pragma once
// Two sets of tensors compared under a tolerance policy: safetensors files, or directories of them
// matched by file name. Structure first (a tensor or file missing on one side, a dtype or shape
// change: structural mismatch), then per tensor docs/DESIGN.md §4's metrics, bitwise identity (raw bytes,
// so -0/+0 and NaN payloads count) apart from numeric equality, and the policy's verdict.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/metrics.hpp"
#include "core/safetensors.hpp"
#include "harness/verdict.hpp"
#include "probes/policy.hpp"

namespace gdnv::probes {

struct TensorResult {
  std::string file;  // the file's name within the compared directories ("" for two files)
  std::string name;
  Shape shape;            // the reference's (indices below are into it)
  std::string structure;  // "" when both sides have it with one dtype and shape, else what differs
  Metrics m;
  bool numeric_equal = false;   // every element equal as a number (NaN matched with NaN, -0 == +0)
  std::int64_t mismatched = 0;  // elements outside the rule's atol + rtol |ref| (counted when it has either)
  Rule rule;
  bool pass = false;
  std::string why;                // the first criterion that failed
  std::optional<Tolerances> tol;  // float tensors: min atol (rtol 0), min rtol (atol 0), |error| by decade
  double ratio = 0;               // error_ratio: the measured error over its bound (above 1 fails a criterion)
};

// A report's table of one dump with a row per tensor (in the judged order) and a cell per CP rank, so a
// fault on some ranks shows at a glance: "pass" or a failing cell's error / bound ("12x"), or every cell's
// error / gate over the rank's own elements ("0.031"); "-" where the rank holds none of the tensor.
struct RankTable {
  std::string title;
  int world = 0;
  std::vector<std::string> names;
  std::vector<std::vector<std::string>> cells;  // [names][world]
  std::vector<std::string> whole;               // [names], the whole tensor's error / gate; empty: no such column
};

struct Comparison {
  std::string name;  // of the summary line: the candidate's file or directory name
  std::string policy;
  std::vector<TensorResult> tensors;  // in (file, name) order, structural mismatches included
  // Where a failing verdict starts (harness/verdict.hpp): the first tensor outside its gate in the judged
  // order, in the first failing dump (`divergence_in`: its mode); unset when it passes or is not judged.
  std::optional<harness::Divergence> divergence;
  std::string divergence_in;
  std::vector<RankTable> rank_tables;  // of a failing comparison: each judged dump's tensors by rank

  int compared() const;  // tensors with matching structure
  int bitwise() const;
  int failed() const;  // compared tensors outside tolerance
  bool structural_mismatch() const;
  // 0 pass, 1 numeric failure, 2 structural mismatch (docs/DESIGN.md §5's CLI exit codes).
  int exit_code() const;
  // "<name>: N tensors compared, K bitwise identical, F outside tolerance".
  std::string summary() const;
};

// The largest of `rule`'s measured errors over their bounds, on the elements `elements` (flat indices;
// empty: all): max |cand - ref| / (atol + rtol |ref|) (norm-wise: atol + rtol `ref_max_abs`), (1 - cos) /
// (1 - min_cos), rel_rms / max_rel_rms; +inf for a NaN/Inf on one side only, or a difference under an
// exact rule or one with every bound 0. 0 when the rule bounds nothing.
double error_ratio(const Tensor& ref, const Tensor& cand, const Rule& rule, double ref_max_abs,
                   const std::vector<std::int64_t>& elements = {});
// A ratio as a table cell: "0.031", "12", "1.5e+03", "inf".
std::string ratio_str(double ratio);

// One tensor against its reference under `rule`; same dtype and shape.
TensorResult compare_tensor(const std::string& name, const Tensor& ref, const Tensor& cand, const Rule& rule);
// Every tensor of two files; `file` labels the results.
void compare_files(const TensorFile& ref, const TensorFile& cand, const Policy& policy, const std::string& file,
                   Comparison& into);
// REF and CAND both files or both directories (their *.safetensors files matched by name). Unreadable
// or malformed files are IoError / FormatError naming the path.
Comparison compare_paths(const std::string& ref, const std::string& cand, const Policy& policy);

// The flat index as a multi-index of `shape`: "[3, 0, 17]".
std::string index_str(const Shape& shape, std::int64_t flat);

}  // namespace gdnv::probes
