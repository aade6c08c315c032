#include <charconv>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <new>

#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/text.hpp"

namespace gdnv::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"inspect", "print each tensor's name, dtype, shape, statistics and the metadata of safetensors files",
       inspect_main},
      {"gate", "run the pre-merge checks and print a summary table", gate_main, true},
      {"run", "run the layer fwd+bwd under a CP mode on in-process ranks and judge it against the fp64 oracle",
       run_main, true},
      {"reference", "run the fp64 oracle on a kernel- or layer-level safetensors file and write its outputs",
       reference_main, true},
      {"plan", "predict each CP mode's collectives, FLOPs, activations and time per layer for a geometry, or a grid",
       plan_main},
      {"layout", "print the global token positions a CP rank holds (zigzag/contiguous) and its route, as JSON",
       layout_main},
      {"compare", "compare two safetensors files or directories under a tolerance policy", compare_main},
      {"probe", "dump a build's layer outputs (an image) and compare images, CP modes and the oracle", probe_main,
       true},
      {"train",
       "train a small GDN model under every CP mode, static and dynamic, and judge the loss curves against cp1, "
       "a measured noise band and the fp64 oracle",
       train_main, true},
      {"fixtures", "generate the regression fixtures, or verify them against the oracle and every CP mode",
       fixtures_main, true},
  };
  return table;
}

namespace {

// --seed, of every command that takes one: ASCII digits within std::uint64_t. (Boost reads "-1" as
// 2^64 - 1, and a full-width "１２" must not pass as 12.)
void check_seeds(const po::parsed_options& parsed) {
  for (const auto& option : parsed.options) {
    if (option.string_key != "seed") continue;
    for (const std::string& text : option.value) {
      std::uint64_t seed = 0;
      const auto res = std::from_chars(text.data(), text.data() + text.size(), seed);
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || res.ec != std::errc())
        throw ConfigError("--seed '" + text + "' is not a seed: give a non-negative integer of ASCII digits, at most " +
                          std::to_string(~std::uint64_t{0}));
    }
  }
}

}  // namespace

std::optional<po::variables_map> parse_options(const std::string& command, const std::string& usage,
                                               po::options_description options,
                                               const po::positional_options_description& positional,
                                               const std::vector<std::string>& args, std::ostream& out) {
  options.add_options()("help,h", "show this help");
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(options).positional(positional).run();
    check_seeds(parsed);
    po::store(parsed, vm);
    if (vm.count("help")) {
      out << "usage: gdn-verify " << command << " " << usage << "\n\n"
          << options << "\nexit codes: 0 pass, 1 numeric failure, 2 structural mismatch, 3 bad input\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError("gdn-verify " + command + ": " + e.what() + "; see 'gdn-verify " + command + " --help'");
  }
  return vm;
}

namespace {
void print_usage(std::ostream& out) {
  out << "usage: gdn-verify <command> [options]   ('gdn-verify <command> --help' for its options)\n\ncommands:\n";
  for (const auto& c : commands()) out << "  " << std::left << std::setw(10) << c.name << c.summary << "\n";
  out << "\nexit codes: 0 pass, 1 numeric failure, 2 structural mismatch, 3 bad input\n";
}

}  // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  if (argc < 2) {
    print_usage(err);
    return kBadInput;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(out);
    return kPass;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : commands()) {
    if (c.name != name) continue;
    // Every exception is bad input or an I/O failure of this command: one line, exit 3. Messages quote
    // names and metadata from untrusted files: never raw bytes on the terminal.
    const auto fail = [&](const std::string& message) {
      err << "error: " << printable(message) << "\n";
      return kBadInput;
    };
    const std::string cmd = "gdn-verify " + name + ": ";
    try {
      if (c.runs_layers) keep_freed_memory();
      return c.run(args, out);
    } catch (const ConfigError& e) {
      return fail(in_cli_flags(e));
    } catch (const Error& e) {
      return fail(e.what());
    } catch (const std::filesystem::filesystem_error& e) {
      return fail(cmd + e.code().message() + ": '" + e.path1().string() + "'" +
                  (e.path2().empty() ? "" : " -> '" + e.path2().string() + "'") + ": check the path");
    } catch (const std::ios_base::failure& e) {
      return fail(cmd + "reading or writing a file failed (" + e.what() + "): check the paths given");
    } catch (const nlohmann::json::exception& e) {
      return fail(cmd + "a JSON input does not have the expected shape (" + e.what() + "): check the JSON files given");
    } catch (const std::bad_alloc&) {
      return fail(cmd + "out of memory: the sizes the options ask for do not fit; give smaller ones");
    } catch (const std::length_error& e) {
      return fail(cmd + "a size is too large (" + e.what() + "): give smaller sizes");
    } catch (const std::exception& e) {
      return fail(cmd + e.what());
    } catch (...) {
      return fail(cmd + "failed with an unknown exception");
    }
  }
  err << "error: unknown command '" << printable(name) << "'; run 'gdn-verify --help' for the list of commands\n";
  return kBadInput;
}

}  // namespace gdnv::cli
