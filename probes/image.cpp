#include "probes/image.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <regex>

#include "core/error.hpp"
#include "core/file.hpp"
#include "core/text.hpp"
#include "layouts/apply.hpp"
#include "probes/build_info.hpp"
#include "reference/layer_io.hpp"

namespace gdnv::probes {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

const char* const kModes[] = {"cp1", "headwise", "chunkwise", "all_gather"};

harness::RunSpec base_spec(ref::LayerConfig::Values layer, std::vector<std::int64_t> lengths,
                           harness::GateRegime gates = harness::GateRegime::Default) {
  harness::RunSpec s;
  s.layer = layer;
  s.lengths = std::move(lengths);
  s.gates = gates;
  return s;
}

std::string meta_path(const std::string& dir) { return (fs::path(dir) / "meta.json").string(); }

constexpr const char* kLibraryStrings[] = {"name", "version", "path", "source_sha256"};

// meta.json's "library" as the Python bridge writes it (docs/json_format.md), `key` its place ("library",
// "library.kernels"): what `fail(what)` is thrown for otherwise.
template <class Fail>
void check_library_object(const json& l, const std::string& key, const Fail& fail) {
  if (!l.is_object()) throw fail("'" + key + "' is not an object");
  for (const char* field : kLibraryStrings)
    if (!l.contains(field) || !l[field].is_string())
      throw fail("'" + key + "." + field + "' is missing or not a string");
  if (!l.contains("files") || !l["files"].is_number_integer() || l["files"].get<std::int64_t>() < 0)
    throw fail("'" + key + ".files' is missing or not a non-negative integer");
  if (l.contains("commit") && !l["commit"].is_string()) throw fail("'" + key + ".commit' is not a string");
  if (l.contains("kernels")) check_library_object(l["kernels"], key + ".kernels", fail);
}

// Absent is fine: this project's own images name no library.
template <class Fail>
void check_library(const json& meta, const Fail& fail) {
  if (meta.contains("library")) check_library_object(meta["library"], "library", fail);
}

// DIR/meta.json (an empty object when there is none); FormatError unless it is the object a dump writes:
// string image, case and dtype, an object of modes, and a third-party image's library (check_library).
json read_meta(const std::string& dir) {
  const std::string path = meta_path(dir);
  if (!fs::exists(path)) return json::object();
  json meta;
  try {
    meta = json::parse(read_file_text(path));
  } catch (const json::parse_error& e) {
    throw FormatError(path + ": not valid JSON (" + std::string(e.what()) + "): remove the directory and dump again");
  }
  const auto fail = [&](const std::string& what) {
    return FormatError(path + ": " + what + ": not a meta.json written by a dump; remove the directory and dump again");
  };
  if (!meta.is_object()) throw fail("not a JSON object");
  for (const char* key : {"image", "case", "dtype"})
    if (!meta.contains(key) || !meta[key].is_string()) throw fail(std::string("no string '") + key + "'");
  if (!meta.contains("modes") || !meta["modes"].is_object()) throw fail("'modes' is missing or not an object");
  check_library(meta, fail);
  return meta;
}

// What makes two dumps the same image of the same case: a DIR holds only one.
json identity(const DumpSpec& spec) {
  return {{"image", spec.image},
          {"case", spec.case_name},
          {"dtype", dtype_name(spec.dtype)},
          {"seed", spec.seed},
          {"backend", spec.backend}};
}

void check_same_image(const json& meta, const DumpSpec& spec, const std::string& dir) {
  if (meta.empty()) return;
  const json wanted = identity(spec);
  for (const auto& [key, value] : wanted.items())
    if (!meta.contains(key) || meta[key] != value)
      throw ConfigError(dir + " holds an image with " + key + " " + (meta.contains(key) ? meta[key].dump() : "unset") +
                        ", not " + value.dump() + ": dump into a fresh --out directory");
}

json geometry(const harness::RunSpec& s) {
  const ref::LayerConfig c(s.layer);
  json g = {{"hidden_size", c.hidden()},          {"linear_num_key_heads", c.Hk()},  {"linear_num_value_heads", c.Hv()},
            {"linear_key_head_dim", c.dk()},      {"linear_value_head_dim", c.dv()}, {"linear_conv_kernel_dim", c.W()},
            {"format", cp::format_name(s.format)}};
  if (s.format == cp::Format::Thd) g["lengths"] = s.lengths;
  else g["seq_len"] = s.seq_len, g["batch"] = s.batch;
  g["conv_bias"] = c.conv_bias();
  g["gates"] = std::string(harness::gate_regime_name(s.gates));
  return g;
}

constexpr const char* kRowsPrefix = "rows::";
constexpr const char* kColsPrefix = "cols::";
constexpr const char* kSummedKey = "summed_stages";  // metadata: the stages that are partials over CP ranks

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ",") + n;
  return s;
}

