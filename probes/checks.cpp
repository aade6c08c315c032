#include "probes/checks.hpp"

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <cmath>
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

void require_image(const std::string& dir, const char* role) {
  if (!fs::exists(fs::path(dir) / "inputs.safetensors"))
    throw IoError(std::string(role) + " '" + dir +
                  "' holds no inputs.safetensors: pass a directory written by "
                  "'gdn-verify probe dump'");
}

// Rank files 0..W-1 of a mode, by name.
std::vector<std::string> rank_files(const std::string& mode, int W) {
  std::vector<std::string> files;
  for (int r = 0; r < W; ++r) files.push_back(mode + ".rank" + std::to_string(r) + ".safetensors");
  return files;
}

TensorResult structural(const std::string& file, const std::string& what) {
  TensorResult t;
  t.file = file;
  t.name = "*";
  t.structure = what;
  return t;
}

// What keeps an image from being whole, each a structural mismatch naming its file (`role`: "REF" or
// "CAND" where two images are read).
void add_problems(const ImageIndex& idx, const std::string& role, Comparison& into) {
  for (const ImageProblem& p : idx.problems)
    into.tensors.push_back(structural(p.file, (role.empty() ? "" : role + ": ") + p.what));
}

// Whether an element is outside `rule` elementwise: a NaN/Inf on one side only, or |x - r| > atol +
// rtol |r| (both 0 for a rule without them: any difference).
bool outside(const Rule& rule, double r, double x) {
  if (std::isfinite(r) != std::isfinite(x)) return true;
  if (!std::isfinite(r)) return !(r == x || (std::isnan(r) && std::isnan(x)));
  return std::abs(x - r) > rule.atol.value_or(0.0) + rule.rtol.value_or(0.0) * std::abs(r);
}

// The rows (of `rows`, each a row of the [rows, width] tensors) holding an element outside `rule`, over
// columns `cols` (empty: all).
std::vector<std::int64_t> rows_outside(const Tensor& ref, const Tensor& cand, const Rule& rule,
                                       const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& cols) {
  const std::int64_t width = ref.numel() / std::max<std::int64_t>(1, ref.dim(0));
  std::vector<std::int64_t> out;
  for (const std::int64_t row : rows)
    for (std::int64_t j = 0; j < (cols.empty() ? width : static_cast<std::int64_t>(cols.size())); ++j) {
      const std::int64_t at = row * width + (cols.empty() ? j : cols[static_cast<std::size_t>(j)]);
      if (outside(rule, ref.get(at), cand.get(at))) {
        out.push_back(row);
        break;
      }
    }
  return out;
}

// The criterion a failing result broke, as the divergence line names it: metric, value and gate.
void failed_criterion(const TensorResult& t, harness::Divergence& d) {
  const Rule& r = t.rule;
  const double frac = t.m.numel ? static_cast<double>(t.mismatched) / static_cast<double>(t.m.numel) : 0.0;
  if (t.m.nan_cand + t.m.inf_cand + t.m.nan_ref + t.m.inf_ref > 0 && t.why.find("NaN/Inf") != std::string::npos)
    d.metric = "nan/inf", d.value = static_cast<double>(t.m.nan_cand + t.m.inf_cand), d.gate = 0;
  else if (r.exact.value_or(false) && !t.m.bitwise)
    d.metric = "bitwise mismatches", d.value = static_cast<double>(t.mismatched), d.gate = 0;
  else if ((r.atol || r.rtol) && frac > r.max_mismatch_frac.value_or(0.0))
    d.metric = "mismatched fraction", d.value = frac, d.gate = r.max_mismatch_frac.value_or(0.0);
  else if (r.min_cos && 1.0 - t.m.one_minus_cos < *r.min_cos)
    d.metric = "1-cos", d.value = t.m.one_minus_cos, d.gate = 1.0 - *r.min_cos;
  else d.metric = "rel_rms", d.value = t.m.rel_rms, d.gate = r.max_rel_rms.value_or(0.0);
}

