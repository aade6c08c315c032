// gdn-verify layout: the global positions a CP rank holds under a layout, and optionally its
// zigzag <-> contiguous route, as one line of JSON; or a picture of which rank holds which token
// (text, SVG).
#include <algorithm>
#include <functional>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"

namespace gdnv::cli {
namespace {

using layouts::Layout;

nlohmann::ordered_json route_json(const layouts::Route& route) {
  return {{"direction", "zigzag->contiguous"},
          {"send_counts", route.send_counts},
          {"recv_counts", route.recv_counts},
          {"index", route.index}};
}

// The sequences as [begin, end) of the packed stream (SBHD: the one sequence of S tokens).
std::vector<std::pair<std::int64_t, std::int64_t>> sequences(const std::vector<std::int64_t>& cu,
                                                             std::int64_t seq_len) {
  if (cu.empty()) return {{0, seq_len}};
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) out.push_back({cu[i], cu[i + 1]});
  return out;
}

// owner[t]: the CP rank that holds global token t.
std::vector<int> owners(const std::function<layouts::Partition(int)>& partition_of, int cp, std::int64_t tokens) {
  std::vector<int> owner(static_cast<std::size_t>(tokens), -1);
  for (int r = 0; r < cp; ++r)
    for (const std::int64_t t : partition_of(r).positions()) owner[static_cast<std::size_t>(t)] = r;
  return owner;
}

constexpr std::int64_t kStripWidth = 64;  // characters per sequence in the text picture

// A sequence's strip: the holding rank of each token (one character per token), or, for a sequence longer
// than kStripWidth, of the first token of each of kStripWidth equal cells.
std::string strip(const std::vector<int>& owner, std::int64_t begin, std::int64_t end) {
  const std::int64_t len = end - begin, cells = std::min(len, kStripWidth);
  std::string s;
  for (std::int64_t c = 0; c < cells; ++c) {
    const int r = owner[static_cast<std::size_t>(begin + c * len / cells)];
    s += r < 10 ? static_cast<char>('0' + r) : static_cast<char>('a' + r - 10);
  }
  return s;
}

std::string picture(const std::string& layout, int cp, const std::vector<int>& owner,
                    const std::vector<std::pair<std::int64_t, std::int64_t>>& seqs) {
  std::ostringstream o;
  o << layout << " layout, cp=" << cp
    << ": the CP rank that holds each token (0-9, then a-z), one strip per sequence\n";
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto [b, e] = seqs[i];
    std::ostringstream head;
    head << "seq " << i << " [" << b << ", " << e << ")";
    o << std::left << std::setw(22) << head.str() << strip(owner, b, e);
    if (e - b > kStripWidth) o << "  (" << (e - b) << " tokens in " << kStripWidth << " cells)";
    o << "\n";
  }
  std::vector<std::int64_t> held(static_cast<std::size_t>(cp), 0);
  for (const int r : owner) ++held[static_cast<std::size_t>(r)];
  o << "tokens per rank:";
  for (int r = 0; r < cp; ++r) o << " " << r << ":" << held[static_cast<std::size_t>(r)];
  o << "\n";
  return o.str();
}

// One row of cells per sequence, each token coloured by the rank that holds it, a legend of the ranks.
std::string svg(const std::string& layout, int cp, const std::vector<int>& owner,
                const std::vector<std::pair<std::int64_t, std::int64_t>>& seqs) {
  static const char* kColours[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                   "#59a14f", "#edc948", "#b07aa1", "#ff9da7"};
  std::int64_t longest = 1;
  for (const auto& [b, e] : seqs) longest = std::max(longest, e - b);
  const double width = 640, cell = width / static_cast<double>(longest), row = 18, left = 120;
  const double height = 40 + row * static_cast<double>(seqs.size()) + 30;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 20 << "\" height=\"" << height
    << "\" font-family=\"monospace\" font-size=\"12\">\n"
    << "<text x=\"10\" y=\"20\">" << layout << " layout, cp=" << cp << ": the CP rank that holds each token</text>\n";
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto [b, e] = seqs[i];
    const double y = 30 + row * static_cast<double>(i);
    o << "<text x=\"10\" y=\"" << y + 13 << "\">seq " << i << " [" << b << ", " << e << ")</text>\n";
    for (std::int64_t t = b; t < e;) {  // one rect per run of tokens on one rank
      const int r = owner[static_cast<std::size_t>(t)];
      std::int64_t u = t;
      while (u < e && owner[static_cast<std::size_t>(u)] == r) ++u;
      o << "<rect x=\"" << left + cell * static_cast<double>(t - b) << "\" y=\"" << y << "\" width=\""
        << cell * static_cast<double>(u - t) << "\" height=\"" << row - 2 << "\" fill=\"" << kColours[r % 8]
        << "\"><title>tokens " << t << ".." << u - 1 << ": rank " << r << "</title></rect>\n";
      t = u;
    }
  }
  const double y = 40 + row * static_cast<double>(seqs.size());
  for (int r = 0; r < cp; ++r)
    o << "<rect x=\"" << left + 70 * r << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\"" << kColours[r % 8]
      << "\"/><text x=\"" << left + 70 * r + 16 << "\" y=\"" << y + 11 << "\">rank " << r << "</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace

int layout_main(const std::vector<std::string>& args, std::ostream& out) {
  po::options_description options("layout options");
  auto add = options.add_options();
  add("layout", po::value<std::string>()->required(), "zigzag or contiguous");
  add("cp", po::value<int>()->required(), "CP size W");
  add("rank", po::value<int>()->required(), "CP rank r in [0, W)");
  add("cu-seqlens", po::value<std::string>(), "THD: packed sequence boundaries, e.g. 0,16,40");
  add("seq-len", po::value<std::int64_t>(), "SBHD: sequence length S");
  add("route", po::bool_switch(),
      "also print the zigzag->contiguous route: rows sent to / received from each peer, and the contiguous "
      "local row of each received row (the send gather of contiguous->zigzag)");
  add("picture", po::bool_switch(),
      "print a text picture instead of JSON: per sequence, the CP rank that holds each token (every rank, not only "
      "--rank), the tokens per rank, and with --route the rank's route counts");
  add("svg", po::value<std::string>(), "also write that picture as SVG to FILE");
  const auto vm = parse_options(
      "layout",
      "--layout zigzag|contiguous --cp W --rank r (--cu-seqlens 0,16,40 | --seq-len S) [--route] [--picture] "
      "[--svg FILE]",
      options, {}, args, out);
  if (!vm) return kPass;
  const bool thd = vm->count("cu-seqlens"), sbhd = vm->count("seq-len");
  if (thd == sbhd) throw ConfigError("gdn-verify layout: give exactly one of --cu-seqlens (THD) and --seq-len (SBHD)");
  const Layout layout = layouts::parse_layout((*vm)["layout"].as<std::string>());
  const int cp = (*vm)["cp"].as<int>(), rank = (*vm)["rank"].as<int>();
  const std::vector<std::int64_t> cu =
      thd ? parse_int_list((*vm)["cu-seqlens"].as<std::string>(), "--cu-seqlens", "0,16,40")
          : std::vector<std::int64_t>{};
  const std::int64_t seq_len = sbhd ? (*vm)["seq-len"].as<std::int64_t>() : 0;

  const auto partition_of = [&](int r) {
    return thd ? layouts::thd_partition(layout, cu, cp, r) : layouts::sbhd_partition(layout, seq_len, cp, r);
  };
  const auto route = [&] {
    return thd ? layouts::zigzag_contiguous_route(cu, cp, rank)
               : layouts::sbhd_zigzag_contiguous_route(seq_len, cp, rank);
  };
  nlohmann::ordered_json result = {
      {"format", thd ? "thd" : "sbhd"}, {"layout", layouts::layout_name(layout)}, {"cp_size", cp}, {"cp_rank", rank}};
  result["indices"] = partition_of(rank).positions();  // validates the geometry before anything is written
  if ((*vm)["route"].as<bool>()) result["route"] = route_json(route());
  if (!(*vm)["picture"].as<bool>() && !vm->count("svg")) {
    out << result.dump() << "\n";
    return kPass;
  }
  const auto seqs = sequences(cu, seq_len);
  const std::vector<int> owner = owners(partition_of, cp, seqs.back().second);
  const std::string name(layouts::layout_name(layout));
  if (vm->count("svg")) write_file_atomic((*vm)["svg"].as<std::string>(), svg(name, cp, owner, seqs));
  if (!(*vm)["picture"].as<bool>()) {
    out << result.dump() << "\n";
    return kPass;
  }
  out << picture(name, cp, owner, seqs);
  if ((*vm)["route"].as<bool>()) {
    const layouts::Route r = route();
    out << "route of rank " << rank << " (zigzag->contiguous): rows sent to each peer "
        << nlohmann::json(r.send_counts).dump() << ", received from each " << nlohmann::json(r.recv_counts).dump()
        << "\n";
  }
  return kPass;
}

}  // namespace gdnv::cli
