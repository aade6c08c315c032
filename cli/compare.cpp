// gdn-verify compare REF CAND: two safetensors files or directories under a tolerance policy.
#include <ostream>

#include "cli/command.hpp"
#include "cli/probe_reports.hpp"
#include "probes/compare.hpp"

namespace gdnv::cli {

int compare_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("compare options");
  // clang-format off
  o.add_options()
      ("ref", po::value<std::string>()->required(), "reference: a safetensors file or a directory of them")
      ("cand", po::value<std::string>()->required(), "candidate: the same kind as REF, matched by file name")
      ("policy", po::value<std::string>()->default_value("cp1-vs-old"),
       "tolerance policy: cp1-vs-old | cp-vs-cp1 | bitwise | upstream-probe | a JSON file");
  // clang-format on
  add_report_options(o);
  po::positional_options_description pos;
  pos.add("ref", 1).add("cand", 1);
  const auto vm = parse_options("compare", "REF CAND [--policy P] [--json FILE] [--markdown FILE]", o, pos, args, out);
  if (!vm) return kPass;
  check_outputs(report_outputs(*vm), {(*vm)["ref"].as<std::string>(), (*vm)["cand"].as<std::string>()});
  const auto start = Clock::now();
  const probes::Policy policy = probes::load_policy((*vm)["policy"].as<std::string>());
  return report(probes::compare_paths((*vm)["ref"].as<std::string>(), (*vm)["cand"].as<std::string>(), policy), *vm,
                out, start);
}

}  // namespace gdnv::cli