std::vector<std::string> judged_order_of(const std::vector<std::string>& names) {
  std::vector<std::string> grads;
  for (const auto& n : names)
    if (n.starts_with("grad::")) grads.push_back(n);
  return ref::judged_order(grads);
}

// Whether tensor a comes before b in the judged order of `names`.
bool precedes(const std::string& a, const std::string& b, const std::vector<std::string>& names) {
  const std::vector<std::string> order = judged_order_of(names);
  return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
}

// The result of tensor `name` in dump `file` of `c`, or nullptr.
const TensorResult* result_of(const Comparison& c, const std::string& file, const std::string& name) {
  for (const TensorResult& t : c.tensors)
    if (t.file == file && t.name == name) return &t;
  return nullptr;
}

// Whether a tensor of the dumps `files` fails or mismatches in structure: only then a report has rank tables.
bool any_failing(const Comparison& c, const std::vector<std::string>& files) {
  for (const TensorResult& t : c.tensors)
    if (std::find(files.begin(), files.end(), t.file) != files.end() && (!t.structure.empty() || !t.pass)) return true;
  return false;
}

// Image vs image, mode `mode` compared rank file by rank file (`files`): a row per tensor of REF's rank 0
// file in the judged order, each rank's cell its file's verdict.
RankTable rank_file_table(const Comparison& c, const std::string& mode, const std::vector<std::string>& files,
                          const std::vector<std::string>& names) {
  RankTable table{mode + ": error / bound by tensor and rank", static_cast<int>(files.size()), {}, {}, {}};
  for (const std::string& name : judged_order_of(names)) {
    std::vector<std::string> row;
    for (const std::string& file : files) {
      const TensorResult* t = result_of(c, file, name);
      row.push_back(!t ? "-" : !t->structure.empty() ? "STRUCT" : t->pass ? "pass" : ratio_str(t->ratio) + "x");
    }
    if (std::all_of(row.begin(), row.end(), [](const std::string& cell) { return cell == "-"; })) continue;
    table.names.push_back(name);
    table.cells.push_back(std::move(row));
  }
  return table;
}

// A mode reassembled to natural order (`got`) against `ref` under the rules `c` judged dump `file` with.
RankTable piece_table(const Comparison& c, const std::string& file, const TensorFile& ref, const TensorFile& got,
                      const harness::MicroBatchRun& run, const harness::Case& k) {
  std::vector<std::string> names;
  for (const auto& [name, t] : ref.tensors) names.push_back(name);
  std::vector<std::pair<std::string, Rule>> rows;
  for (const std::string& name : judged_order_of(names))
    if (const TensorResult* t = result_of(c, file, name); t && t->structure.empty() && got.has(name))
      rows.emplace_back(name, t->rule);
  return rank_grid(file + ": error / gate over each rank's own elements (above 1 fails)", rows, ref, got, run, k);
}

// The first result of dump `file` in `c` outside its rule, in the judged order (ref::judged_order).
const TensorResult* first_failing(const Comparison& c, const std::string& file, const std::vector<std::string>& names) {
  for (const std::string& name : judged_order_of(names))
    for (const TensorResult& t : c.tensors)
      if (t.file == file && t.name == name && t.structure.empty() && !t.pass) return &t;
  return nullptr;
}

