// The argument fuzzer: run_cli in-process on the real option names of every command (read from its
// --help) with hostile values: negative, huge, empty, non-numeric, non-UTF-8, very long, and paths that
// are symlink loops, FIFOs, under a regular file, unwritable, too long, a directory or an input. Every
// vector must end with exit 0, 1, 2 or 3, never an escaped exception, and exit 3 with exactly one
// `error:` line. Commands that would do heavy work with valid options get a base option that fails
// after every other check (an unknown backend, step or world), so no vector runs a layer.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include "cli/command.hpp"
#include "core/vectors.hpp"

namespace gdnv {
namespace {

namespace fs = std::filesystem;

struct Surface {
  std::vector<std::string> command;  // "probe", "dump"
  std::vector<std::string> base;     // valid, cheap options (and the stop option of a heavy command)
  std::vector<std::string> keep;     // options the fuzzer must not override (the stop option)
  bool writable_paths = true;        // false: a writable path would start the command's work
};

struct Outcome {
  int code;
  std::string out, err;
  double seconds;
};

Outcome run(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"gdn-verify"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const auto t0 = std::chrono::steady_clock::now();
  const int code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

struct Option {
  std::string name;  // "--seed"; "" for a positional argument
  bool takes_value = true;
};

// The options a command's --help lists.
std::vector<Option> options_of(const std::vector<std::string>& command) {
  auto args = command;
  args.push_back("--help");
  const Outcome help = run(args);
  std::vector<Option> options;
  static const std::regex line(R"(^  (?:-\w \[ )?--([a-z0-9-]+)(?: \])?( arg)?)");
  std::istringstream in(help.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line) && m[1] != "help") options.push_back({"--" + m[1].str(), m[2].matched});
  }
  return options;
}

// A scratch directory with the hostile paths, made once per process.
struct Sandbox {
  fs::path dir;
  std::string input, loop, under_file, fifo, unwritable, too_long, missing_dir;
  Sandbox() {
    dir = fs::temp_directory_path() / ("gdnv_argfuzz_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    input = (dir / "in.safetensors").string();
    fs::copy_file(vector_path("conv1d_silu_bias.safetensors"), input);
    std::ofstream((dir / "regular").string()) << "x";
    fs::create_symlink(dir / "loop2", dir / "loop1");
    fs::create_symlink(dir / "loop1", dir / "loop2");
    loop = (dir / "loop1").string();
    under_file = (dir / "regular" / "x").string();
    fifo = (dir / "fifo").string();
    ::mkfifo(fifo.c_str(), 0600);
    unwritable = "/proc/gdnv-fuzz/x";
    too_long = (dir / std::string(300, 'n')).string();
    missing_dir = (dir / "missing" / "x").string();
  }
  ~Sandbox() { fs::remove_all(dir); }
  std::vector<std::string> paths(bool writable) const {
    std::vector<std::string> p{loop, under_file, fifo, unwritable, too_long, missing_dir, dir.string(), loop + "/x"};
    if (writable) p.push_back(input);
    return p;
  }
};

const Sandbox& sandbox() {
  static const Sandbox s;
  return s;
}

// Values no option should take quietly (or that test its bounds). Huge sizes are ones whose allocation
// fails at once (not ~2^31 elements, which would be slow, not wrong).
std::vector<std::string> hostile_values() {
  return {"-1",
          "-9223372036854775808",
          "0",
          "100000000000",
          "9223372036854775807",
          "18446744073709551616",
          "4294967296000",
          "1e300",
          "-1e-300",
          "inf",
          "nan",
          "",
          " ",
          "abc",
          "1,2,x",
          ",,",
          "0,0",
          "\xff\xfe\x80",
          "caf\xc3",
          "\x1b[31mred",
          "line\nbreak",
          "\xef\xbc\x91\xef\xbc\x92",  // full-width 12
          std::string(5000, 'x'),
          "--",
          "-",
          "=",
          "seq=1:3",
          "mpi",
          "inproc:0",
          "inproc:99999999999"};
}

std::vector<Surface> surfaces() {
  const Sandbox& s = sandbox();
  const std::string d = s.dir.string();
  return {
      {{"inspect"}, {s.input}, {}},
      {{"layout"}, {"--layout", "zigzag", "--cp", "2", "--rank", "0", "--seq-len", "8"}, {}},
      {{"compare"}, {s.input, s.input}, {}},
      {{"plan"},
       {"--hidden", "64", "--num-key-heads", "2", "--num-value-heads", "4", "--key-head-dim", "16", "--value-head-dim",
        "16", "--tp", "1", "--cp", "2", "--lengths", "64"},
       {}},
      {{"reference"}, {"--in", s.input, "--out", d + "/ref.safetensors"}, {}},
      {{"probe", "dump"},
       {"--mode", "cp1", "--image", "x", "--out", d + "/img", "--backend", "fuzz-stop"},
       {"--backend"}},
      {{"probe", "compare"}, {"--ref", d, "--cand", d}, {}},
      {{"probe", "cross-mode"}, {"--dir", d}, {}},
      {{"probe", "oracle"}, {"--dir", d}, {}},
      {{"train"}, {"--world", "fuzz-stop"}, {"--world"}},
      {{"run"}, {"--backend", "fuzz-stop"}, {"--backend"}},
      {{"gate"}, {"--step", "fuzz-stop"}, {"--step"}},
      {{"fixtures", "generate"}, {"--dir", d + "/fx", "--catalog", "fuzz-stop"}, {"--catalog"}},
      {{"fixtures", "verify"}, {"--dir", d}, {"--update"}},
      {{"fixtures", "precision-baseline"}, {"--write", s.unwritable}, {}, false},
  };
}

// An index in [0, n), uniform over the whole run (RapidCheck scales inRange by its size, which
// would favour the first commands of the list).
rc::Gen<std::size_t> uniform(std::size_t n) { return rc::gen::resize(100, rc::gen::inRange<std::size_t>(0, n)); }

std::string surface_name(const Surface& s) {
  std::string n;
  for (const auto& w : s.command) n += (n.empty() ? "" : " ") + w;
  return n;
}

struct Tally {
  int vectors = 0, crashes = 0, hangs = 0, wrong_exits = 0;
  std::map<int, int> codes;
};

std::string shown(const std::vector<std::string>& args) {
  std::string text;
  for (const auto& a : args) text += " '" + a + "'";
  return text.size() > 600 ? text.substr(0, 600) + "..." : text;
}

TEST(CliArgsFuzz, EveryVectorExitsZeroToThreeWithOneErrorLine) {
  const std::vector<Surface> all = surfaces();
  std::vector<std::vector<Option>> options;
  for (const auto& s : all) {
    options.push_back(options_of(s.command));
    ASSERT_FALSE(options.back().empty()) << surface_name(s) << ": no options read from --help";
  }
  // Relative names among the values ("abc", "-") are written beside the sandbox's files, nowhere else.
  const fs::path cwd = fs::current_path();
  fs::current_path(sandbox().dir);
  std::map<std::string, Tally> tally;
  constexpr double kHangSeconds = 5.0;
  const bool ok = rc::check("every argument vector exits 0..3, exit 3 with one error line", [&] {
    const auto which = *uniform(all.size());
    const Surface& s = all[which];
    std::vector<Option> fuzzable;
    for (const auto& o : options[which])
      if (std::find(s.keep.begin(), s.keep.end(), o.name) == s.keep.end()) fuzzable.push_back(o);
    if (s.command[0] == "inspect" || s.command[0] == "compare") fuzzable.push_back({"", true});  // positionals
    std::vector<std::string> values = hostile_values(), paths = sandbox().paths(s.writable_paths);
    values.insert(values.end(), paths.begin(), paths.end());

    std::vector<std::string> args = s.command;
    args.insert(args.end(), s.base.begin(), s.base.end());
    const auto n = 1 + static_cast<int>(*uniform(3));
    for (int i = 0; i < n; ++i) {
      const Option& o = fuzzable[*uniform(fuzzable.size())];
      if (!o.name.empty()) args.push_back(o.name);
      if (o.takes_value) {
        const bool path = *uniform(3) == 0;
        const auto& pool = path ? paths : values;
        args.push_back(pool[*uniform(pool.size())]);
      }
    }
    Tally& t = tally[surface_name(s)];
    ++t.vectors;
    Outcome r{};
    try {
      r = run(args);
    } catch (const std::exception& e) {
      ++t.crashes;
      RC_FAIL("escaped exception: " + std::string(e.what()) + " from" + shown(args));
    } catch (...) {
      ++t.crashes;
      RC_FAIL("escaped non-std exception from" + shown(args));
    }
    ++t.codes[r.code];
    if (r.code == 0 && std::getenv("GDNV_ARGFUZZ_SHOW_PASSES")) std::cout << "exit 0:" << shown(args) << "\n";
    t.hangs += r.seconds > kHangSeconds;
    const int error_lines = static_cast<int>(std::count(r.err.begin(), r.err.end(), '\n'));
    const bool right =
        r.code >= 0 && r.code <= 3 && (r.code != 3 || (error_lines == 1 && r.err.rfind("error: ", 0) == 0));
    t.wrong_exits += !right;
    RC_ASSERT_FALSE(r.seconds > kHangSeconds);
    if (!right) RC_FAIL("exit " + std::to_string(r.code) + ", stderr '" + r.err + "' from" + shown(args));
  });
  fs::current_path(cwd);
  int total = 0;
  std::cout << "surface                         vectors  exit0  exit1  exit2  exit3  crashes  hangs  wrong\n";
  for (const auto& [name, t] : tally) {
    char line[200];
    std::snprintf(line, sizeof line, "%-30s %8d %6d %6d %6d %6d %8d %6d %6d\n", name.c_str(), t.vectors,
                  t.codes.count(0) ? t.codes.at(0) : 0, t.codes.count(1) ? t.codes.at(1) : 0,
                  t.codes.count(2) ? t.codes.at(2) : 0, t.codes.count(3) ? t.codes.at(3) : 0, t.crashes, t.hangs,
                  t.wrong_exits);
    std::cout << line;
    total += t.vectors;
  }
  std::cout << "total vectors: " << total << "\n";
  EXPECT_TRUE(ok);
  EXPECT_EQ(tally.size(), all.size()) << "every command was fuzzed";
}

}  // namespace
}  // namespace gdnv
