// gdn-verify layout: the global positions a CP rank holds under a layout, and optionally its
// zigzag <-> contiguous route, as one line of JSON.
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/command.hpp"
#include "cli/lists.hpp"
#include "core/error.hpp"
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
  const auto vm = parse_options(
      "layout", "--layout zigzag|contiguous --cp W --rank r (--cu-seqlens 0,16,40 | --seq-len S) [--route]", options,
      {}, args, out);
  if (!vm) return kPass;
  const bool thd = vm->count("cu-seqlens"), sbhd = vm->count("seq-len");
  if (thd == sbhd) throw ConfigError("gdn-verify layout: give exactly one of --cu-seqlens (THD) and --seq-len (SBHD)");
  const Layout layout = layouts::parse_layout((*vm)["layout"].as<std::string>());
  const int cp = (*vm)["cp"].as<int>(), rank = (*vm)["rank"].as<int>();
  const std::vector<std::int64_t> cu =
      thd ? parse_int_list((*vm)["cu-seqlens"].as<std::string>(), "--cu-seqlens", "0,16,40")
          : std::vector<std::int64_t>{};
  const std::int64_t seq_len = sbhd ? (*vm)["seq-len"].as<std::int64_t>() : 0;

  nlohmann::ordered_json result = {
      {"format", thd ? "thd" : "sbhd"}, {"layout", layouts::layout_name(layout)}, {"cp_size", cp}, {"cp_rank", rank}};
  result["indices"] =
      (thd ? layouts::thd_partition(layout, cu, cp, rank) : layouts::sbhd_partition(layout, seq_len, cp, rank))
          .positions();
  if ((*vm)["route"].as<bool>())
    result["route"] = route_json(thd ? layouts::zigzag_contiguous_route(cu, cp, rank)
                                     : layouts::sbhd_zigzag_contiguous_route(seq_len, cp, rank));
  out << result.dump() << "\n";
  return kPass;
}

}  // namespace gdnv::cli