// Where `run` (one mode reassembled) first leaves `ref` (natural order) under the results `c` holds for
// dump `file`: the first failing tensor in the judged order, the lowest CP rank with an element outside
// its rule, and that rank's rows holding one (every rank when no single rank's elements are outside).
std::optional<harness::Divergence> policy_divergence(const Comparison& c, const std::string& file,
                                                     const TensorFile& ref, const harness::MicroBatchRun& run,
                                                     const harness::Case& k) {
  std::vector<std::string> names;
  for (const auto& [name, t] : ref.tensors) names.push_back(name);
  const TensorResult* t = first_failing(c, file, names);
  if (!t) return std::nullopt;
  harness::Divergence d = harness::divergence_at(t->name, -1, run.cp_size);
  d.row_end = ref.tensors.at(t->name).dim(0) - 1;
  failed_criterion(*t, d);
  const TensorFile got = answer_file(run.answer);
  std::map<int, std::vector<std::int64_t>> hot;
  for (const harness::StagePiece& p : harness::pieces_of(t->name, run, k))
    for (const std::int64_t row :
         rows_outside(ref.tensors.at(t->name), got.tensors.at(t->name), t->rule, p.rows, p.cols))
      hot[p.cp_rank].push_back(row);
  if (!hot.empty()) {
    const auto& [rank, rows] = *hot.begin();
    d.rank = rank;
    d.row_begin = *std::min_element(rows.begin(), rows.end());
    d.row_end = *std::max_element(rows.begin(), rows.end());
    std::vector<std::int64_t> held;
    for (const harness::StagePiece& p : harness::pieces_of(t->name, run, k))
      if (p.cp_rank == rank) held.insert(held.end(), p.rows.begin(), p.rows.end());
    harness::name_layouts(d, k, held, rows);
  }
  return d;
}

// The natural rows of rank r's file's tensor `name`, by local row: out and grad_hidden the zigzag shard's,
// a stage its rows:: tensor, a parameter gradient its own rows.
std::vector<std::int64_t> natural_rows_of(const TensorFile& f, const std::string& name, const harness::Case& k, int W,
                                          int r) {
  if (name == "out" || name == "grad_hidden") return harness::zigzag_rows(k, W, r);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(f.tensors.at(name).dim(0)));
  const std::string rows_name = "rows::" + name;
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = f.has(rows_name) ? static_cast<std::int64_t>(f.tensors.at(rows_name).get(static_cast<std::int64_t>(i)))
                              : static_cast<std::int64_t>(i);
  return ids;
}

// Where CAND's dump of a mode (rank files `files`, compared file by file in `c`) first leaves REF's: the
// first failing tensor in the judged order, the lowest rank whose file fails on it (every rank for a
// CP-summed parameter gradient), and that file's rows holding an element outside the rule.
std::optional<harness::Divergence> image_divergence(const Comparison& c, const std::string& ref,
                                                    const std::string& cand, const std::vector<std::string>& files,
                                                    const harness::Case& k) {
  std::vector<std::string> names;
  for (const auto& [name, t] : read_safetensors((fs::path(ref) / files.front()).string()).tensors)
    names.push_back(name);
  const TensorResult* t = nullptr;
  int rank = 0;
  // The earliest tensor in the judged order failing in any rank's file, and the lowest rank failing on it.
  for (std::size_t r = 0; r < files.size(); ++r)
    if (const TensorResult* u = first_failing(c, files[r], names); u && (!t || precedes(u->name, t->name, names))) {
      t = u;
      rank = static_cast<int>(r);
    }
  if (!t) return std::nullopt;
  const auto W = static_cast<int>(files.size());
  const std::string path = (fs::path(ref) / files[static_cast<std::size_t>(rank)]).string();
  const TensorFile a = read_safetensors(path);
  const TensorFile b = read_safetensors((fs::path(cand) / files[static_cast<std::size_t>(rank)]).string());
  const Tensor& x = a.at(t->name, path);
  std::vector<std::int64_t> local(static_cast<std::size_t>(x.dim(0)));
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = static_cast<std::int64_t>(i);
  std::vector<std::int64_t> hot = rows_outside(x, b.at(t->name, path), t->rule, local, {});
  if (hot.empty()) hot = local;
  const std::vector<std::int64_t> ids = natural_rows_of(a, t->name, k, W, rank);
  harness::Divergence d = harness::divergence_at(t->name, t->name.starts_with("grad::") ? -1 : rank, W);
  d.row_begin = d.row_end = ids[static_cast<std::size_t>(hot.front())];
  std::vector<std::int64_t> named;
  for (const std::int64_t i : hot) {
    named.push_back(ids[static_cast<std::size_t>(i)]);
    d.row_begin = std::min(d.row_begin, named.back());
    d.row_end = std::max(d.row_end, named.back());
  }
  harness::name_layouts(d, k, ids, named);
  failed_criterion(*t, d);
  return d;
}