// Each recorded stage as the rank computed it, F64 (what its buffer held, widened exactly), with the
// micro-batch rows (THD: packed token; SBHD: b S + s; boundary_state: the CP rank) and full-layer
// columns of its elements.
void add_stages(const std::vector<cp::HostStage>& stages, TensorFile& f) {
  std::vector<std::string> summed;
  for (const cp::HostStage& h : stages) {
    if (f.has(h.name))
      throw Error("stage '" + h.name + "' recorded twice on one rank: the probe image holds one piece per rank");
    f.tensors[h.name] = h.data;
    f.tensors[kRowsPrefix + h.name] = Tensor::from(h.rows, {static_cast<std::int64_t>(h.rows.size())});
    f.tensors[kColsPrefix + h.name] = Tensor::from(h.cols, {static_cast<std::int64_t>(h.cols.size())});
    if (h.sum) summed.push_back(h.name);
  }
  f.metadata[kSummedKey] = joined(summed);
}

// A rank file's stages back as what the rank recorded.
std::vector<cp::HostStage> read_stages(const TensorFile& f, const std::string& path) {
  std::vector<std::string> summed;
  if (const auto it = f.metadata.find(kSummedKey); it != f.metadata.end())
    for (std::size_t at = 0; at < it->second.size();) {
      const std::size_t comma = std::min(it->second.find(',', at), it->second.size());
      summed.push_back(it->second.substr(at, comma - at));
      at = comma + 1;
    }
  std::vector<cp::HostStage> out;
  for (const auto& [name, t] : f.tensors) {
    if (!name.starts_with("stage::") && !name.starts_with("stage_grad::")) continue;
    const Tensor rows = f.at(kRowsPrefix + name, path).to(DType::I64),
                 cols = f.at(kColsPrefix + name, path).to(DType::I64);
    cp::HostStage h{name, t.to(DType::F64), {}, {}, std::find(summed.begin(), summed.end(), name) != summed.end(),
                    false};
    for (std::int64_t i = 0; i < rows.numel(); ++i) h.rows.push_back(static_cast<std::int64_t>(rows.get(i)));
    for (std::int64_t j = 0; j < cols.numel(); ++j) h.cols.push_back(static_cast<std::int64_t>(cols.get(j)));
    if (t.numel() != rows.numel() * cols.numel())
      throw FormatError(path + ": stage '" + name + "' " + shape_str(t.shape()) + " does not hold " +
                        std::to_string(rows.numel()) + " rows of " + std::to_string(cols.numel()) +
                        " columns (its rows:: and cols:: tensors)");
    out.push_back(std::move(h));
  }
  return out;
}

TensorFile rank_tensors(const harness::RankOutput& o, const DumpSpec& spec, DType state, const std::string& run) {
  TensorFile f;
  f.tensors["out"] = o.out.to(spec.dtype);
  f.tensors["grad_hidden"] = o.grad_hidden.to(spec.dtype);
  for (const auto& [name, t] : o.grads) f.tensors["grad::" + name] = t.to(state);
  f.metadata = {{"image", spec.image},
                {"mode", spec.mode},
                {"rank", std::to_string(o.cp_rank)},
                {"world", std::to_string(o.cp_size)},
                {"case", spec.case_name},
                {"dtype", std::string(dtype_name(spec.dtype))},
                {"run", run}};
  if (spec.stages) add_stages(o.stages, f);
  return f;
}

