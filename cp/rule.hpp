#pragma once
// The ids of docs/DESIGN.md §3.1's illegal-combination rules and the error that carries one. The checks
// of cp/cp_config.cpp throw through them; the table of cp/illegal.hpp, which runs those checks, names
// them, so the dependency runs one way: illegal -> cp_config -> rule.
#include <string>

#include "core/error.hpp"

namespace gdnv::cp {

enum class Rule {
  UnknownMode,
  HvNotMultipleOfHk,
  HeadwiseHeadsNotDivisibleByTpCp,
  HeadsNotDivisibleByTp,
  ChunkwiseWithAllgatherCp,
  ChunkwiseDeterministicWithCp,
  ChunkwiseDeterministicWithDynamicCp,
  InferenceNotHeadwise,
  AllGatherDeterministic,
  AllGatherSbhdWithCp,
  ChunkwiseSbhdBatch,
  ThdBatchNotOne,
  LengthsNotDivisibleByCp,
  LengthsNotDivisibleByTwoCp,
  LocalCpSizeNotGroupSize,
  OnlyOneOfGroupAndLocalSize,
  DynamicCpSizeNotDividing,
  TpBelowOne,
  CpBelowOne,
  kCount
};

// A ConfigError raised by one rule of the table.
class IllegalCombination : public ConfigError {
 public:
  IllegalCombination(Rule rule, const std::string& what) : ConfigError(what), rule_(rule) {}
  Rule rule() const { return rule_; }

 private:
  Rule rule_;
};

}  // namespace gdnv::cp