// A mode's reassembled tensors as cp1 can be compared with them: stages only where cp1 dumped them too,
// never the chunkwise boundary state (cp1 has no boundaries; the oracle judges it).
TensorFile comparable_with_cp1(const harness::Answer& a, const TensorFile& cp1) {
  TensorFile f = answer_file(a);
  for (auto it = f.tensors.begin(); it != f.tensors.end();)
    it = it->first.starts_with("stage") && !cp1.has(it->first) ? f.tensors.erase(it) : std::next(it);
  return f;
}

// Every rank's copy of the CP-summed parameter gradients against rank 0's, bitwise (docs/DESIGN.md §8,
// replicated tensors), as "<mode>.rank<r> vs rank0"; the first copy that differs is the divergence
// when none was found before, naming its rank.
void judge_replicas(const std::string& dir, const std::string& mode, int W, Comparison& into) {
  if (W < 2) return;
  const auto grads_of = [&](int r) {
    TensorFile f = read_safetensors(rank_file(dir, mode, r));
    std::erase_if(f.tensors, [](const auto& t) { return !t.first.starts_with("grad::"); });
    return f;
  };
  Rule exact;
  exact.exact = true;
  exact.atol = exact.rtol = 0.0;
  const Policy bitwise{"replica", exact, {}};
  const TensorFile rank0 = grads_of(0);
  std::vector<std::string> names;
  for (const auto& [name, t] : rank0.tensors) names.push_back(name);
  for (int r = 1; r < W; ++r) {
    const std::string file = mode + ".rank" + std::to_string(r) + " vs rank0";
    const TensorFile copy = grads_of(r);
    compare_files(rank0, copy, bitwise, file, into);
    const TensorResult* t = first_failing(into, file, names);
    if (into.divergence || !t) continue;
    const Tensor& a = rank0.tensors.at(t->name);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(a.dim(0)));
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int64_t>(i);
    const std::vector<std::int64_t> hot = rows_outside(a, copy.tensors.at(t->name), exact, rows, {});
    harness::Divergence d = harness::divergence_at(t->name, r, W);
    d.row_begin = hot.empty() ? 0 : hot.front();
    d.row_end = hot.empty() ? a.dim(0) - 1 : hot.back();
    failed_criterion(*t, d);
    into.divergence = std::move(d);
    into.divergence_in = mode;
  }
}

// The layer config and case of two images' inputs (their metadata, the image label aside): a change is
// a different case even where the tensors are bitwise equal.
void compare_case_metadata(const TensorFile& ref, const TensorFile& cand, Comparison& into) {
  std::map<std::string, std::pair<std::string, std::string>> keys;
  for (const auto& [k, v] : ref.metadata) keys[k].first = "'" + v + "'";
  for (const auto& [k, v] : cand.metadata) keys[k].second = "'" + v + "'";
  for (const auto& [key, values] : keys)
    if (key != "image" && values.first != values.second)
      into.tensors.push_back(structural(
          "inputs.safetensors", "metadata '" + key + "' is " + (values.first.empty() ? "unset" : values.first) +
                                    " in REF, " + (values.second.empty() ? "unset" : values.second) +
                                    " in CAND: the images are of different cases; dump both with the same --case"));
}

}  // namespace

RankTable rank_grid(const std::string& title, const std::vector<std::pair<std::string, Rule>>& rows,
                    const TensorFile& ref, const TensorFile& got, const harness::MicroBatchRun& run,
                    const harness::Case& k) {
  RankTable table{title, run.cp_size, {}, {}, {}};
  for (const auto& [name, rule] : rows) {
    const Tensor &a = ref.tensors.at(name), &b = got.tensors.at(name);
    const std::int64_t width = a.numel() / std::max<std::int64_t>(1, a.dim(0));
    const double ref_max_abs = compare(a, b).ref_max_abs;
    std::vector<std::string> cells(static_cast<std::size_t>(run.cp_size), "-");
    std::map<int, std::vector<std::int64_t>> elements;  // each rank's, flat
    for (const harness::StagePiece& p : harness::pieces_of(name, run, k))
      for (const std::int64_t r : p.rows)
        for (std::int64_t j = 0; j < (p.cols.empty() ? width : static_cast<std::int64_t>(p.cols.size())); ++j)
          elements[p.cp_rank].push_back(r * width + (p.cols.empty() ? j : p.cols[static_cast<std::size_t>(j)]));
    for (const auto& [rank, at] : elements)
      cells[static_cast<std::size_t>(rank)] = ratio_str(error_ratio(a, b, rule, ref_max_abs, at));
    table.names.push_back(name);
    table.cells.push_back(std::move(cells));
    table.whole.push_back(ratio_str(error_ratio(a, b, rule, ref_max_abs)));
  }
  return table;
}