TensorFile inputs_file(const harness::Case& k, const DumpSpec& spec) {
  TensorFile f = ref::write_layer_case({k.config, k.params, k.hidden, k.cu_seqlens, k.grad_output, 64});
  f.metadata["image"] = spec.image;
  f.metadata["case"] = spec.case_name;
  f.metadata["seed"] = std::to_string(spec.seed);
  f.metadata["dtype"] = std::string(dtype_name(spec.dtype));
  f.metadata["note"] = "inputs rounded to the dtype the implementation stored them in, written exactly as F64";
  return f;
}

// DIR's files named <mode>.rank<r>.safetensors for any mode: file, mode and rank (-1 when the rank is
// not written as a dump writes it, e.g. rank01).
struct RankFileName {
  std::string file, mode;
  int rank;
};
std::vector<RankFileName> rank_file_names(const std::string& dir) {
  static const std::regex name(R"(([^.]+)\.rank([0-9]+)\.safetensors)");
  std::vector<RankFileName> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(file, m, name)) continue;
    const std::string digits = m[2];
    const bool canonical = digits.size() < 10 && (digits == "0" || digits[0] != '0');
    out.push_back({file, m[1], canonical ? std::stoi(digits) : -1});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
  return out;
}

std::vector<std::pair<std::string, int>> rank_files_in(const std::string& dir, const std::string& mode) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& f : rank_file_names(dir))
    if (f.mode == mode) out.emplace_back(f.file, f.rank);
  return out;
}

std::string meta_text(const std::map<std::string, std::string>& metadata, const std::string& key) {
  const auto it = metadata.find(key);
  return it == metadata.end() ? "(none)" : it->second;
}

// The dtype each tensor of a rank file is stored in: out and grad_hidden the image's, the parameter
// gradients the state dtype (fp64 for fp64 storage, else fp32), stages F64, their rows and cols I64.
std::optional<DType> expected_dtype(const std::string& name, DType dtype) {
  if (name == "out" || name == "grad_hidden") return dtype;
  if (name.starts_with("grad::")) return state_dtype_for(dtype);
  if (name.starts_with("stage::") || name.starts_with("stage_grad::")) return DType::F64;
  if (name.starts_with(kRowsPrefix) || name.starts_with(kColsPrefix)) return DType::I64;
  return std::nullopt;
}

// What keeps rank file `r` of a mode declared on W ranks by run `run` out of the image: "" when none.
std::string rank_file_problem(const TensorFile& f, const json& meta, const std::string& mode, int r, int W,
                              const std::string& run, DType dtype) {
  const std::map<std::string, std::string> wanted = {{"run", run},
                                                     {"mode", mode},
                                                     {"rank", std::to_string(r)},
                                                     {"world", std::to_string(W)},
                                                     {"image", meta["image"].get<std::string>()},
                                                     {"case", meta["case"].get<std::string>()},
                                                     {"dtype", std::string(dtype_name(dtype))}};
  for (const auto& [key, value] : wanted)
    if (meta_text(f.metadata, key) != value)
      return key == "run" ? "written by run " + meta_text(f.metadata, key) + ", meta.json's " + mode + " dump is run " +
                                run + ": a file of another dump; dump --mode " + mode + " again"
                          : "metadata " + key + " '" + meta_text(f.metadata, key) + "', meta.json says '" + value +
                                "': a file of another image; dump --mode " + mode + " again";
  for (const char* name : {"out", "grad_hidden"})
    if (!f.has(name)) return std::string("no tensor '") + name + "'";
  for (const auto& [name, t] : f.tensors)
    if (const auto want = expected_dtype(name, dtype); want && t.dtype() != *want)
      return "tensor '" + name + "' is " + std::string(dtype_name(t.dtype())) + ", the image's " +
             std::string(dtype_name(dtype)) + " storage (meta.json, inputs.safetensors) stores it as " +
             std::string(dtype_name(*want));
  return "";
}

