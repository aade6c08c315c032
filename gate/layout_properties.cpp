// Gate step "layout properties": the layouts against upstream's own answers (layouts/upstream_vectors.hpp,
// the checks tests/layouts_test.cpp runs) and the zigzag <-> contiguous route as a delivery of spans.
#include <numeric>

#include "core/text.hpp"
#include "gate/steps.hpp"
#include "layouts/partition.hpp"
#include "layouts/route.hpp"
#include "layouts/upstream_vectors.hpp"

namespace gdnv::gate {
namespace {

using Ints = std::vector<std::int64_t>;

// The route, simulated: rank r receives from each peer p, in p's zigzag order, p's rows that fall in
// r's contiguous span; the counts must be the route's and the receive index must put every row at its
// place in the span.
void route_delivers_contiguous_spans(StepResult& r, const std::string& tag, const Ints& cu, int W) {
  const std::int64_t n = cu.back() / W;
  std::vector<Ints> zigzag;
  for (int p = 0; p < W; ++p) zigzag.push_back(layouts::thd_partition(layouts::Layout::zigzag, cu, W, p).positions());
  for (int rank = 0; rank < W; ++rank) {
    const layouts::Route route = layouts::zigzag_contiguous_route(cu, W, rank);
    Ints received, counts;
    for (int p = 0; p < W; ++p) {
      const auto before = received.size();
      for (auto g : zigzag[p])
        if (g >= rank * n && g < (rank + 1) * n) received.push_back(g);
      counts.push_back(static_cast<std::int64_t>(received.size() - before));
    }
    Ints placed(static_cast<std::size_t>(n), -1);
    bool ok = counts == route.recv_counts && route.index.size() == received.size();
    for (std::size_t k = 0; ok && k < received.size(); ++k) placed[route.index[k]] = received[k];
    Ints span(static_cast<std::size_t>(n));
    std::iota(span.begin(), span.end(), rank * n);
    r.check(ok && placed == span, tag + " rank " + std::to_string(rank),
            "the route does not deliver the rank's contiguous span of " + comma_list(cu));
  }
}

StepResult run(const StepOptions& options) {
  StepResult r(options);
  const layouts::VectorSink sink = [&r](bool ok, const std::string& label, const std::string& why) {
    r.check(ok, label, why);
  };
  layouts::check_megatron_indices(sink);
  layouts::check_fla_contexts(sink);
  for (int W = 1; W <= 8; ++W)
    for (std::uint64_t seed = 0; seed < (options.quick_matrix() ? 2u : 8u); ++seed)
      route_delivers_contiguous_spans(r, "route W=" + std::to_string(W) + " seed " + std::to_string(seed),
                                      seeded_cu(W, seed, "gate/cu", 4, 5), W);
  return r;
}

}  // namespace

const Step layout_properties{"layout properties", run};

}  // namespace gdnv::gate
