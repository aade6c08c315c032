#pragma once
// Runs the real gdn-verify binary (GDNV_CLI) the way a user does and captures exit code and streams.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/file.hpp"

namespace gdnv::testing {

struct CliResult {
  int code;
  std::string out, err;
};

// A shell command line, its stdout and stderr captured apart.
inline CliResult run_shell(const std::string& command) {
  static int counter = 0;
  const auto base = std::filesystem::temp_directory_path() /
                    ("gdnv_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string out = base.string() + ".out", err = base.string() + ".err";
  const int status = std::system((command + " >" + out + " 2>" + err).c_str());
  CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file_text(out), read_file_text(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

inline CliResult run_cli(const std::string& args) { return run_shell(std::string(GDNV_CLI) + " " + args); }

// Whether `text` (a command's output) contains `part`.
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh empty directory under the system temp dir, removed by the caller.
inline std::filesystem::path temp_dir(const std::string& tag) {
  static int counter = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gdnv_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace gdnv::testing