// meta.json's entry for a mode: its world (a positive integer) and run id; FormatError otherwise.
std::pair<int, std::string> declared(const json& entry, const std::string& mode, const std::string& path) {
  if (!entry.is_object() || !entry.contains("world") || !entry["world"].is_number_integer() ||
      entry["world"].get<std::int64_t>() < 1 || entry["world"].get<std::int64_t>() > 1 << 20)
    throw FormatError(path + ": modes." + mode + ".world is not a positive integer: dump the mode again");
  return {entry["world"].get<int>(),
          entry.contains("run") && entry["run"].is_string() ? entry["run"].get<std::string>() : ""};
}

}  // namespace

const std::vector<ProbeCase>& probe_cases() {
  static const std::vector<ProbeCase> table = [] {
    std::vector<ProbeCase> t{
        {"thd-gva", "THD, 3 sequences (128, 64, 32), hidden 64, Hk 4, Hv 8, dk = dv = 16",
         base_spec({64, 4, 8, 16, 16, 4, 1e-6, false}, {128, 64, 32})},
        {"thd-short", "THD, one 16-token sequence (spans of 2 at W=8), Hk = Hv = 8, dk = dv = 8, weak gates",
         base_spec({32, 8, 8, 8, 8, 4, 1e-6, false}, {16}, harness::GateRegime::Weak)},
        {"thd-odd",
         "THD, 3 sequences of odd lengths (9, 5, 3): CP=1 only, where nothing is split, hidden 64, Hk 4, "
         "Hv 8, dk = dv = 16",
         base_spec({64, 4, 8, 16, 16, 4, 1e-6, false}, {9, 5, 3})},
        {"sbhd", "SBHD, S = 128, B = 1, hidden 64, Hk 4, Hv 8, dk = dv = 16",
         base_spec({64, 4, 8, 16, 16, 4, 1e-6, false}, {})}};
    t.back().spec.format = cp::Format::Sbhd;
    t.back().spec.seq_len = 128;
    return t;
  }();
  return table;
}

std::string geometry_case_name(const harness::RunSpec& g) {
  const ref::LayerConfig c(g.layer);
  std::string name = "--format " + std::string(cp::format_name(g.format));
  name += g.format == cp::Format::Thd
              ? " --lengths " + comma_list(g.lengths)
              : " --seq-len " + std::to_string(g.seq_len) + " --batch " + std::to_string(g.batch);
  name += " --hidden " + std::to_string(c.hidden()) + " --num-key-heads " + std::to_string(c.Hk()) +
          " --num-value-heads " + std::to_string(c.Hv()) + " --key-head-dim " + std::to_string(c.dk()) +
          " --value-head-dim " + std::to_string(c.dv()) + " --conv-width " + std::to_string(c.W());
  return name + (c.conv_bias() ? " --conv-bias" : "") + " --gates " + std::string(harness::gate_regime_name(g.gates));
}

harness::CheckedRun dump_run_spec(const DumpSpec& spec, int world_size) {
  const ProbeCase* found = nullptr;
  for (const auto& c : probe_cases())
    if (c.name == spec.case_name) found = &c;
  if (!found && !spec.geometry)
    throw ConfigError("unknown --case '" + spec.case_name + "': use thd-gva, thd-short, thd-odd or sbhd");
  harness::RunSpec s = spec.geometry ? *spec.geometry : found->spec;
  s.dtype = spec.dtype;
  s.seed = spec.seed;
  s.stages = spec.stages;
  s.cp.cp = world_size;
  if (spec.mode == "cp1") {
    if (world_size != 1)
      throw ConfigError("--mode cp1 runs on one rank, not " + std::to_string(world_size) +
                        ": use --world inproc:1 (or mpirun -np 1)");
    s.cp.mode = cp::CpMode::Headwise;  // any mode is the plain layer at CP=1
  } else {
    s.cp.mode = cp::parse_mode(spec.mode);
  }
  return harness::validate_run(s);
}

