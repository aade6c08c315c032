// Gate step "safetensors round-trip": one tensor of every dtype plus the degenerate shapes, through
// serialize and parse, must come back with identical bytes; the same file written to disk and read back
// in I/O pieces smaller than its tensors (the pieces the reader cuts a tensor over 64 MiB into); and the
// output safety every written file relies on (docs/DESIGN.md §5): an output that is an input by another
// spelling or through a link is refused, a write through a link replaces its target atomically.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/file.hpp"
#include "core/safetensors.hpp"
#include "gate/steps.hpp"

namespace gdnv::gate {
namespace {

namespace fs = std::filesystem;

// 1000-byte pieces: the 2400-byte tensor spans three (the last one partial), the header's length puts
// every tensor's start off a piece boundary, and the small ones sit inside one piece or across two.
constexpr std::uint64_t kSmallPiece = 1000;

void file_round_trip(StepResult& r, TensorFile file) {
  const std::string label = "file read in 1000-byte pieces";
  if (!r.selected(label)) return;
  Tensor wide(DType::F64, {300});
  for (std::int64_t i = 0; i < wide.numel(); ++i) wide.set(i, 1.0 / (i + 3));
  file.tensors.emplace("wide", wide);
  const fs::path dir = fs::temp_directory_path() / ("gdnv_gate_safetensors_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "pieces.safetensors").string();
  std::string why;
  try {
    write_safetensors(path, file);
    const TensorFile back = read_safetensors(path, kSmallPiece);
    for (const auto& [name, t] : file.tensors)
      if (why.empty() && !(back.has(name) && back.at(name, path).bitwise_equal(t)))
        why = "tensor " + name + " did not come back with its bytes";
  } catch (const Error& e) {
    why = e.what();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  r.check(why.empty(), label, why);
}

// "" when check_outputs refuses `output` against `input` with a message holding `why`, else what it did.
std::string refused(const std::string& output, const std::string& input, const std::string& why) {
  try {
    check_outputs({{"--json", output}}, {input});
  } catch (const ConfigError& e) {
    return std::string(e.what()).find(why) != std::string::npos ? "" : "refused with: " + std::string(e.what());
  }
  return "accepted";
}

std::uint64_t inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::string text_of(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// In a scratch directory: x, a link to it, an image directory img holding a rank file and a link to that
// from outside img; t/target.json and l/link.json -> ../t/target.json.
void output_safety(StepResult& r) {
  const fs::path dir = fs::temp_directory_path() / ("gdnv_gate_outputs_" + std::to_string(::getpid()));
  const std::string x = (dir / "x").string(), img = (dir / "img").string(), link = (dir / "l" / "link.json").string(),
                    target = (dir / "t" / "target.json").string();
  std::error_code ec;
  fs::remove_all(dir, ec);
  for (const char* d : {"sub", "img", "t", "l"}) fs::create_directories(dir / d);
  for (const std::string& f : {x, img + "/cp1.rank0.safetensors", target}) std::ofstream(f) << "old";
  fs::create_symlink(x, dir / "x.link");
  fs::create_symlink(img + "/cp1.rank0.safetensors", dir / "rank.link");
  fs::create_symlink("../t/target.json", link);
  r.check_case("output: the input by another spelling", [&] {
    for (const std::string& o : {(dir / "." / "x").string(), (dir / "sub" / ".." / "x").string()})
      if (const std::string why = refused(o, x, "is the input"); !why.empty()) return o + ": " + why;
    return std::string();
  });
  r.check_case("output: the input through a link", [&] {
    const std::string why = refused((dir / "x.link").string(), x, "is the input");
    return why.empty() ? why : "x.link: " + why;
  });
  r.check_case("output: a link to a file of an input directory", [&] {
    const std::string why = refused((dir / "rank.link").string(), img, "is a file of the input directory");
    return why.empty() ? why : "rank.link: " + why;
  });
  r.check_case("output: a write through a link replaces its target atomically", [&]() -> std::string {
    const std::uint64_t before = inode(target);
    write_file_atomic(link, std::string("new"));
    if (!fs::is_symlink(link)) return "the link was replaced by a file";
    if (text_of(target) != "new") return "the target holds '" + text_of(target) + "', not 'new'";
    if (inode(target) == before) return "the target was rewritten in place, not replaced by a rename";
    try {
      write_file_atomic(link, [](std::FILE* f) {
        std::fputs("partial", f);
        return false;  // the write failed midway
      });
      return "a failed write through the link did not fail";
    } catch (const IoError&) {
    }
    if (text_of(target) != "new") return "a failed write left '" + text_of(target) + "' in the target";
    for (const char* d : {"t", "l"})
      for (const auto& e : fs::directory_iterator(dir / d))
        if (e.path().filename().string().find(".tmp.") != std::string::npos) return "left " + e.path().string();
    return "";
  });
  fs::remove_all(dir, ec);
}

StepResult run(const StepOptions& options) {
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
  StepResult r(options);
  for (const auto& [name, t] : file.tensors)
    r.check(back.has(name) && back.at(name, "gate").bitwise_equal(t), "tensor " + name, "did not round-trip");
  file_round_trip(r, file);
  output_safety(r);
  return r;
}

}  // namespace

const Step safetensors_round_trip{"safetensors round-trip", run};

}  // namespace gdnv::gate
