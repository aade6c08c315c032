#include "faults/registry.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace gdnv {
namespace {

std::atomic<Fault> g_override{Fault::None};
std::atomic<bool> g_override_set{false};

Fault from_environment() {
  const char* env = std::getenv("GDNV_FAULT");
  if (!env || !*env) return Fault::None;
  for (const auto& f : all_faults())
    if (f.name == env) return f.fault;
  std::string known;
  for (const auto& f : all_faults()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw ConfigError("GDNV_FAULT='" + std::string(env) + "' is not a known fault: use one of " + known +
                    " (gdn-verify gate --list-faults), or unset it");
}

}  // namespace

const std::vector<FaultInfo>& all_faults() {
  static const std::vector<FaultInfo> table = {
#define GDNV_FAULT_INFO(fault, name, where, what) {Fault::fault, name, where, what},
      GDNV_PLANTED_FAULTS(GDNV_FAULT_INFO)
#undef GDNV_FAULT_INFO
  };
  return table;
}

std::string_view fault_name(Fault f) {
  for (const auto& info : all_faults())
    if (info.fault == f) return info.name;
  return "none";
}

Fault active_fault() {
  if (g_override_set.load()) return g_override.load();
  static const Fault env = from_environment();
  return env;
}

ScopedFault::ScopedFault(Fault f) : previous_(g_override.load()) {
  g_override.store(f);
  g_override_set.store(true);
}

ScopedFault::~ScopedFault() {
  g_override.store(previous_);
  g_override_set.store(previous_ != Fault::None);
}

}  // namespace gdnv
