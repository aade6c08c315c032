// The real CLI: dispatch, --help for every command, exit codes and one-line errors.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "cli_testing.hpp"
#include "core/safetensors.hpp"
#include "core/vectors.hpp"
#include "faults/registry.hpp"

namespace gdnv {
namespace {

using testing::contains;
using testing::run_cli;

int count_lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"inspect", "gate"}) {
    const auto r = run_cli(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd << ": " << r.err;
    EXPECT_NE(r.out.find(std::string("usage: gdn-verify ") + cmd), std::string::npos) << r.out;
  }
}

TEST(Cli, UnknownCommandExitsThreeWithOneLine) {
  const auto r = run_cli("frobnicate");
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(r.err, "error: unknown command 'frobnicate'; run 'gdn-verify --help' for the list of commands\n");
}

TEST(Cli, UnknownOptionExitsThreeNamingIt) {
  const auto r = run_cli("inspect --bogus x");
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.err.find("gdn-verify inspect: unrecognised option '--bogus'"), std::string::npos) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
}

TEST(Cli, InspectPrintsTensorsAndMetadata) {
  const auto r = run_cli(vector_path("conv1d_silu_bias.safetensors"));
  EXPECT_EQ(r.code, 3) << "a file is not a command";
  const auto ok = run_cli("inspect " + vector_path("conv1d_silu_bias.safetensors"));
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(ok.out.find("weight"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("source = "), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("[2, 19, 6]"), std::string::npos) << ok.out;
}

TEST(Cli, InspectCountsNaNAndInf) {
  const auto dir = testing::temp_dir("inspect");
  TensorFile f;
  f.tensors.emplace("x", Tensor::from(std::vector<float>{1.0f, NAN, INFINITY, -INFINITY, 2.0f}, {5}));
  write_safetensors((dir / "x.safetensors").string(), f);
  const auto r = run_cli("inspect " + (dir / "x.safetensors").string());
  EXPECT_EQ(r.code, 0);
  // min 1, max 2, mean 1.5 over the finite values; 1 NaN, 2 Inf.
  EXPECT_NE(r.out.find("1.5     1     2"), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, InspectOfCorruptFileIsOneLineNamingFileAndTensor) {
  const auto dir = testing::temp_dir("corrupt");
  const std::string path = (dir / "bad.safetensors").string();
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  std::ofstream(path, std::ios::binary) << len << header << "abcd";  // 4 of the 16 data bytes
  const auto r = run_cli("inspect " + path);
  EXPECT_EQ(r.code, 3);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tensor 'w'"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing half-written: " << r.out;
  std::filesystem::remove_all(dir);
}

// Writes a safetensors file whose header is `header` verbatim, followed by `data`.
std::string write_raw_safetensors(const std::filesystem::path& dir, const std::string& header,
                                  const std::string& data) {
  const std::string path = (dir / "raw.safetensors").string();
  std::string len(8, '\0');
  len[0] = static_cast<char>(header.size());
  std::ofstream(path, std::ios::binary) << len << header << data;
  return path;
}

bool all_printable_ascii(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

TEST(Cli, ErrorQuotingACorruptHeaderEscapesItsBytes) {
  const auto dir = testing::temp_dir("corrupt_bytes");
  const std::string path =
      write_raw_safetensors(dir, "{\"w\":{\"dtype\":\"F\xb9\x01\",\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd");
  const auto r = run_cli("inspect " + path);
  EXPECT_EQ(r.code, 3);
  ASSERT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_TRUE(all_printable_ascii(r.err.substr(0, r.err.size() - 1))) << r.err;
  EXPECT_NE(r.err.find("\\xb9"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, InspectEscapesControlBytesInNamesAndMetadata) {
  const auto dir = testing::temp_dir("control_bytes");
  const std::string path = write_raw_safetensors(
      dir, R"({"__metadata__":{"source":"a\u001b[31mb"},"w\u0007":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
      std::string(4, '\0'));
  const auto r = run_cli("inspect " + path);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("source = a\\x1b[31mb"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  w\\x07 "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Cli, GatePassesAndPrintsSummary) {
  const auto r = run_cli("gate");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\ngate: \d+ steps, 0 failed)"))) << r.out;
  EXPECT_NE(r.out.find("\nPASS\n"), std::string::npos) << r.out;
}

TEST(Cli, GateWritesJunitXml) {
  const auto dir = testing::temp_dir("junit");
  const std::string xml = (dir / "gate.xml").string();
  const auto r = run_cli("gate --quick --junit " + xml);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  const std::string text = read_file_text(xml);
  // One testcase per step; the CUDA step or the emu step is skipped, never both.
  const std::regex progress(R"(\[\d+/\d+\] )");
  const auto steps = std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), progress), std::sregex_iterator());
  EXPECT_NE(text.find("<testsuites name=\"gdn-verify gate\" tests=\"" + std::to_string(steps) +
                      "\" failures=\"0\" skipped=\"1\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<testcase classname=\"gate\" name=\"CP mode matrix (cpu)\""), std::string::npos) << text;
  EXPECT_NE(text.find("<skipped message="), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

// Under a planted fault, the JUnit report has one testcase per failing case, named by its label, with the
// command that reproduces it alone: a CI page names the case, not only the step.
// Every --help ends with the exit codes, lists no path of the machine it was built on, and prints
// defaults as written (no 0.0030000000000000001).
TEST(Cli, EveryHelpStatesTheExitCodesAndNoBuildPath) {
  const std::string codes = "exit codes: 0 pass, 1 numeric failure, 2 structural mismatch, 3 bad input\n";
  for (const char* command :
       {"", "inspect", "gate", "run", "reference", "plan", "layout", "compare", "train", "probe dump", "probe compare",
        "probe cross-mode", "probe oracle", "fixtures generate", "fixtures verify", "fixtures precision-baseline"}) {
    const auto r = run_cli(std::string(command) + " --help");
    EXPECT_EQ(r.code, 0) << command << r.err;
    EXPECT_TRUE(r.out.ends_with(codes)) << command << "\n" << r.out;
    EXPECT_FALSE(contains(r.out, GDNV_SOURCE_DIR)) << command << "\n" << r.out;
    EXPECT_FALSE(std::regex_search(r.out, std::regex(R"(\(=[0-9.]*0000000)"))) << command << "\n" << r.out;
  }
  for (const char* command : {"probe compare", "probe cross-mode", "compare"})
    EXPECT_TRUE(contains(run_cli(std::string(command) + " --help").out, "upstream-probe")) << command;
}

TEST(Cli, GateJunitHasATestcasePerFailingCase) {
  const auto dir = testing::temp_dir("junit_cases");
  const std::string xml = (dir / "gate.xml").string();
  setenv("GDNV_FAULT", "decay_cumsum_fp32", 1);
  const auto r = run_cli("gate --quick --step 'precision rules' --junit " + xml);
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const std::string text = read_file_text(xml);
  const std::smatch failed = [&] {
    std::smatch m;
    std::regex_search(r.out, m, std::regex(R"(    (\d+) of (\d+) failed; first: )"));
    return m;
  }();
  ASSERT_EQ(failed.size(), 3u) << r.out;
  const int n = std::stoi(failed[1]);
  EXPECT_GT(n, 1) << r.out;
  // The step's own testcase and one per failing case.
  EXPECT_NE(text.find("<testsuites name=\"gdn-verify gate\" tests=\"" + std::to_string(1 + n) + "\" failures=\"" +
                      std::to_string(n) + "\""),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<testcase classname=\"gate.precision rules\" name=\"cpu fp32 decay chain\" time=\"0\"><failure "
                      "message=\"final_state: rel_rms "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("reproduce: GDNV_FAULT=decay_cumsum_fp32 gdn-verify gate --step 'precision rules' --case 'cpu "
                      "fp32 decay chain'</failure>"),
            std::string::npos)
      << text;
  std::filesystem::remove_all(dir);
}

TEST(Cli, GateStepAndCaseOptionsNameWhatIsWrong) {
  const auto no_step = run_cli("gate --step 'no such step'");
  EXPECT_EQ(no_step.code, 3);
  EXPECT_TRUE(contains(no_step.err,
                       "error: gate --step 'no such step' is not a gate step: use one of "
                       "'safetensors round-trip'"))
      << no_step.err;
  const auto no_case = run_cli("gate --step 'illegal combinations' --case 'no such case'");
  EXPECT_EQ(no_case.code, 3);
  EXPECT_TRUE(contains(no_case.err,
                       "error: gate step 'illegal combinations' has no case 'no such case': give a "
                       "label exactly as a failing gate prints it"))
      << no_case.err;
  const auto case_alone = run_cli("gate --case x");
  EXPECT_EQ(case_alone.code, 3);
  EXPECT_TRUE(contains(case_alone.err, "error: gate --case needs --step")) << case_alone.err;
}

// `--step S --case LABEL` runs exactly one case of the full matrix, even with --quick.
TEST(Cli, GateCaseRunsThatCaseAlone) {
  const auto r = run_cli("gate --quick --step 'CP mode matrix (cpu)' --case 'chunkwise W=4 tp=2 F32 thd'");
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nCP mode matrix \(cpu\) +1 +pass)"))) << r.out;
}

// The CP matrix's first failure ends with the stage where the fault acts and the rank that diverges.
TEST(Cli, GateNamesTheFirstDivergingStageOfItsFirstFailure) {
  setenv("GDNV_FAULT", "conv_halo_wrong_rank", 1);
  const auto r = run_cli("gate --quick --step 'CP mode matrix (cpu)'");
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "\n    first divergence: stage::conv (forward, rank 1 of 2, rows ")) << r.out;
}

TEST(Cli, GateListsEveryPlantedFault) {
  const auto r = run_cli("gate --list-faults");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* name :
       {"allgather_no_reduce_scatter", "chunkwise_bf16_state_chain", "conv_halo_wrong_rank", "headwise_head_perm_shift",
        "route_off_by_one", "zigzag_swap_halves", "missing_grad_reduction_over_cp", "gate_softplus_missing_dt_bias",
        "l2norm_eps_dropped", "dynamic_cp_uses_static_group", "conv_halo_one_rank", "softplus_overflows",
        "backward_span_map_untransposed", "halo_grad_previous_rank_only", "route_return_uninverted",
        "allgather_grad_natural_order"})
    EXPECT_NE(r.out.find(std::string("  ") + name + " "), std::string::npos) << name << "\n" << r.out;
}

// "N of M failed" counts one unit on both sides: in the fixture step a case or CP run fails once,
// however many of its tensors are outside their gates (a fault moves several tensors per run).
TEST(Cli, GateFixtureStepCountsFailedRunsNotTensors) {
  setenv("GDNV_FAULT", "zigzag_swap_halves", 1);
  const auto r = run_cli("gate --quick");
  unsetenv("GDNV_FAULT");
  const std::regex failed_line(R"(\[\d+/\d+\] fixture verification \.\.\. FAIL\n    (\d+) of (\d+) failed)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, failed_line)) << r.out;
  EXPECT_GT(std::stoi(m[1]), 0);
  EXPECT_LE(std::stoi(m[1]), std::stoi(m[2])) << m[0];
}

// Each planted fault and the gate step built to catch it (docs/DESIGN.md §10). The emu step stands in
// for the CUDA step on a machine without a device and is skipped where the CUDA step runs.
struct FaultCatch {
  const char* fault;
  const char* step;
};
constexpr FaultCatch kFaultCatches[] = {
    {"allgather_no_reduce_scatter", "CP mode matrix (cpu)"},
    {"headwise_head_perm_shift", "CP mode matrix (cpu)"},
    {"missing_grad_reduction_over_cp", "CP mode matrix (cpu)"},
    {"chunkwise_bf16_state_chain", "CP mode matrix (cpu)"},
    {"conv_halo_wrong_rank", "CP mode matrix (cpu)"},
    {"conv_halo_one_rank", "CP mode matrix (cpu)"},
    {"route_off_by_one", "CP mode matrix (cpu)"},
    {"dynamic_cp_uses_static_group", "CP mode matrix (cpu)"},
    {"zigzag_swap_halves", "CP mode matrix (cpu)"},
    {"gate_softplus_missing_dt_bias", "CP mode matrix (cpu)"},
    {"l2norm_eps_dropped", "CP mode matrix (cpu)"},
    {"softplus_overflows", "CP mode matrix (cpu)"},
    {"dynamic_cp_reuses_plan", "CP mode matrix (cpu)"},
    {"gpu_conv_bleeds_across_sequences", "CP mode matrix (emu)"},
    {"rmsnorm_fast_rsqrt", "precision rules"},
    {"backward_span_map_untransposed", "adjoint dot-products"},
    {"halo_grad_previous_rank_only", "adjoint dot-products"},
    {"route_return_uninverted", "adjoint dot-products"},
    {"allgather_grad_natural_order", "adjoint dot-products"},
    {"gate_bf16_before_exp", "precision rules"},
    {"decay_cumsum_fp32", "precision rules"},
    {"reduce_rounds_per_hop", "communicator semantics"},
    {"reduce_own_rank_first", "communicator semantics"},
    {"grad_allreduce_bf16", "communicator semantics"},
    {"halo_gathers_whole_span", "communicator semantics"},
    {"loss_normalized_per_rank", "training equivalence"},
    {"padding_counted_in_loss", "training equivalence"},
    {"dynamic_cp_grads_over_static_world", "training equivalence"},
    {"dynamic_cp_grads_not_combined", "training equivalence"},
    {"dynamic_cp_grads_root_rank_zero", "training equivalence"},
    {"mpi_all_reduce_drops_remainder", "MPI transport"},
    {"gpu_linear_dx_accumulates", "precision rules"},
    {"gpu_conv_halo_grad_past_first_sequence", "precision rules"},
};

TEST(Cli, EveryPlantedFaultHasTheGateStepThatCatchesIt) {
  for (const FaultInfo& f : all_faults())
    EXPECT_TRUE(std::any_of(std::begin(kFaultCatches), std::end(kFaultCatches),
                            [&](const FaultCatch& c) { return c.fault == f.name; }))
        << f.name << " has no gate step in kFaultCatches";
  EXPECT_GE(all_faults().size(), 20u);
}

// docs/DESIGN.md §10's table names the seams of every planted fault, as the registry does.
TEST(Cli, DesignTableNamesEveryPlantedFaultsSeams) {
  std::ifstream design(std::string(GDNV_SOURCE_DIR) + "/docs/DESIGN.md");
  std::map<std::string, std::string> rows;
  std::smatch m;
  for (std::string line; std::getline(design, line);)
    if (std::regex_search(line, m, std::regex("^\\| `(\\w+)` \\|"))) rows[m[1].str()] = line;
  const std::regex seam(R"(faults::\w+)");
  for (const FaultInfo& f : all_faults()) {
    const auto row = rows.find(std::string(f.name));
    ASSERT_NE(row, rows.end()) << f.name << " has no row in docs/DESIGN.md";
    const std::string where(f.where);
    for (std::sregex_iterator s(where.begin(), where.end(), seam), end; s != end; ++s)
      EXPECT_TRUE(contains(row->second, "`" + s->str() + "`")) << f.name << ": its row does not name " << s->str();
  }
}

// Whether the reproduce command's output shows the gate's first failure: the same detail for a gate
// or fixtures command; for `run`, a row of the failing tensor marked FAIL, with the same rel_rms when
// the detail gives one, or the same error where the run did not complete.
bool fails_the_same_way(const std::string& command, const std::string& detail, const std::string& out) {
  if (!command.starts_with("run ")) return contains(out, detail);
  std::smatch m;
  if (std::regex_search(out, m, std::regex("the run did not complete: (.*)\n"))) return detail.ends_with(m[1].str());
  if (!std::regex_search(detail, m, std::regex(R"((\S+): (rel_rms (\S+) >=|\d+ NaN))"))) return false;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with("  " + m[1].str() + " ") && line.ends_with("FAIL") && contains(line, m[3].str())) return true;
  return false;
}

// Under each planted fault its step fails in `gate --quick`, and the command printed to reproduce the
// first failure fails alone in the same way.
class GateUnderFault : public ::testing::TestWithParam<FaultCatch> {};

TEST_P(GateUnderFault, ItsStepFailsAndTheReproduceCommandFailsTheSameWay) {
  const FaultCatch c = GetParam();
  setenv("GDNV_FAULT", c.fault, 1);
  auto r = run_cli(std::string("gate --quick --step '") + c.step + "'");
  if (std::string(c.step) == "CP mode matrix (emu)" && contains(r.out, "... skipped"))
    r = run_cli("gate --quick --step 'CP mode matrix (cuda)'");
  if (std::string(c.step) == "MPI transport" && contains(r.out, "... skipped")) {
    unsetenv("GDNV_FAULT");
    GTEST_SKIP() << r.out;
  }
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  std::smatch m;
  const std::string prefix = std::string("GDNV_FAULT=") + c.fault + " gdn-verify ";
  const bool found = std::regex_search(r.out, m, std::regex("first: (.*)\n    reproduce: " + prefix + "(.*)\n"));
  ASSERT_TRUE(found) << r.out;
  const std::string detail = m[1], command = m[2];
  const auto again = run_cli(command);
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(again.code, 1) << command << "\n" << again.out << again.err;
  EXPECT_TRUE(fails_the_same_way(command, detail, again.out)) << command << "\nfirst: " << detail << "\n" << again.out;
}

// The fixture step's first failure reproduces as `fixtures verify --case` of that fixture alone.
TEST(Cli, GateFixtureStepReproducesItsFirstFailingCaseAlone) {
  setenv("GDNV_FAULT", "route_off_by_one", 1);
  const auto r = run_cli("gate --quick --step 'fixture verification'");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex("first: (.*)\n    reproduce: GDNV_FAULT=route_off_by_one gdn-verify (fixtures verify "
                 "--dir \\S+ --case (\\S+))\n")))
      << r.out;
  const std::string detail = m[1], command = m[2], name = m[3];
  const auto again = run_cli(command);
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(again.code, 1) << again.out << again.err;
  EXPECT_TRUE(contains(again.out, detail)) << detail << "\n" << again.out;
  EXPECT_TRUE(std::regex_search(again.out, std::regex(R"(fixtures verify: 1 cases \(0 failed\), \d+ CP runs \([1-9])")))
      << again.out;
  EXPECT_TRUE(detail.starts_with(name + ": ")) << detail;
}

std::string fault_test_name(const ::testing::TestParamInfo<FaultCatch>& info) { return info.param.fault; }

INSTANTIATE_TEST_SUITE_P(PlantedFaults, GateUnderFault, ::testing::ValuesIn(kFaultCatches), fault_test_name);

// The extreme inputs' first failure under a softplus that overflows: in bf16 only dA_log = sum dg g
// breaks (0 * -inf), and the gate fails it on the NaN although its finite elements are within gate.
TEST(Cli, GateFailsANanTensorWhoseFiniteElementsPass) {
  setenv("GDNV_FAULT", "softplus_overflows", 1);
  const auto r = run_cli("gate --quick");
  unsetenv("GDNV_FAULT");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("first: headwise extreme inputs W=2 BF16: grad::A_log: 2 NaN, 2 Inf"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace gdnv
