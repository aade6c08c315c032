#include "probes/checks.hpp"

#include <filesystem>
#include <map>

#include "core/error.hpp"
#include "probes/image.hpp"

namespace gdnv::probes {
namespace fs = std::filesystem;
namespace {

std::string dir_name(const std::string& dir) {
  const fs::path p = fs::path(dir).lexically_normal();
  return (p.filename().empty() ? p.parent_path().filename() : p.filename()).string();
}

TensorFile answer_file(const cp::Answer& a) {
  TensorFile f;
  f.tensors["out"] = a.out;
  f.tensors["grad_hidden"] = a.grad_hidden;
  for (const auto& [name, t] : a.grads) f.tensors["grad::" + name] = t;
  return f;
}

void require_image(const std::string& dir, const char* role) {
  if (!fs::exists(fs::path(dir) / "inputs.safetensors"))
    throw IoError(std::string(role) + " '" + dir +
                  "' holds no inputs.safetensors: pass a directory written by "
                  "'gdn-verify probe dump'");
}

std::vector<std::string> rank_files(const std::string& dir, const std::string& mode) {
  std::vector<std::string> files;
  for (int r = 0; fs::exists(fs::path(dir) / (mode + ".rank" + std::to_string(r) + ".safetensors")); ++r)
    files.push_back(mode + ".rank" + std::to_string(r) + ".safetensors");
  return files;
}

TensorResult structural(const std::string& file, const std::string& what) {
  TensorResult t;
  t.file = file;
  t.name = "*";
  t.structure = what;
  return t;
}

}  // namespace

Comparison compare_images(const std::string& ref, const std::string& cand, const std::string& mode,
                          const Policy& policy) {
  require_image(ref, "REF");
  require_image(cand, "CAND");
  Comparison out;
  out.name = dir_name(cand) + (mode.empty() ? "" : " " + mode);
  out.policy = policy.name;
  Comparison inputs;
  compare_files(read_safetensors((fs::path(ref) / "inputs.safetensors").string()),
                read_safetensors((fs::path(cand) / "inputs.safetensors").string()), load_policy("bitwise"),
                "inputs.safetensors", inputs);
  if (inputs.exit_code() != 0)
    out.tensors.push_back(structural("inputs.safetensors",
                                     "the images' inputs differ: dump both with the same "
                                     "--case, --dtype and --seed"));
  const std::vector<std::string> modes = mode.empty() ? modes_in(ref) : std::vector<std::string>{mode};
  if (modes.empty()) throw ConfigError("REF '" + ref + "' holds no mode dumps: run 'gdn-verify probe dump' first");
  for (const auto& m : modes) {
    const auto ref_files = rank_files(ref, m), cand_files = rank_files(cand, m);
    if (ref_files.empty()) throw ConfigError("REF '" + ref + "' has no " + m + " dump: choose a --mode it holds");
    for (std::size_t r = 0; r < std::max(ref_files.size(), cand_files.size()); ++r) {
      if (r >= cand_files.size()) out.tensors.push_back(structural(ref_files[r], "file missing in CAND"));
      else if (r >= ref_files.size()) out.tensors.push_back(structural(cand_files[r], "file only in CAND"));
      else
        compare_files(read_safetensors((fs::path(ref) / ref_files[r]).string()),
                      read_safetensors((fs::path(cand) / cand_files[r]).string()), policy, ref_files[r], out);
    }
  }
  return out;
}

int CrossMode::exit_code() const {
  const int code = vs_cp1.exit_code();
  if (code != 0) return code;
  for (const auto& r : ratios)
    if (!r.pass()) return 1;
  return 0;
}

CrossMode cross_mode(const std::string& dir, const Policy& policy) {
  require_image(dir, "DIR");
  const cp::Case k = read_inputs(dir);
  const std::vector<std::string> modes = modes_in(dir);
  if (modes.empty() || modes.front() != "cp1")
    throw ConfigError(dir + " holds no cp1 dump: run 'gdn-verify probe dump --mode cp1' into it first");
  if (modes.size() < 2) throw ConfigError(dir + " holds only the cp1 dump: dump at least one CP mode into it");
  CrossMode out;
  out.vs_cp1.name = "cross-mode " + dir_name(dir);
  out.vs_cp1.policy = policy.name;
  const TensorFile cp1 = assemble(dir, "cp1", k);
  std::map<std::string, TensorFile> by_mode;
  for (std::size_t i = 1; i < modes.size(); ++i) {
    by_mode[modes[i]] = assemble(dir, modes[i], k);
    compare_files(cp1, by_mode[modes[i]], policy, modes[i] + " vs cp1", out.vs_cp1);
  }
  if (!by_mode.count("headwise")) return out;
  const TensorFile oracle = answer_file(cp::oracle_answer(k));
  const auto rel_to_oracle = [&](const TensorFile& f, const std::string& name) {
    return compare(oracle.tensors.at(name), f.tensors.at(name)).rel_rms;
  };
  for (const auto& [mode, f] : by_mode) {
    if (mode == "headwise") continue;
    for (const auto& [name, t] : oracle.tensors) {
      if (!f.has(name) || !by_mode["headwise"].has(name)) continue;
      const double head = rel_to_oracle(by_mode["headwise"], name);
      out.ratios.push_back({mode, name, rel_to_oracle(f, name), head, 4.0 * std::max(head, 1e-6)});
    }
  }
  return out;
}

Comparison judge_with_oracle(const std::string& dir) {
  require_image(dir, "DIR");
  const cp::Case k = read_inputs(dir);
  const cp::Answer oracle = cp::oracle_answer(k);
  const TensorFile oracle_file = answer_file(oracle);
  Comparison out;
  out.name = "oracle " + dir_name(dir);
  out.policy = "per-tensor oracle gates (fp64 1e-10; fp32, bf16 4 delta kappa, floors 1e-5, 2e-2)";
  const std::vector<std::string> modes = modes_in(dir);
  if (modes.empty()) throw ConfigError(dir + " holds no mode dumps (<mode>.rank0.safetensors)");
  std::map<DType, Policy> by_dtype;
  for (const auto& mode : modes) {
    const DType dtype = dumped_dtype(dir, mode);
    if (!by_dtype.count(dtype)) {
      Policy p{"oracle", {}, {}};
      for (const auto& [name, gate] : cp::oracle_gates(k, oracle, dtype)) {
        Rule r;
        r.max_rel_rms = gate;
        p.tensors.emplace_back(name, r);
      }
      by_dtype[dtype] = p;
    }
    compare_files(oracle_file, assemble(dir, mode, k), by_dtype[dtype], mode, out);
  }
  return out;
}

}  // namespace gdnv::probes
