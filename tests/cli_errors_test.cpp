// Bad input through run_cli in-process, the reproducers of crashes and wrong exits as fixed cases:
// every exception is one `error:` line and exit 3; outputs are checked before any work (an input, a
// directory, a device, a loop, an unwritable path is refused with nothing done); several outputs are
// written all or none; a terminating signal leaves no temp file behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cli/command.hpp"
#include "cli_testing.hpp"
#include "core/file.hpp"
#include "core/vectors.hpp"

namespace gdnv {
namespace {

namespace fs = std::filesystem;

struct InProcess {
  int code;
  std::string out, err;
};

InProcess run_in_process(const std::vector<std::string>& args) {
  std::vector<const char*> argv{"gdn-verify"};
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  const int code = cli::run_cli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Exit 3, exactly one line on stderr, starting "error: " and containing `part`.
void expect_error(const std::vector<std::string>& args, const std::string& part) {
  std::string joined;
  for (const auto& a : args) joined += " " + a;
  const InProcess r = run_in_process(args);
  EXPECT_EQ(r.code, 3) << joined << "\n" << r.out << r.err;
  EXPECT_EQ(lines(r.err), 1) << joined << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << joined << "\n" << r.err;
  EXPECT_TRUE(testing::contains(r.err, part)) << joined << "\nwanted: " << part << "\ngot: " << r.err;
}

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("cli_errors");
    fs::copy_file(vector_path("conv1d_silu_bias.safetensors"), at("a.safetensors"));
    fs::copy_file(vector_path("conv1d_silu_bias.safetensors"), at("b.safetensors"));
    std::ofstream(at("regular")) << "x";
    fs::create_symlink(at("loop2"), at("loop1"));
    fs::create_symlink(at("loop1"), at("loop2"));
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string at(const std::string& name) const { return (dir_ / name).string(); }
  // The files in the test directory, as names.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// The crashes of the argument fuzz: a std::filesystem error escaped run_cli (SIGABRT, exit 134).
TEST_F(CliErrors, FilesystemErrorsAreOneLine) {
  const std::string too_long(300, 'a');
  expect_error({"compare", too_long, "x"}, too_long);
  expect_error({"compare", at("loop1"), at("a.safetensors")}, "loop1");
  expect_error({"inspect", at("regular") + "/x"}, "regular/x");
  expect_error({"probe", "oracle", "--dir", at("loop1")}, "loop1");
}

// A FIFO given as an input: refused, not read (the read blocked until a writer came). The writer
// below unblocks a reader that waits, so a regression fails instead of hanging.
TEST_F(CliErrors, AFifoInputIsRefusedNotRead) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const int fd = ::open(at("fifo").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  expect_error({"inspect", at("fifo")}, at("fifo") + ": is a FIFO, expected a file");
  expect_error({"compare", at("fifo"), at("a.safetensors")}, "is a FIFO, expected a file");
  writer.join();
}

// nlohmann::json's type_error: a meta.json whose modes is not an object (the dump aborted).
TEST_F(CliErrors, AMetaJsonOfTheWrongShapeIsOneLine) {
  const std::string img = at("img");
  ASSERT_EQ(run_in_process({"probe", "dump", "--mode", "cp1", "--image", "x", "--out", img}).code, 0);
  std::ofstream(img + "/meta.json") << R"({"image": "x", "case": "thd-gva", "dtype": "F32", "modes": [1]})";
  expect_error({"probe", "dump", "--mode", "cp1", "--image", "x", "--out", img}, "");
}

// std::bad_alloc from a size an option asks for.
TEST_F(CliErrors, OutOfMemoryIsOneLine) {
  expect_error({"train", "--vocab", "100000000000", "--steps", "1", "--modes", "cp1"}, "train");
}

TEST_F(CliErrors, NonFiniteLearningRateAndNegativeSeedAreRefused) {
  expect_error({"train", "--lr", "inf"}, "--lr inf is not a learning rate");
  expect_error({"train", "--lr", "nan"}, "--lr nan is not a learning rate");
  for (const char* seed : {"-1", "1e3", "１２", "18446744073709551616", ""}) {
    expect_error({"train", "--seed", seed}, "--seed '" + std::string(seed) + "' is not a seed");
    expect_error({"run", "--seed", seed}, "is not a seed");
    expect_error({"probe", "dump", "--mode", "cp1", "--image", "x", "--out", at("img"), "--seed", seed},
                 "is not a seed");
  }
  EXPECT_FALSE(fs::exists(at("img")));
}

TEST_F(CliErrors, AnOutputThatIsAnInputIsRefused) {
  expect_error({"reference", "--in", at("a.safetensors"), "--out", at("a.safetensors")},
               "--out " + at("a.safetensors") + ": is the input");
  expect_error({"compare", at("a.safetensors"), at("b.safetensors"), "--json", at("a.safetensors")},
               "--json " + at("a.safetensors") + ": is the input");
  fs::create_symlink(at("b.safetensors"), at("b.link"));
  expect_error({"compare", at("a.safetensors"), at("b.safetensors"), "--markdown", at("b.link")}, "is the input");
  expect_error({"compare", dir_.string(), dir_.string(), "--json", at("a.safetensors")},
               "is a file of the input directory");
  EXPECT_EQ(read_file_bytes(at("a.safetensors")), read_file_bytes(vector_path("conv1d_silu_bias.safetensors")));
}

// Every command that writes an output from an input refuses an output that is the input by another
// spelling (`./x` from the input's directory, `sub/../x`, an absolute path) or through a link (absolute or
// relative), and an output that lands on a file of an input directory (a probe image's rank file), even
// through a link from elsewhere: one line, exit 3, nothing written.
TEST_F(CliErrors, AnOutputThatIsAnInputByAnotherSpellingOrThroughALinkIsRefusedByEveryCommand) {
  fs::create_directory(at("sub"));
  fs::create_directory(at("img"));
  fs::create_directory(at("img2"));
  fs::copy_file(at("a.safetensors"), at("img/cp1.rank0.safetensors"));
  std::ofstream(at("lengths.txt")) << "64 2\n";
  fs::create_symlink(at("a.safetensors"), at("a.link"));
  fs::create_symlink("a.safetensors", at("a.rel"));
  fs::create_symlink(at("img/cp1.rank0.safetensors"), at("rank.link"));
  fs::create_symlink("lengths.txt", at("lengths.link"));
  const std::vector<std::string> plan{"plan",
                                      "--hidden",
                                      "64",
                                      "--num-key-heads",
                                      "2",
                                      "--num-value-heads",
                                      "4",
                                      "--key-head-dim",
                                      "16",
                                      "--value-head-dim",
                                      "16",
                                      "--tp",
                                      "1",
                                      "--cp",
                                      "2",
                                      "--length-dist",
                                      at("lengths.txt")};
  const auto with = [](std::vector<std::string> args, const std::string& option, const std::string& path) {
    args.insert(args.end(), {option, path});
    return args;
  };
  const std::vector<std::string> a_spellings{"./a.safetensors",          "a.safetensors", "sub/../a.safetensors",
                                             at("sub/../a.safetensors"), at("a.link"),    "a.rel"};
  const std::vector<std::string> rank_spellings{"img/./cp1.rank0.safetensors", "sub/../img/cp1.rank0.safetensors",
                                                at("rank.link"), "rank.link"};
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);  // the relative spellings are relative to the test directory
  for (const std::string& a : a_spellings) {
    expect_error({"reference", "--in", at("a.safetensors"), "--out", a}, "--out " + a + ": is the input");
    for (const char* option : {"--json", "--markdown"})
      expect_error({"compare", at("a.safetensors"), at("b.safetensors"), option, a},
                   std::string(option) + " " + a + ": is the input");
  }
  for (const std::string& l : {std::string("./lengths.txt"), std::string("sub/../lengths.txt"), at("lengths.link")})
    for (const char* option : {"--csv", "--svg"})
      expect_error(with(plan, option, l), std::string(option) + " " + l + ": is the input");
  for (const std::string& r : rank_spellings) {
    const std::string in_dir = ": is a file of the input directory";
    for (const char* option : {"--json", "--markdown"}) {
      expect_error({"probe", "oracle", "--dir", "img", option, r}, in_dir);
      expect_error({"probe", "compare", "--ref", "img2", "--cand", at("img"), option, r}, in_dir);
      expect_error({"compare", "img", "img2", option, r}, in_dir);
    }
    expect_error({"probe", "cross-mode", "--dir", at("img"), "--json", r}, in_dir);
  }
  fs::current_path(cwd);
  EXPECT_EQ(read_file_bytes(at("a.safetensors")), read_file_bytes(vector_path("conv1d_silu_bias.safetensors")));
  EXPECT_EQ(read_file_bytes(at("img/cp1.rank0.safetensors")),
            read_file_bytes(vector_path("conv1d_silu_bias.safetensors")));
  EXPECT_EQ(read_file_text(at("lengths.txt")), "64 2\n");
  EXPECT_TRUE(fs::is_symlink(at("a.link")) && fs::is_symlink(at("a.rel")) && fs::is_symlink(at("rank.link")));
  EXPECT_EQ(listing(),
            (std::vector<std::string>{"a.link", "a.rel", "a.safetensors", "b.safetensors", "img", "img2",
                                      "lengths.link", "lengths.txt", "loop1", "loop2", "rank.link", "regular", "sub"}));
}

// The gate's inputs (the committed fixtures, precision baseline and reference vectors) are no output either.
TEST_F(CliErrors, TheGatesCommittedInputsAreNoOutput) {
  expect_error({"gate", "--step", "layout properties", "--junit", vector_path("README.md")},
               "is a file of the input directory");
}

TEST_F(CliErrors, DirectoriesDevicesLoopsAndUnwritablePathsAreRefusedBeforeAnyWork) {
  const std::vector<std::string> compare{"compare", at("a.safetensors"), at("b.safetensors")};
  const auto with = [&](const std::string& option, const std::string& path) {
    auto args = compare;
    args.insert(args.end(), {option, path});
    return args;
  };
  expect_error(with("--json", dir_.string()), "is a directory");
  // A special file (a FIFO here: a test must never risk replacing a system device such as /dev/null).
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  expect_error(with("--json", at("fifo")), "is a FIFO");
  expect_error(with("--markdown", at("loop1")), "loop1");
  expect_error(with("--json", at("regular") + "/x.json"), "Not a directory");
  expect_error(with("--json", at("missing/x.json")), "cannot be written");
  expect_error(with("--json", "/proc/gdnv.json"), "cannot be written");
  expect_error(with("--json", at(std::string(300, 'j'))), "File name too long");
  auto twice = with("--json", at("r.json"));
  twice.insert(twice.end(), {"--markdown", at("r.json")});
  expect_error(twice, "given for two outputs");
  EXPECT_EQ(listing(),
            (std::vector<std::string>{"a.safetensors", "b.safetensors", "fifo", "loop1", "loop2", "regular"}));
}

// Each command checks every output before its work: nothing printed, nothing written.
TEST_F(CliErrors, EveryCommandChecksItsOutputsFirst) {
  const std::string bad = "/proc/gdnv-unwritable";
  const std::vector<std::vector<std::string>> cases = {
      {"gate", "--step", "layout properties", "--junit", bad},
      {"train", "--steps", "1", "--csv", at("t.csv"), "--json", bad},
      {"plan",      "--hidden",       "64", "--num-key-heads",  "2",  "--num-value-heads",
       "4",         "--key-head-dim", "16", "--value-head-dim", "16", "--tp",
       "1",         "--cp",           "2",  "--lengths",        "64", "--csv",
       at("p.csv"), "--svg",          bad},
      {"run", "--json", bad},
      {"reference", "--in", at("a.safetensors"), "--out", bad},
      {"probe", "oracle", "--dir", dir_.string(), "--markdown", bad},
      {"fixtures", "precision-baseline", "--write", "/proc/gdnv.json"},
  };
  for (const auto& args : cases) {
    const InProcess r = run_in_process(args);
    EXPECT_EQ(r.code, 3) << args[0] << "\n" << r.out << r.err;
    EXPECT_EQ(lines(r.err), 1) << args[0] << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args[0] << ": printed before the outputs were checked";
  }
  EXPECT_FALSE(fs::exists(at("t.csv")));
  EXPECT_FALSE(fs::exists(at("p.csv")));
}

// Directory outputs: probe dump's --out and fixtures generate's --dir, checked before the layer runs.
TEST_F(CliErrors, OutputDirectoriesAreCheckedBeforeAnyWork) {
  for (const std::string& out : {at("regular"), at("regular") + "/img", at("loop1"), at("loop1") + "/img",
                                 at(std::string(300, 'd')), std::string("/proc/gdnv-img")}) {
    const InProcess r = run_in_process({"probe", "dump", "--mode", "cp1", "--image", "x", "--out", out});
    EXPECT_EQ(r.code, 3) << out << "\n" << r.out << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_TRUE(testing::contains(r.err, "error: --out " + out + ": ")) << r.err;
    EXPECT_EQ(r.out, "") << "the dump ran before its --out was checked";
  }
  expect_error({"fixtures", "generate", "--dir", at("regular") + "/fx"}, "--dir " + at("regular") + "/fx: ");
  EXPECT_EQ(listing(), (std::vector<std::string>{"a.safetensors", "b.safetensors", "loop1", "loop2", "regular"}));
}

// A symlink output is written through (docs: core/file.hpp): the link stays, its target is replaced.
TEST_F(CliErrors, ASymlinkOutputIsWrittenThrough) {
  std::ofstream(at("target.json")) << "old";
  fs::create_symlink(at("target.json"), at("link.json"));
  const InProcess r = run_in_process({"compare", at("a.safetensors"), at("b.safetensors"), "--json", at("link.json")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(at("link.json")));
  EXPECT_NE(read_file_text(at("target.json")), "old");
}

// A write through a symlink (docs/DESIGN.md §5) replaces the link's target atomically and keeps the link:
// the target is a new file renamed over the old one (another inode; a write in place would keep it), a
// failed write leaves the target's old bytes and no temp file, in the link's directory or the target's.
TEST_F(CliErrors, AWriteThroughASymlinkReplacesItsTargetAtomicallyAndKeepsTheLink) {
  fs::create_directory(at("t"));
  fs::create_directory(at("l"));
  std::ofstream(at("t/target.json")) << "old";
  fs::create_symlink("../t/target.json", at("l/link.json"));
  const auto inode = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(at("t/target.json").c_str(), &st), 0);
    return st.st_ino;
  };
  const auto no_temp_files = [&] {
    for (const char* d : {"t", "l"})
      for (const auto& e : fs::directory_iterator(at(d)))
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  };
  const auto before = inode();
  write_file_atomic(at("l/link.json"), std::string("new"));
  EXPECT_TRUE(fs::is_symlink(at("l/link.json")));
  EXPECT_EQ(fs::read_symlink(at("l/link.json")), "../t/target.json");
  EXPECT_EQ(read_file_text(at("t/target.json")), "new");
  EXPECT_NE(inode(), before) << "the target was rewritten in place, not replaced by a rename";
  no_temp_files();
  EXPECT_THROW(write_file_atomic(at("l/link.json"),
                                 [](std::FILE* f) {
                                   std::fputs("partial", f);
                                   return false;
                                 }),
               IoError);
  EXPECT_TRUE(fs::is_symlink(at("l/link.json")));
  EXPECT_EQ(read_file_text(at("t/target.json")), "new");
  no_temp_files();
  // Through a command: the same.
  const auto again = inode();
  const InProcess r =
      run_in_process({"compare", at("a.safetensors"), at("b.safetensors"), "--json", at("l/link.json")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(at("l/link.json")));
  EXPECT_NE(read_file_text(at("t/target.json")), "new");
  EXPECT_NE(inode(), again);
  no_temp_files();
}

TEST_F(CliErrors, SeveralOutputsAreWrittenAllOrNone) {
  fs::create_directory(at("sub"));
  std::ofstream(at("sub/kept")) << "kept";
  write_file_atomic(at("first"), std::string("before"));
  // The second output's directory disappears after the check: the first must not be replaced either.
  EXPECT_THROW(write_files_atomic({{at("first"), "after"}, {at("gone/second"), "x"}}), Error);
  EXPECT_EQ(read_file_text(at("first")), "before");
  for (const auto& name : listing()) EXPECT_EQ(name.find(".tmp."), std::string::npos) << name;
}

// SIGTERM in the middle of a write: the process dies by the signal and removes its temp file.
TEST_F(CliErrors, SigtermDuringAWriteLeavesNoTempFile) {
  const std::string path = at("out.bin");
  EXPECT_EXIT(write_file_atomic(path,
                                [](std::FILE* f) {
                                  std::fputs("partial", f);
                                  std::fflush(f);
                                  std::raise(SIGTERM);
                                  return true;
                                }),
              ::testing::KilledBySignal(SIGTERM), "");
  for (const auto& name : listing()) EXPECT_EQ(name.find("out.bin"), std::string::npos) << name;
}

}  // namespace
}  // namespace gdnv