Comparison compare_images(const std::string& ref, const std::string& cand, const std::string& mode,
                          const Policy& policy) {
  require_image(ref, "REF");
  require_image(cand, "CAND");
  Comparison out;
  out.name = dir_name(cand) + (mode.empty() ? "" : " " + mode);
  out.policy = policy.name;
  const ImageIndex a = index_image(ref), b = index_image(cand);
  add_problems(a, "REF", out);
  add_problems(b, "CAND", out);
  const TensorFile ref_inputs = read_safetensors((fs::path(ref) / "inputs.safetensors").string());
  const TensorFile cand_inputs = read_safetensors((fs::path(cand) / "inputs.safetensors").string());
  Comparison inputs;
  compare_files(ref_inputs, cand_inputs, load_policy("bitwise"), "inputs.safetensors", inputs);
  if (inputs.exit_code() != 0)
    out.tensors.push_back(structural("inputs.safetensors",
                                     "the images' inputs differ: dump both with the same "
                                     "--case, --dtype and --seed"));
  compare_case_metadata(ref_inputs, cand_inputs, out);
  const std::vector<std::string> modes = mode.empty() ? a.modes : std::vector<std::string>{mode};
  if (modes.empty() && a.problems.empty())
    throw ConfigError("REF '" + ref + "' holds no mode dumps: run 'gdn-verify probe dump' first");
  for (const auto& m : modes) {
    if (!a.world.count(m)) {
      if (a.problems.empty()) throw ConfigError("REF '" + ref + "' has no " + m + " dump: choose a --mode it holds");
      continue;  // not whole: its problems are reported
    }
    if (!b.world.count(m) && !b.problems.empty()) continue;
    if (b.world.count(m) && b.world.at(m) != a.world.at(m)) {  // rank r holds other rows at another size
      out.tensors.push_back(structural(m, "W = " + std::to_string(a.world.at(m)) +
                                              " vs W = " + std::to_string(b.world.at(m)) +
                                              ": use cross-mode or dump at the same --world"));
      continue;
    }
    const auto ref_files = rank_files(m, a.world.at(m)),
               cand_files = rank_files(m, b.world.count(m) ? b.world.at(m) : 0);
    for (std::size_t r = 0; r < std::max(ref_files.size(), cand_files.size()); ++r) {
      if (r >= cand_files.size()) out.tensors.push_back(structural(ref_files[r], "file missing in CAND"));
      else if (r >= ref_files.size()) out.tensors.push_back(structural(cand_files[r], "file only in CAND"));
      else
        compare_files(read_safetensors((fs::path(ref) / ref_files[r]).string()),
                      read_safetensors((fs::path(cand) / cand_files[r]).string()), policy, ref_files[r], out);
    }
    if (!out.divergence && inputs.exit_code() == 0 && ref_files.size() == cand_files.size())
      if (auto d = image_divergence(out, ref, cand, ref_files, read_inputs(ref))) {
        out.divergence = std::move(d);
        out.divergence_in = m;
      }
    if (ref_files.size() == cand_files.size() && any_failing(out, ref_files)) {
      std::vector<std::string> names;
      for (const auto& [name, t] : read_safetensors((fs::path(ref) / ref_files.front()).string()).tensors)
        names.push_back(name);
      out.rank_tables.push_back(rank_file_table(out, m, ref_files, names));
    }
  }
  return out;
}

