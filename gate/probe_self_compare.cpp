// Gate step "probe self-compare": probe images of the in-process run judged by the probe's own checks.
#include <unistd.h>

#include <filesystem>

#include "comm/inprocess.hpp"
#include "cpu/backend.hpp"
#include "gate/steps.hpp"
#include "probes/checks.hpp"
#include "probes/image.hpp"

namespace gdnv::gate {
namespace {

// Two dumps of the same image are bitwise identical, every CP mode agrees with CP=1, and every dumped
// tensor is within its oracle gate.
StepResult run(const StepOptions& options) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("gdnv_gate_probe_" + std::to_string(::getpid()));
  fs::remove_all(root);
  StepResult r(options);
  const std::vector<std::string> modes = options.quick_matrix()
                                             ? std::vector<std::string>{"cp1", "chunkwise"}
                                             : std::vector<std::string>{"cp1", "headwise", "chunkwise", "all_gather"};
  try {
    for (const char* image : {"a", "b"})
      for (const auto& mode : modes) {
        probes::DumpSpec spec;
        spec.mode = mode;
        spec.image = "gate";
        spec.case_name = "thd-short";
        comm::run_world(mode == "cp1" ? 1 : 4, [&](comm::Communicator& world) {
          probes::dump_rank(spec, (root / image).string(), "inproc", world, cpu::make_backend(spec.dtype));
        });
      }
    const auto same =
        probes::compare_images((root / "a").string(), (root / "b").string(), "", probes::load_policy("bitwise"));
    for (const auto& t : same.tensors)
      r.check(t.structure.empty() && t.pass, "redump " + t.file + ":" + t.name, "differs");
    const auto cross = probes::cross_mode((root / "a").string(), probes::load_policy("cp-vs-cp1"));
    for (const auto& t : cross.vs_cp1.tensors) r.check(t.pass, "cross-mode " + t.file + ":" + t.name, t.why);
    for (const auto& t : probes::judge_with_oracle((root / "a").string()).tensors)
      r.check(t.pass, "oracle " + t.file + ":" + t.name, t.why);
  } catch (const Error& e) {
    r.check(false, "dump", e.what());
  }
  fs::remove_all(root);
  return r;
}

}  // namespace

const Step probe_self_compare{"probe self-compare", run};

}  // namespace gdnv::gate