void dump_rank(const DumpSpec& spec, const std::string& dir, const std::string& transport, comm::Communicator& world,
               std::unique_ptr<cp::Backend> backend) {
  const harness::CheckedRun checked = dump_run_spec(spec, world.size());
  const harness::RunSpec& rs = checked.spec;
  check_same_image(read_meta(dir), spec, dir);
  const harness::Case k = harness::make_case(rs);
  const std::string run = spec.run.empty() ? shared_run_id(world) : spec.run;
  const harness::RankOutput o = harness::run_rank(checked, k, std::move(backend), world).front();
  world.barrier();  // every rank has computed: nothing is written for a run that failed
  json meta;
  if (world.rank() == 0) {  // the mode undeclared while its rank files are replaced
    fs::create_directories(dir);
    write_safetensors((fs::path(dir) / "inputs.safetensors").string(), inputs_file(k, spec));
    meta = read_meta(dir);
    if (meta.empty()) {
      meta = identity(spec);
      meta["versions"] = build_info();
      meta["geometry"] = geometry(rs);
      meta["decay_class"] = harness::decay_class_name(harness::DecayClass::ProductOfDecays);  // docs/DESIGN.md §4
      meta["modes"] = json::object();
    }
    meta["modes"].erase(spec.mode);
    write_file_atomic(meta_path(dir), meta.dump(2) + "\n");
  }
  world.barrier();
  const DType state = state_dtype_for(spec.dtype);
  write_safetensors(rank_file(dir, spec.mode, world.rank()), rank_tensors(o, spec, state, run));
  world.barrier();  // every rank file is written: only now is the mode declared
  if (world.rank() != 0) return;
  for (const auto& [file, rank] : rank_files_in(dir, spec.mode))
    if (rank >= world.size()) fs::remove(fs::path(dir) / file);  // an earlier dump's on more ranks
  meta["modes"][spec.mode] = {
      {"world", world.size()},
      {"run", run},
      {"transport", transport},
      {"stages", spec.stages},
      {"accounting", {{"forward", counters_json(o.forward)}, {"backward", counters_json(o.backward)}}}};
  write_file_atomic(meta_path(dir), meta.dump(2) + "\n");
}

std::string new_run_id() {
  std::random_device device;
  const auto now = static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  const std::uint64_t id = ((std::uint64_t{device()} << 32) | device()) ^ now;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(id));
  return hex;
}

std::string shared_run_id(comm::Communicator& world) {
  if (world.memory() != comm::Memory::Host)
    throw Error("shared_run_id: the world moves device memory; draw the run id with new_run_id on a host world");
  std::vector<char> id(16, '\0');
  if (world.rank() == 0) {
    const std::string drawn = new_run_id();
    std::copy(drawn.begin(), drawn.end(), id.begin());
  }
  std::vector<std::int64_t> words(2);
  std::memcpy(words.data(), id.data(), id.size());
  world.broadcast(comm::MutBuf(words), 0);
  std::memcpy(id.data(), words.data(), id.size());
  return {id.begin(), id.end()};
}

std::string rank_file(const std::string& dir, const std::string& mode, int rank) {
  return (fs::path(dir) / (mode + ".rank" + std::to_string(rank) + ".safetensors")).string();
}

