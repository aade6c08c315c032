// gdn-verify gate: the pre-merge job. Runs each step in order, prints a progress line per step and a
// final table, and exits 0 only when every step passes.
#include <chrono>
#include <filesystem>
#include <iomanip>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "core/file.hpp"
#include "core/safetensors.hpp"

namespace gdnv::cli {
namespace {

struct StepResult {
  int cases = 0;
  int failed = 0;
  std::string detail;  // first failure, empty when all cases passed
};

struct Step {
  std::string name;
  std::function<StepResult()> run;
};

// One tensor of every dtype plus the degenerate shapes, through serialize and parse, must come back
// with identical bytes.
StepResult safetensors_round_trip() {
  TensorFile file;
  file.metadata = {{"source", "gate"}};
  int k = 0;
  for (DType t : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I64, DType::I32}) {
    Tensor x(t, {2, 3});
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, 0.37 * (i - 2));
    file.tensors.emplace("t" + std::to_string(k++), x);
  }
  file.tensors.emplace("empty", Tensor(DType::F32, {0, 4}));
  file.tensors.emplace("scalar", Tensor(DType::F64, {}));
  const auto bytes = serialize_safetensors(file);
  const TensorFile back = parse_safetensors(bytes.data(), bytes.size(), "gate");
  StepResult r;
  for (const auto& [name, t] : file.tensors) {
    ++r.cases;
    if (!back.has(name) || !back.at(name, "gate").bitwise_equal(t)) {
      ++r.failed;
      if (r.detail.empty()) r.detail = "tensor '" + name + "' did not round-trip";
    }
  }
  return r;
}

// The external reference vectors (tests/data/vectors) must load: the suite's ground truth is intact.
StepResult reference_vectors_load() {
  StepResult r;
  for (const auto& entry : std::filesystem::directory_iterator(GDNV_TEST_DATA "/vectors")) {
    const std::string path = entry.path().string();
    const std::string ext = entry.path().extension().string();
    if (ext != ".safetensors" && ext != ".json") continue;
    ++r.cases;
    try {
      const bool loaded = ext == ".json" ? nlohmann::json::parse(read_file_text(path)).contains("cases")
                                         : !read_safetensors(path).tensors.empty();
      if (!loaded) throw FormatError(path + ": holds no cases or tensors");
    } catch (const std::exception& e) {
      ++r.failed;
      if (r.detail.empty()) r.detail = e.what();
    }
  }
  if (r.cases == 0) r = {1, 1, "no reference vectors under " GDNV_TEST_DATA "/vectors"};
  return r;
}

const std::vector<Step>& steps() {
  static const std::vector<Step> table = {
      {"safetensors round-trip", safetensors_round_trip},
      {"reference vectors load", reference_vectors_load},
  };
  return table;
}

}  // namespace

int gate_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description options("gate options");
  if (!parse_options("gate", "", options, {}, args, out)) return kPass;
  struct Row {
    std::string name;
    StepResult result;
    double seconds;
  };
  std::vector<Row> rows;
  int failed_steps = 0;
  for (std::size_t i = 0; i < steps().size(); ++i) {
    const Step& step = steps()[i];
    out << "[" << i + 1 << "/" << steps().size() << "] " << step.name << " ..." << std::flush;
    const auto t0 = std::chrono::steady_clock::now();
    StepResult result;
    try {
      result = step.run();
    } catch (const std::exception& e) {
      result = {1, 1, e.what()};
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out << (result.failed ? " FAIL" : " ok") << "\n";
    if (result.failed) {
      ++failed_steps;
      out << "    " << result.detail << "\n";
    }
    rows.push_back({step.name, result, s});
  }
  out << "\n" << std::left << std::setw(28) << "step" << std::right << std::setw(8) << "cases" << std::setw(8)
      << "result" << std::setw(10) << "time" << "\n";
  for (const auto& row : rows)
    out << std::left << std::setw(28) << row.name << std::right << std::setw(8) << row.result.cases << std::setw(8)
        << (row.result.failed ? "FAIL" : "pass") << std::setw(9) << std::fixed << std::setprecision(2)
        << row.seconds << "s\n";
  out << "gate: " << rows.size() << " steps, " << failed_steps << " failed\n" << (failed_steps ? "FAIL" : "PASS") << "\n";
  return failed_steps ? kNumericFailure : kPass;
}

}  // namespace gdnv::cli