namespace {

// The stages the oracle answers with for DIR's dumps: every stage when any mode dumped them, and the
// chunkwise boundary state at the chunkwise dump's world size.
harness::StageRequest stage_request_of(const std::string& dir, const ImageIndex& idx) {
  harness::StageRequest request;
  for (const auto& mode : idx.modes) {
    if (!has_stages(dir, mode)) continue;
    request.on = true;
    if (mode == "chunkwise") request.chunkwise_cp = idx.world.at(mode);
  }
  return request;
}

// The oracle's tensors one mode's dump is judged on: out, grad_hidden and the gradients; its stages when
// the dump holds them, the boundary state only for a chunkwise dump on more than one rank.
TensorFile oracle_file_for(const harness::Answer& oracle, const std::string& mode, bool stages, int world) {
  TensorFile f = answer_file(oracle);
  for (auto it = f.tensors.begin(); it != f.tensors.end();) {
    const bool stage = it->first.starts_with("stage");
    const bool boundary = it->first.ends_with("boundary_state");
    const bool keep = !stage || (stages && (!boundary || (mode == "chunkwise" && world > 1)));
    it = keep ? std::next(it) : f.tensors.erase(it);
  }
  return f;
}

// The contract's kernel gate of a storage dtype (docs/DESIGN.md §4): how close to the oracle the
// elementwise CP-vs-cp1 rule presumes cp1 to be.
double kernel_gate(DType dtype) { return dtype == DType::BF16 ? 2e-3 : dtype == DType::F32 ? 1e-5 : 1e-10; }

}  // namespace

int CrossMode::exit_code() const {
  const int code = vs_cp1.exit_code();
  if (code != 0) return code;
  for (const auto& r : ratios)
    if (!r.pass()) return 1;
  return 0;
}

