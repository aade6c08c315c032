// gdn-verify gate: the pre-merge job. Runs each step in order, prints a progress line per step and a
// final table, and exits 0 only when every step passes.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "core/file.hpp"
#include "core/metrics.hpp"
#include "core/safetensors.hpp"
#include "cp/cpu_backend.hpp"
#include "cp/harness.hpp"
#include "layouts/partition.hpp"
#include "reference/conv1d.hpp"
#include "reference/kernel_io.hpp"

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

void expect_close(StepResult& r, const std::string& what, const Tensor& ref, const Tensor& got, double gate) {
  ++r.cases;
  const double e = compare(ref, got).rel_rms;
  if (e < gate) return;
  ++r.failed;
  char buf[96];
  std::snprintf(buf, sizeof buf, ": rel_rms %.3e >= gate %.3e", e, gate);
  if (r.detail.empty()) r.detail = what + buf;
}

// The fp64 oracle reproduces FLA's and torch's own outputs (tests/data/vectors), both core forms.
StepResult oracle_reproduces_vectors() {
  StepResult r;
  const std::string dir = GDNV_TEST_DATA "/vectors/";
  for (const char* name : {"gdr_batched_h0", "gdr_varlen_gva_scale"})
    for (auto form : {ref::GdrForm::Chunked, ref::GdrForm::Recurrent}) {
      const TensorFile expected = read_safetensors(dir + name + ".safetensors");
      TensorFile input = expected;
      const TensorFile got = ref::run_gdr_case(ref::take_gdr_case(input, name), form);
      for (const auto& [tensor, t] : got.tensors)
        expect_close(r, std::string(name) + " " + tensor, expected.at(tensor, name), t, 1e-12);
    }
  const TensorFile conv = read_safetensors(dir + "conv1d_silu_bias.safetensors");
  const ref::Conv1dInputs in{conv.at("x", "conv"), conv.at("weight", "conv"), conv.at("bias", "conv"),
                             std::nullopt, std::nullopt, ref::Activation::Silu};
  const ref::Conv1dGrads g = ref::conv1d_backward(in, conv.at("dy", "conv"));
  expect_close(r, "conv1d y", conv.at("y", "conv"), ref::conv1d_forward(in), 1e-12);
  expect_close(r, "conv1d dx", conv.at("dx", "conv"), g.dx, 1e-12);
  expect_close(r, "conv1d dweight", conv.at("dweight", "conv"), g.dweight, 1e-12);
  expect_close(r, "conv1d dbias", conv.at("dbias", "conv"), *g.dbias, 1e-12);
  return r;
}

// Megatron-Core's THD rank indices, zigzag and contiguous, exactly.
StepResult layouts_reproduce_megatron() {
  StepResult r;
  const auto doc = nlohmann::json::parse(read_file_text(GDNV_TEST_DATA "/vectors/layouts_megatron.json"));
  for (const auto& c : doc.at("cases")) {
    const auto cu = c.at("cu_seqlens").get<std::vector<std::int64_t>>();
    const int W = c.at("cp_size").get<int>(), rank = c.at("cp_rank").get<int>();
    for (auto [layout, key] : {std::pair{layouts::Layout::zigzag, "zigzag"}, {layouts::Layout::contiguous, "contiguous"}}) {
      ++r.cases;
      if (layouts::thd_partition(layout, cu, W, rank).positions() == c.at(key).get<std::vector<std::int64_t>>()) continue;
      ++r.failed;
      if (r.detail.empty()) r.detail = std::string(key) + " positions differ at W=" + std::to_string(W) + " rank " + std::to_string(rank);
    }
  }
  return r;
}

// Every legal (mode, W, dtype, format) on a small GVA geometry, in-process, against the oracle.
StepResult cp_mode_matrix() {
  StepResult r;
  for (cp::CpMode mode : {cp::CpMode::Headwise, cp::CpMode::Chunkwise, cp::CpMode::AllGather})
    for (int W : {1, 2, 4})
      for (DType dtype : {DType::F64, DType::F32, DType::BF16})
        for (cp::Format format : {cp::Format::Thd, cp::Format::Sbhd}) {
          if (mode == cp::CpMode::AllGather && format == cp::Format::Sbhd && W > 1) continue;
          cp::RunSpec spec;
          spec.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
          spec.cp.mode = mode;
          spec.cp.cp = W;
          spec.dtype = dtype;
          spec.format = format;
          spec.lengths = {8 * W, 4 * W};
          spec.seq_len = 8 * W;
          spec.batch = mode == cp::CpMode::Chunkwise ? 1 : 2;  // chunkwise SBHD: batch 1 (DESIGN.md §3.1)
          spec.gates = cp::GateRegime::Weak;  // state carried across every rank: chunkwise's fold matters
          const cp::Case k = cp::make_case(spec);
          const cp::Answer oracle = cp::oracle_answer(k);
          const auto gates = cp::oracle_gates(k, oracle, dtype);
          const cp::Answer got = cp::run_in_process(spec, k, cp::make_cpu_backend).front().answer;
          const std::string tag = std::string(cp::mode_name(mode)) + " W=" + std::to_string(W) + " " +
                                  std::string(dtype_name(dtype)) + (format == cp::Format::Thd ? " thd " : " sbhd ");
          expect_close(r, tag + "out", oracle.out, got.out, gates.at("out"));
          expect_close(r, tag + "grad_hidden", oracle.grad_hidden, got.grad_hidden, gates.at("grad_hidden"));
          for (const auto& [name, t] : oracle.grads)
            expect_close(r, tag + "grad::" + name, t, got.grads.at(name), gates.at("grad::" + name));
        }
  return r;
}

const std::vector<Step>& steps() {
  static const std::vector<Step> table = {
      {"safetensors round-trip", safetensors_round_trip},
      {"reference vectors load", reference_vectors_load},
      {"oracle reproduces vectors", oracle_reproduces_vectors},
      {"layouts reproduce Megatron", layouts_reproduce_megatron},
      {"CP mode matrix (cpu)", cp_mode_matrix},
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
