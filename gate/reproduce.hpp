#pragma once
// The command that reproduces one failing gate case alone (docs/DESIGN.md §11): `gdn-verify run ...`
// for a CP matrix case, `gdn-verify gate --step S --case LABEL` for any other, each prefixed with the
// planted fault that is active so it fails the same way.
#include <string>

#include "harness/run_spec.hpp"

namespace gdnv::gate {

// "GDNV_FAULT=<name> " while a planted fault is active, else "".
std::string fault_prefix();

// `gdn-verify run` with every option that `spec` sets, on `backend` ("cpu", "emu", "cuda").
std::string run_command(const harness::RunSpec& spec, const std::string& backend);

// `gdn-verify gate --step '<step>' --case '<label>'`; without --case for an empty label.
std::string gate_case_command(const std::string& step, const std::string& label);

}  // namespace gdnv::gate