CrossMode cross_mode(const std::string& dir, const Policy& policy) {
  require_image(dir, "DIR");
  const ImageIndex idx = index_image(dir);
  CrossMode out;
  out.vs_cp1.name = "cross-mode " + dir_name(dir);
  out.vs_cp1.policy = policy.name;
  add_problems(idx, "", out.vs_cp1);
  const std::vector<std::string>& modes = idx.modes;
  out.skipped = "the image is not whole";
  if (!idx.problems.empty() && (modes.empty() || modes.front() != "cp1" || modes.size() < 2)) return out;
  if (modes.empty() || modes.front() != "cp1")
    throw ConfigError(dir + " holds no cp1 dump: run 'gdn-verify probe dump --mode cp1' into it first");
  if (modes.size() < 2) throw ConfigError(dir + " holds only the cp1 dump: dump at least one CP mode into it");
  const harness::Case k = read_inputs(dir);
  TensorFile cp1 = assemble(dir, "cp1", idx.world.at("cp1"), k);
  const harness::Answer oracle_answer = harness::oracle_answer(k, stage_request_of(dir, idx));
  const TensorFile oracle = answer_file(oracle_answer);
  const auto rel_to_oracle = [&](const TensorFile& f, const std::string& name) {
    return compare(oracle.tensors.at(name), f.tensors.at(name)).rel_rms;
  };
  // The elementwise rule compares two runs that each sit within the kernel gate of the exact answer
  // (docs/DESIGN.md §4). Where a third-party implementation's own cp1 is farther than that from the
  // oracle on a tensor (its algorithm class's bound, e.g. cumsum-decay's grad::A_log), two correct runs
  // differ by up to ~sqrt(2) x that, and the rule cannot tell a bug from the class: the tensor is
  // judged by its deviation from the oracle alone, within cp1's band or its class's oracle gate (a CP
  // run re-cuts the chunks at rank boundaries, which moves a cumsum-decay error's statistics). A policy
  // the user names instead of the contract's rule is applied to every tensor.
  const bool third_party = third_party_image(dir), contract_rule = policy.name == "cp-vs-cp1";
  std::map<std::string, double> band_only;  // name -> its class's oracle gate
  for (const auto& [name, t] : cp1.tensors) {
    if (!third_party || !contract_rule || !oracle.has(name)) continue;
    const double deviation = rel_to_oracle(cp1, name);
    if (deviation > kernel_gate(idx.dtype)) out.band_only.push_back({name, deviation, kernel_gate(idx.dtype), 0});
  }
  if (!out.band_only.empty()) {
    const auto gates = harness::oracle_gates(k, oracle_answer, idx.dtype, declared_decay_class(dir));
    for (BandOnly& b : out.band_only) band_only[b.tensor] = b.class_gate = gates.at(b.tensor);
  }
  const auto without_band_only = [&](TensorFile f) {
    for (const auto& [name, gate] : band_only) f.tensors.erase(name);
    return f;
  };
  std::map<std::string, TensorFile> by_mode;
  for (std::size_t i = 1; i < modes.size(); ++i) {
    const int W = idx.world.at(modes[i]);
    const harness::MicroBatchRun run = assemble_run(dir, modes[i], W, k);
    by_mode[modes[i]] = comparable_with_cp1(run.answer, cp1);
    TensorFile reference = without_band_only(cp1);  // cp1's stages only where this mode dumped them too
    for (auto it = reference.tensors.begin(); it != reference.tensors.end();)
      it = it->first.starts_with("stage") && !by_mode[modes[i]].has(it->first) ? reference.tensors.erase(it)
                                                                               : std::next(it);
    const std::string file = modes[i] + " vs cp1";
    const TensorFile candidate = without_band_only(by_mode[modes[i]]);
    compare_files(reference, candidate, policy, file, out.vs_cp1);
    if (!out.vs_cp1.divergence)
      if (auto d = policy_divergence(out.vs_cp1, file, reference, run, k)) {
        out.vs_cp1.divergence = std::move(d);
        out.vs_cp1.divergence_in = modes[i];
      }
    if (any_failing(out.vs_cp1, {file}))
      out.vs_cp1.rank_tables.push_back(piece_table(out.vs_cp1, file, reference, candidate, run, k));
    judge_replicas(dir, modes[i], W, out.vs_cp1);
  }
  // The deviation from the oracle of out, grad_hidden, the gradients and the band-only stages: against
  // headwise's where this project's image dumped it (the contract's 4x), else against the same
  // implementation's cp1, by cp1_deviation_factor (docs/DESIGN.md §4).
  const bool vs_headwise = !third_party && by_mode.count("headwise") > 0;
  out.skipped = "headwise is the only CP mode dumped: no other mode to measure";
  const TensorFile& base = vs_headwise ? by_mode["headwise"] : cp1;
  for (const auto& [mode, f] : by_mode) {
    if (vs_headwise && mode == "headwise") continue;
    const double W = idx.world.at(mode);
    for (const auto& [name, t] : oracle.tensors) {
      if (!f.has(name) || !base.has(name) || (name.starts_with("stage") && !band_only.count(name))) continue;
      const double b = rel_to_oracle(base, name);
      const double factor =
          vs_headwise ? 4.0 : cp1_deviation_factor(effective_roundings(t, base.tensors.at(name)), static_cast<int>(W));
      const double class_gate = band_only.count(name) ? band_only.at(name) : 0.0;
      out.ratios.push_back({mode, name, vs_headwise ? "headwise" : "cp1", rel_to_oracle(f, name), b,
                            std::max(factor * std::max(b, 1e-6), class_gate)});
    }
  }
  // Each mode's ratios in the order a divergence propagates, so the first failing one is where it starts.
  std::vector<std::string> names;
  for (const auto& [name, t] : oracle.tensors) names.push_back(name);
  std::stable_sort(out.ratios.begin(), out.ratios.end(), [&](const DeviationRatio& a, const DeviationRatio& b) {
    return a.mode != b.mode ? a.mode < b.mode : precedes(a.tensor, b.tensor, names);
  });
  return out;
}