ImageIndex index_image(const std::string& dir) {
  ImageIndex idx;
  const std::string path = meta_path(dir);
  if (!fs::exists(path)) {
    idx.problems.push_back({"meta.json",
                            "missing: the image declares no dump (a first dump that did not finish?); "
                            "dump into a fresh --out directory"});
    return idx;
  }
  const json meta = read_meta(dir);
  idx.dtype = parse_dtype(meta["dtype"].get<std::string>(), path + " dtype");
  const std::string inputs = (fs::path(dir) / "inputs.safetensors").string();
  const TensorFile in = read_safetensors(inputs);
  for (const char* key : {"image", "case", "dtype"})
    if (meta_text(in.metadata, key) != meta[key].get<std::string>())
      idx.problems.push_back({"inputs.safetensors", std::string("metadata ") + key + " '" +
                                                        meta_text(in.metadata, key) + "', meta.json says " +
                                                        meta[key].dump() + ": dump into a fresh --out directory"});
  const bool inputs_agree = idx.problems.empty();
  std::map<std::string, std::vector<RankFileName>> files;
  for (const auto& f : rank_file_names(dir)) {
    if (std::find(std::begin(kModes), std::end(kModes), f.mode) == std::end(kModes))
      idx.problems.push_back({f.file, "not a mode of a probe image (cp1, headwise, chunkwise, all_gather): remove it"});
    else files[f.mode].push_back(f);
  }
  for (const char* mode : kModes) {
    if (!meta["modes"].contains(mode)) {
      std::string names;
      for (const auto& f : files[mode]) names += (names.empty() ? "" : ", ") + f.file;
      if (!names.empty())
        idx.problems.push_back({files[mode].front().file, names + " without a " + mode +
                                                              " entry in meta.json (a dump that did not finish?): "
                                                              "dump --mode " +
                                                              mode + " again"});
      continue;
    }
    const auto [W, run] = declared(meta["modes"][mode], mode, path);
    const std::size_t before = idx.problems.size();
    if (run.empty())
      idx.problems.push_back(
          {"meta.json", std::string("modes.") + mode + " has no run id: dump --mode " + mode + " again"});
    for (const auto& f : files[mode])
      if (f.rank < 0 || f.rank >= W)
        idx.problems.push_back({f.file, "orphan: meta.json declares " + std::string(mode) + " on " + std::to_string(W) +
                                            " rank(s), " + mode + ".rank0.." + std::to_string(W - 1) +
                                            "; remove it or dump --mode " + mode + " again"});
    for (int r = 0; r < W && !run.empty(); ++r) {
      const std::string file = fs::path(rank_file(dir, mode, r)).filename().string();
      if (!fs::exists(rank_file(dir, mode, r))) {
        idx.problems.push_back({file, "missing: meta.json declares " + std::string(mode) + " on " + std::to_string(W) +
                                          " rank(s); dump --mode " + mode + " again"});
        continue;
      }
      const std::string why =
          rank_file_problem(read_safetensors(rank_file(dir, mode, r)), meta, mode, r, W, run, idx.dtype);
      if (!why.empty()) idx.problems.push_back({file, why});
    }
    if (idx.problems.size() == before) {
      idx.modes.emplace_back(mode);
      idx.world[mode] = W;
    }
  }
  if (!inputs_agree) idx.modes.clear(), idx.world.clear();  // no mode is of this image's case
  return idx;
}

harness::Case read_inputs(const std::string& dir) {
  const std::string path = (fs::path(dir) / "inputs.safetensors").string();
  const ref::LayerCase c = ref::read_layer_case(read_safetensors(path), path);
  if (!c.grad_output) throw FormatError(path + ": no grad_output: the probes need it to judge the gradients");
  return {c.config, c.params, c.hidden_states, *c.grad_output, c.cu_seqlens};
}

bool has_stages(const std::string& dir, const std::string& mode) {
  const std::string path = rank_file(dir, mode, 0);
  for (const auto& [name, t] : read_safetensors(path).tensors)
    if (name.starts_with("stage::")) return true;
  return false;
}

