// Gate step "MPI transport": a training run under mpirun writes the in-process world's trajectory, bit
// for bit (docs/DESIGN.md §3.2).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

#include "core/file.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
namespace {

// `name` on PATH, or "".
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  for (std::size_t a = 0; a <= dirs.size();) {
    const std::size_t b = std::min(dirs.find(':', a), dirs.size());
    const std::filesystem::path candidate = std::filesystem::path(dirs.substr(a, b - a)) / name;
    if (b > a && ::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    a = b + 1;
  }
  return "";
}

// Training at CP = 3 in fp64 (every mode, 3 heads, static and dynamic 1, 3): every kind of collective
// the modes use (all-to-all, all-gather, reduce-scatter, all-reduce); the parameter-gradient all-reduces
// of every size and the 2-element loss/token sum split unevenly over 3 ranks. The step's arguments and its in-process
// world's CSV are the reference.
const char* const kMpiTrain =
    " train --layers 1 --hidden 16 --num-key-heads 3 --num-value-heads 3 --key-head-dim 4 --value-head-dim 4"
    " --vocab 16 --steps 2 --docs-per-batch 6 --micro-batch-tokens 48 --max-doc-length 48 --dtype fp64"
    " --modes headwise,chunkwise,all_gather --cp 3 --dynamic 1,3 --csv ";

// docs/DESIGN.md §3.2 on the MPI transport (comm/mpi.cpp): a training run under mpirun -np 3 writes the
// in-process world's trajectory, bit for bit. Skipped, with the reason, without mpirun.
StepResult run(const StepOptions& options) {
  StepResult r(options);
  const std::string mpirun = on_path("mpirun");
  if (mpirun.empty()) {
    r.skip_reason = "no mpirun on PATH: the MPI transport is not run (install Open MPI or MPICH)";
    return r;
  }
  const std::string label = "train fp64 every mode cp=3 under mpirun -np 3";
  if (!r.selected(label)) return r;
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("gdnv_gate_mpi_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // This binary when it is gdn-verify, else (a test's process) GDNV_BIN's.
  std::string self = fs::read_symlink("/proc/self/exe").string();
  if (fs::path(self).filename() != "gdn-verify") self = std::getenv("GDNV_BIN") ? std::getenv("GDNV_BIN") : "";
  if (self.empty()) {
    r.skip_reason = "not run from gdn-verify and GDNV_BIN is not set: no binary to start under mpirun";
    return r;
  }
  const std::string mpi_csv = (dir / "mpi.csv").string(), inproc_csv = (dir / "inproc.csv").string();
  const std::string command = mpirun + " --oversubscribe -np 3 " + self + kMpiTrain + mpi_csv + " --world mpi";
  // Open MPI refuses root without its opt-in (CI runs as root).
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  // A failure's detail is deterministic (the trainer's table holds timings): the exit status and the
  // first reason the output gives (a run's verdict, indented under its row, or an error line).
  const auto reason = [](const std::string& text) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("    ") || line.starts_with("error:")) return line.substr(line.find_first_not_of(' '));
    return std::string("no reason printed");
  };
  std::string why;
  if (const int rc = std::system((command + " > " + (dir / "mpi.log").string() + " 2>&1").c_str()); rc != 0)
    why = "mpirun -np 3 exited with status " + std::to_string(WEXITSTATUS(rc)) + ": " +
          reason(read_file_text((dir / "mpi.log").string()));
  else if (std::system((self + kMpiTrain + inproc_csv + " > /dev/null 2>&1").c_str()) != 0)
    why = "the in-process run failed";
  else if (read_file_text(mpi_csv) != read_file_text(inproc_csv))
    why = "the MPI world's trajectory (CSV) differs from the in-process world's";
  fs::remove_all(dir);
  r.check(why.empty(), label, why);
  return r;
}

}  // namespace

const Step mpi_transport{"MPI transport", run};

}  // namespace gdnv::gate
