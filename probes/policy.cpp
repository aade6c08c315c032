#include "probes/policy.hpp"

#include <fnmatch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/file.hpp"

namespace gdnv::probes {
namespace {

using nlohmann::json;

Rule elementwise(double atol, double rtol, double min_cos) {
  Rule r;
  r.atol = atol;
  r.rtol = rtol;
  r.min_cos = min_cos;
  return r;
}

Rule normwise(double atol, double rtol, double min_cos) {
  Rule r = elementwise(atol, rtol, min_cos);
  r.normwise = true;
  return r;
}

std::string builtin_names() {
  std::string names;
  for (const Policy& p : builtin_policies()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

Rule parse_rule(const json& j, const std::string& where) {
  if (!j.is_object()) throw ConfigError(where + " must be an object of tolerance keys");
  Rule r;
  for (const auto& [key, value] : j.items()) {
    const std::string at = where + "." + key;
    if (key == "exact" || key == "normwise") {
      if (!value.is_boolean()) throw ConfigError(at + " must be true or false");
      (key == "exact" ? r.exact : r.normwise) = value.get<bool>();
      continue;
    }
    std::optional<double>* slot = key == "atol"                ? &r.atol
                                  : key == "rtol"              ? &r.rtol
                                  : key == "min_cos"           ? &r.min_cos
                                  : key == "max_rel_rms"       ? &r.max_rel_rms
                                  : key == "max_mismatch_frac" ? &r.max_mismatch_frac
                                                               : nullptr;
    if (!slot)
      throw ConfigError(
          at + " is not a tolerance key: use atol, rtol, normwise, min_cos, max_rel_rms, max_mismatch_frac or exact");
    if (!value.is_number() || value.get<double>() < 0)
      throw ConfigError(at + " must be a non-negative number, got " + value.dump());
    *slot = value.get<double>();
  }
  return r;
}

Policy parse_policy(const json& j, const std::string& path) {
  if (!j.is_object()) throw ConfigError(path + ": a policy is a JSON object with 'default' and 'tensors'");
  Policy p{path, {}, {}};
  for (const auto& [key, value] : j.items()) {
    if (key == "default") {
      p.default_rule = parse_rule(value, path + ": default");
    } else if (key == "tensors") {
      if (!value.is_object()) throw ConfigError(path + ": tensors must map names or globs to rules");
      for (const auto& [pattern, rule] : value.items())
        p.tensors.emplace_back(pattern, parse_rule(rule, path + ": tensors." + pattern));
    } else {
      throw ConfigError(path + ": unknown key '" + key + "': a policy has only 'default' and 'tensors'");
    }
  }
  return p;
}

}  // namespace

Rule Rule::over(const Rule& base) const {
  Rule r = base;
  if (atol) r.atol = atol;
  if (rtol) r.rtol = rtol;
  if (min_cos) r.min_cos = min_cos;
  if (max_rel_rms) r.max_rel_rms = max_rel_rms;
  if (max_mismatch_frac) r.max_mismatch_frac = max_mismatch_frac;
  if (exact) r.exact = exact;
  if (normwise) r.normwise = normwise;
  return r;
}

Rule Policy::rule_for(const std::string& tensor) const {
  for (const auto& [pattern, rule] : tensors)
    if (pattern == tensor) return rule.over(default_rule);
  for (const auto& [pattern, rule] : tensors)
    if (fnmatch(pattern.c_str(), tensor.c_str(), 0) == 0) return rule.over(default_rule);
  return default_rule;
}

const std::vector<Policy>& builtin_policies() {
  static const std::vector<Policy> table = [] {
    Rule bitwise;
    bitwise.exact = true;
    return std::vector<Policy>{{"cp1-vs-old", elementwise(2e-4, 2e-3, 0.99999), {}},
                               {"cp-vs-cp1", elementwise(2e-3, 1e-2, 0.9999), {}},
                               {"bitwise", bitwise, {}},
                               {"upstream-probe", normwise(2e-4, 2e-3, 0.99999), {}}};
  }();
  return table;
}

Policy load_policy(const std::string& name_or_path) {
  for (const Policy& p : builtin_policies())
    if (p.name == name_or_path) return p;
  if (!std::filesystem::exists(name_or_path))
    throw ConfigError("--policy '" + name_or_path + "' is neither a built-in policy (" + builtin_names() +
                      ") nor a file");
  json j;
  try {
    j = json::parse(read_file_text(name_or_path));
  } catch (const json::parse_error& e) {
    throw ConfigError(name_or_path + ": not valid JSON (" + e.what() + ")");
  }
  return parse_policy(j, name_or_path);
}

}  // namespace gdnv::probes