double effective_roundings(const Tensor& oracle, const Tensor& run) {
  double s2 = 0, s4 = 0;
  for (std::int64_t i = 0; i < oracle.numel(); ++i) {
    const double e2 = (run.get(i) - oracle.get(i)) * (run.get(i) - oracle.get(i));
    s2 += e2;
    s4 += e2 * e2;
  }
  // No error, or a non-finite one (judged as such elsewhere), leaves every element's rounding.
  const double n = std::max(1.0, static_cast<double>(oracle.numel()));
  return s4 > 0 && std::isfinite(s4) ? std::clamp(3 * s2 * s2 / s4 - 2, 1.0, n) : n;
}

// A CP run repeats cp1's ~14 rounding sources (re-cut at rank boundaries, same statistics) and adds at most
// one per boundary it folds a state across (W - 1): its error variance is (13 + W) / 14 cp1's. Each run's
// squared RMS error is a sum of nu independent squared roundings, so the ratio of the two is F(nu, nu)
// distributed; its upper 1e-6 quantile keeps a gate run of ~10^3 ratios at one false alarm in 10^3 runs.
double cp1_deviation_factor(double nu, int W) {
  const boost::math::fisher_f_distribution<double> ratio(nu, nu);
  return std::sqrt((13.0 + W) / 14.0 * boost::math::quantile(boost::math::complement(ratio, 1e-6)));
}

Comparison judge_with_oracle(const std::string& dir, std::vector<ClassVerdict>* classes) {
  require_image(dir, "DIR");
  const ImageIndex idx = index_image(dir);
  const harness::DecayClass declared = declared_decay_class(dir);
  Comparison out;
  out.name = "oracle " + dir_name(dir);
  out.policy =
      "per-tensor oracle gates of the " + std::string(harness::decay_class_name(declared)) +
      " class (fp64 1e-10; fp32, bf16 4 delta kappa, floors 1e-5, 2e-2" +
      (declared == harness::DecayClass::CumsumDecay ? "; the cumsum's delta_32 kappa^gamma in quadrature)" : ")");
  add_problems(idx, "", out);
  if (idx.modes.empty()) {
    if (idx.problems.empty()) throw ConfigError(dir + " holds no mode dumps (<mode>.rank0.safetensors)");
    return out;
  }
  const harness::Case k = read_inputs(dir);
  const harness::Answer oracle = harness::oracle_answer(k, stage_request_of(dir, idx));
  // The gates' dtype is the image's (meta.json, which every file and tensor was checked to carry).
  const harness::DecayClass all[] = {harness::DecayClass::ProductOfDecays, harness::DecayClass::CumsumDecay};
  if (classes) classes->assign({{all[0], 0}, {all[1], 0}});
  std::map<harness::DecayClass, std::map<std::string, double>> gates;
  for (const harness::DecayClass decays : all)
    if (decays == declared || classes) gates[decays] = harness::oracle_gates(k, oracle, idx.dtype, decays);
  const std::map<std::string, double>& judged = gates.at(declared);
  Policy p{"oracle", {}, {}};
  for (const auto& [name, gate] : judged) {
    Rule r;
    r.max_rel_rms = gate;
    p.tensors.emplace_back(name, r);
  }
  for (const auto& mode : idx.modes) {
    const int W = idx.world.at(mode);
    const harness::MicroBatchRun run = assemble_run(dir, mode, W, k);
    if (classes)
      for (const harness::DecayClass decays : all)
        for (const harness::TensorVerdict& v : harness::judge_answer(oracle, run.answer, gates.at(decays)))
          (*classes)[decays == all[0] ? 0 : 1].outside += !v.pass;
    const TensorFile judged_file = oracle_file_for(oracle, mode, has_stages(dir, mode), run.cp_size);
    const TensorFile got = answer_file(run.answer);
    compare_files(judged_file, got, p, mode, out);
    if (any_failing(out, {mode})) out.rank_tables.push_back(piece_table(out, mode, judged_file, got, run, k));
    if (!out.divergence)
      if (auto d = harness::first_divergence(harness::judge_answer(oracle, run.answer, judged), oracle, run, k)) {
        out.divergence = std::move(d);
        out.divergence_in = mode;
      }
    judge_replicas(dir, mode, W, out);
  }
  return out;
}

}  // namespace gdnv::probes
