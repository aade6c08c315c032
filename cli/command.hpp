#pragma once
// The CLI's command table. Each command parses its own options (Boost.Program_options) and returns
// the process exit code: 0 pass, 1 numeric failure, 2 structural mismatch, 3 usage/config/I/O error.
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace gdnv::cli {

namespace po = boost::program_options;

enum ExitCode : int { kPass = 0, kNumericFailure = 1, kStructuralMismatch = 2, kBadInput = 3 };

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>& args, std::ostream& out)> run;
  bool runs_layers = false;  // then it keeps freed memory for reuse (core/memory.hpp)
};

const std::vector<Command>& commands();

// Parses a command's arguments. Returns nullopt after printing help for --help; throws ConfigError
// naming the command and the bad option otherwise.
std::optional<po::variables_map> parse_options(const std::string& command, const std::string& usage,
                                               po::options_description options,
                                               const po::positional_options_description& positional,
                                               const std::vector<std::string>& args, std::ostream& out);

// Entry point behind main(): dispatches, prints errors as one line on `err`, maps them to exit 3.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

int inspect_main(const std::vector<std::string>& args, std::ostream& out);
int gate_main(const std::vector<std::string>& args, std::ostream& out);
int run_main(const std::vector<std::string>& args, std::ostream& out);
int reference_main(const std::vector<std::string>& args, std::ostream& out);
int layout_main(const std::vector<std::string>& args, std::ostream& out);
int compare_main(const std::vector<std::string>& args, std::ostream& out);
int probe_main(const std::vector<std::string>& args, std::ostream& out);
int fixtures_main(const std::vector<std::string>& args, std::ostream& out);
int plan_main(const std::vector<std::string>& args, std::ostream& out);
int train_main(const std::vector<std::string>& args, std::ostream& out);

}  // namespace gdnv::cli
