#pragma once
// The illegal-combination matrix of docs/DESIGN.md §3.1 as one table: each rule's id (the validation
// code throws through it), its name, a configuration that violates it and the part of its message that
// names the fix. Validation, its tests and the gate's "illegal combinations" step all read this table.
#include <optional>
#include <string>
#include <vector>

#include "cp/cp_config.hpp"
#include "cp/rule.hpp"

namespace gdnv::cp {

// Where a rule is checked: parse_mode, the layer config's constructor (before any CP check),
// validate_static, or validate_micro_batch alone.
enum class Stage { Mode, LayerConfig, Static, MicroBatch };

struct IllegalRule {
  Rule id;
  std::string name;      // docs/DESIGN.md §3.1's wording
  std::string fragment;  // the part of the message that names the fix
  Stage stage;
  std::string mode = "headwise";  // given to parse_mode
  CpConfig config;                // its mode is `mode`'s
  std::int64_t Hk = 4, Hv = 8;
  MicroBatchShape micro_batch{Format::Thd, 1, {16, 8}, false, 0, 0};
};

// Every rule, at least one row per Rule, in docs/DESIGN.md §3.1's order.
const std::vector<IllegalRule>& illegal_rules();

// What the checks of `rule.stage` said about `rule`'s example: the rule that rejected it (none for an
// error outside cp/, such as the layer config's) and the message, "(accepted)" when nothing threw.
struct Rejection {
  std::optional<Rule> rule;
  std::string message = "(accepted)";
};
Rejection check_example(const IllegalRule& rule);

}  // namespace gdnv::cp
