// Gate step "fixture verification": the committed regression fixtures (fixtures/data) verified as
// `gdn-verify fixtures verify` verifies them, and every micro-batch of their CP runs judged.
#include <algorithm>
#include <sstream>

#include "core/file.hpp"
#include "core/safetensors.hpp"
#include "fixtures/cp_runs.hpp"
#include "fixtures/fixture_file.hpp"
#include "fixtures/fixtures.hpp"
#include "fixtures/manifest.hpp"
#include "gate/reproduce.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
namespace {

// Micro-batches of every CP run the layer fixtures of `dir` allow (fixtures/cp_runs.hpp): what
// `fixtures verify` must judge, counted here from the files.
int fixture_micro_batches(const std::string& dir) {
  const fixtures::Manifest m =
      fixtures::parse_manifest(read_file_text(dir + "/" + fixtures::kManifestName), fixtures::kManifestName);
  int n = 0;
  for (const auto& e : m.cases) {
    if (e.kind != "layer") continue;
    const fixtures::LayerFixture f =
        fixtures::layer_fixture(fixtures::inputs_of(read_safetensors(dir + "/" + e.file)), e.file);
    for (const auto& run : fixtures::allowed_runs(f)) n += std::max<int>(1, static_cast<int>(run.micro_batches.size()));
  }
  return n;
}

// The committed regression fixtures (fixtures/data): the manifest holds, the oracle still gives the
// stored answers, and every CP run each case allows reproduces them. Counted in one unit: the
// directory, each case and each CP run is one case of the step.
StepResult run(const StepOptions& options) {
  std::ostringstream log;
  const std::string dir = fixtures::committed_fixtures_dir();
  const fixtures::Verification v = fixtures::verify_fixtures(dir, false, log);
  StepResult r(options);
  r.cases = 1 + v.cases + v.cp_runs;
  r.failed = v.directory_problem + v.failed_cases + v.failed_cp_runs;
  r.detail = !v.problems.empty() ? v.problems.front() : !v.failures.empty() ? v.failures.front() : "";
  r.label = r.detail.substr(0, r.detail.find(':'));
  if (r.failed)
    r.reproduce =
        fault_prefix() + "gdn-verify fixtures verify --dir " + dir + (v.directory_problem ? "" : " --case " + r.label);
  if (!v.directory_problem) {
    const int want = fixture_micro_batches(dir);
    r.check(
        v.micro_batches == want, "every micro-batch judged",
        std::to_string(v.micro_batches) + " micro-batches judged, the fixtures' CP runs hold " + std::to_string(want));
  }
  return r;
}

}  // namespace

const Step fixture_verification{"fixture verification", run};

}  // namespace gdnv::gate