harness::MicroBatchRun assemble_run(const std::string& dir, const std::string& mode, int W, const harness::Case& k) {
  harness::MicroBatchRun run;
  run.cp_size = W;
  run.answer.out = Tensor(DType::F64, k.hidden.shape());
  run.answer.grad_hidden = Tensor(DType::F64, k.hidden.shape());
  const std::int64_t rows_total = k.hidden.dim(0), width = k.hidden.numel() / rows_total;
  std::vector<harness::RankOutput> ranks(static_cast<std::size_t>(W));
  for (int r = 0; r < W; ++r) {
    const std::string path = rank_file(dir, mode, r);
    const TensorFile f = read_safetensors(path);
    const auto rows = harness::zigzag_rows(k, W, r);
    for (const char* name : {"out", "grad_hidden"}) {
      const Tensor& shard = f.at(name, path);
      if (shard.numel() != static_cast<std::int64_t>(rows.size()) * width)
        throw FormatError(path + ": tensor '" + name + "' " + shape_str(shard.shape()) + " is not rank " +
                          std::to_string(r) + "'s zigzag shard of " + std::to_string(W) + " ranks (" +
                          std::to_string(rows.size()) + " rows of " + std::to_string(width) + ")");
      const Tensor s64 = shard.to(DType::F64);
      Tensor& full = std::string(name) == "out" ? run.answer.out : run.answer.grad_hidden;
      layouts::scatter_rows(s64.bytes(), rows, static_cast<std::size_t>(width) * 8, full.bytes());
    }
    if (r == 0)
      for (const auto& [name, t] : f.tensors)
        if (name.rfind("grad::", 0) == 0) run.answer.grads[name.substr(6)] = t.to(DType::F64);
    ranks[static_cast<std::size_t>(r)].cp_size = W;
    ranks[static_cast<std::size_t>(r)].cp_rank = r;
    ranks[static_cast<std::size_t>(r)].stages = read_stages(f, path);
  }
  std::vector<const harness::RankOutput*> group;
  for (const auto& o : ranks) group.push_back(&o);
  harness::assemble_stages(k, group, run);
  return run;
}

TensorFile answer_file(const harness::Answer& a) {
  TensorFile f;
  f.tensors["out"] = a.out;
  f.tensors["grad_hidden"] = a.grad_hidden;
  for (const auto& [name, t] : a.grads) f.tensors["grad::" + name] = t;
  for (const auto& [name, t] : a.stages) f.tensors[name] = t;
  return f;
}

TensorFile assemble(const std::string& dir, const std::string& mode, int W, const harness::Case& k) {
  return answer_file(assemble_run(dir, mode, W, k).answer);
}

harness::DecayClass declared_decay_class(const std::string& dir) {
  const json meta = read_meta(dir);
  if (!meta.contains("decay_class")) return harness::DecayClass::ProductOfDecays;
  try {
    return harness::parse_decay_class(meta["decay_class"].is_string() ? meta["decay_class"].get<std::string>() : "");
  } catch (const ConfigError& e) {
    throw FormatError(meta_path(dir) + ": " + e.what() + " (its decay_class)");
  }
}

bool third_party_image(const std::string& dir) { return read_meta(dir).contains("adapter"); }

namespace {

Library library_of(const json& l) {
  const auto text = [&](const char* key) { return l.value(key, std::string()); };
  Library out{text("name"),
              text("version"),
              text("path"),
              text("source_sha256"),
              text("commit"),
              l["files"].get<std::int64_t>(),
              {}};
  if (l.contains("kernels")) out.kernels.push_back(library_of(l["kernels"]));
  return out;
}

// "fla 0.6.0 at /p/fla (sha256 1a2b3c4d... of 43 files, commit abc1234)": short forms, as git prints a
// commit; meta.json holds the whole of each.
std::string library_text(const Library& l) {
  return l.name + " " + l.version + " at " + l.path + " (sha256 " + l.source_sha256.substr(0, 8) + "... of " +
         std::to_string(l.files) + " file" + (l.files == 1 ? "" : "s") +
         (l.commit.empty() ? "" : ", commit " + l.commit.substr(0, 7)) + ")";
}

}  // namespace

std::optional<Library> image_library(const std::string& dir) {
  const json meta = read_meta(dir);  // checks "library"
  if (!meta.contains("library")) return std::nullopt;
  return library_of(meta["library"]);
}

std::string library_line(const Library& l) {
  std::string line = "library: " + library_text(l);
  for (const Library& k : l.kernels) line += "; kernels: " + library_text(k);
  return printable(line);
}

}  // namespace gdnv::probes
