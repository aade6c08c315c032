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
};

struct Comparison {
  std::string name;  // of the summary line: the candidate's file or directory name
  std::string policy;
  std::vector<TensorResult> tensors;  // in (file, name) order, structural mismatches included
  // Where a failing verdict starts (harness/verdict.hpp): the first tensor outside its gate in the judged
  // order, in the first failing dump (`divergence_in`: its mode); unset when it passes or is not judged.
  std::optional<harness::Divergence> divergence;
  std::string divergence_in;

  int compared() const;  // tensors with matching structure
  int bitwise() const;
  int failed() const;  // compared tensors outside tolerance
  bool structural_mismatch() const;
  // 0 pass, 1 numeric failure, 2 structural mismatch (docs/DESIGN.md §5's CLI exit codes).
  int exit_code() const;
  // "<name>: N tensors compared, K bitwise identical, F outside tolerance".
  std::string summary() const;
};

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
