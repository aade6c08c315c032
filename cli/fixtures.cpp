// gdn-verify fixtures generate | verify: the regression catalog (fixtures/fixtures.hpp).
#include <filesystem>
#include <ostream>

#include "cli/command.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "fixtures/fixtures.hpp"
#include "gate/precision_regression.hpp"

namespace gdnv::cli {
namespace {

int generate_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("fixtures generate options");
  // clang-format off
  o.add_options()
      ("dir", po::value<std::string>()->required(), "directory to write the fixture files and MANIFEST.json into")
      ("catalog", po::value<std::string>()->default_value("default"),
       "default (small, the one committed under fixtures/data) | full");
  // clang-format on
  const auto vm = parse_options("fixtures generate", "--dir DIR [--catalog default|full]", o, {}, args, out);
  if (!vm) return kPass;
  check_output_directory("--dir", (*vm)["dir"].as<std::string>());
  fixtures::generate_fixtures((*vm)["dir"].as<std::string>(), (*vm)["catalog"].as<std::string>(), out);
  return kPass;
}

int verify_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("fixtures verify options");
  // clang-format off
  o.add_options()
      ("dir", po::value<std::string>()->required(), "a directory written by 'fixtures generate'")
      ("update", po::bool_switch(), "rewrite the fixtures whose oracle answer moved (and missing or corrupted "
                                    "ones, from the catalog), printing what changed")
      ("case", po::value<std::string>(), "verify only the case of this name (as the manifest and a failing gate name it)");
  // clang-format on
  const auto vm = parse_options("fixtures verify", "--dir DIR [--update] [--case NAME]", o, {}, args, out);
  if (!vm) return kPass;
  return fixtures::verify_fixtures((*vm)["dir"].as<std::string>(), (*vm)["update"].as<bool>(), out,
                                   vm->count("case") ? (*vm)["case"].as<std::string>() : std::string())
      .exit_code();
}

// The gate's precision baseline (gate/precision_regression.cpp): rerun its catalog, write the deviations.
int precision_baseline_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description o("fixtures precision-baseline options");
  o.add_options()("write", po::value<std::string>()->required(),
                  "the file to write (the gate reads the source tree's fixtures/precision_baseline.json)");
  const auto vm = parse_options("fixtures precision-baseline", "--write FILE", o, {}, args, out);
  if (!vm) return kPass;
  // Checked before the catalog runs, so a typo costs no wait.
  const std::filesystem::path file = (*vm)["write"].as<std::string>();
  const std::filesystem::path dir = file.parent_path().empty() ? "." : file.parent_path();
  if (file.filename().empty() || std::filesystem::is_directory(file) || !std::filesystem::is_directory(dir))
    throw ConfigError("fixtures precision-baseline --write '" + file.string() +
                      "' is not a file in an existing directory: give a FILE path such as " +
                      gate::committed_precision_baseline());
  check_outputs({{"--write", file.string()}});
  gate::write_precision_baseline(file.string(), out);
  return kPass;
}

}  // namespace

int fixtures_main(const std::vector<std::string>& args, std::ostream& out) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    out << "usage: gdn-verify fixtures generate|verify|precision-baseline [options]   (each takes --help)\n";
    return kPass;
  }
  if (args.empty())
    throw ConfigError(
        "fixtures: missing subcommand: use 'gdn-verify fixtures generate --dir DIR' or "
        "'gdn-verify fixtures verify --dir DIR'");
  if (args[0] == "generate") return generate_main({args.begin() + 1, args.end()}, out);
  if (args[0] == "verify") return verify_main({args.begin() + 1, args.end()}, out);
  if (args[0] == "precision-baseline") return precision_baseline_main({args.begin() + 1, args.end()}, out);
  throw ConfigError("unknown fixtures subcommand '" + args[0] + "': use generate, verify or precision-baseline");
}

}  // namespace gdnv::cli
