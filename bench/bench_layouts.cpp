// Layout costs at training scale: building every rank's zigzag <-> contiguous route for 1,048,576 tokens in
// 2,048 sequences at W=8 (target: under 20 ms for all W routes), and applying a route (a row gather /
// scatter), shown beside a plain memcpy of the same bytes so "at memory bandwidth" can be read off.
#include <benchmark/benchmark.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "core/rng.hpp"
#include "layouts/apply.hpp"
#include "layouts/route.hpp"

namespace {

using gdnv::layouts::Route;

constexpr std::int64_t kTokens = 1 << 20;
constexpr int kSequences = 2048;
constexpr int kW = 8;

// kSequences random lengths, each a positive multiple of 2W, summing to kTokens (fixed seed).
std::vector<std::int64_t> packed_cu_seqlens() {
  const gdnv::Rng rng(20261202, "bench_layouts");
  const std::int64_t units = kTokens / (2 * kW), spare = units - kSequences;
  std::vector<double> weight(kSequences);
  double sum = 0;
  for (int i = 0; i < kSequences; ++i)
    sum += weight[static_cast<std::size_t>(i)] = 0.5 + rng.uniform(static_cast<std::uint64_t>(i));
  std::vector<std::int64_t> cu{0};
  std::int64_t used = 0;
  for (int i = 0; i < kSequences; ++i) {
    const std::int64_t extra =
        i + 1 < kSequences
            ? static_cast<std::int64_t>(weight[static_cast<std::size_t>(i)] / sum * static_cast<double>(spare))
            : spare - used;
    used += extra;
    cu.push_back(cu.back() + 2 * kW * (1 + extra));
  }
  return cu;
}

const std::vector<std::int64_t>& cu_seqlens() {
  static const std::vector<std::int64_t> cu = packed_cu_seqlens();
  return cu;
}

void BM_BuildAllRoutes(benchmark::State& state) {
  for (auto _ : state) {
    for (int r = 0; r < kW; ++r) {
      Route route = gdnv::layouts::zigzag_contiguous_route(cu_seqlens(), kW, r);
      benchmark::DoNotOptimize(route.index.data());
    }
  }
  state.counters["tokens"] = static_cast<double>(cu_seqlens().back());
  state.counters["sequences"] = static_cast<double>(cu_seqlens().size() - 1);
}
BENCHMARK(BM_BuildAllRoutes)->Unit(benchmark::kMillisecond);

// One rank's T/W rows of `row_bytes` (arg 0), op (arg 1): 0 contiguous -> send order (gather), 1 receive ->
// contiguous (scatter); the baselines 2, one memcpy of the same bytes, and 3, the same row-by-row copy in
// identity order (what the route costs without its permutation). Bytes counted once read + once written.
void BM_ApplyRoute(benchmark::State& state) {
  const auto row_bytes = static_cast<std::size_t>(state.range(0));
  const Route route = gdnv::layouts::zigzag_contiguous_route(cu_seqlens(), kW, 3);
  const std::size_t bytes = route.index.size() * row_bytes;
  std::vector<std::int64_t> identity(route.index.size());
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::uint8_t> src(bytes, 1), dst(bytes, 0);
  const auto op = state.range(1);
  for (auto _ : state) {
    if (op == 0) gdnv::layouts::gather_rows(src.data(), route.index, row_bytes, dst.data());
    else if (op == 1) gdnv::layouts::scatter_rows(src.data(), route.index, row_bytes, dst.data());
    else if (op == 2) std::memcpy(dst.data(), src.data(), bytes);
    else gdnv::layouts::gather_rows(src.data(), identity, row_bytes, dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(2 * bytes));
  state.SetLabel(op == 0 ? "gather" : op == 1 ? "scatter" : op == 2 ? "memcpy" : "row copy, identity order");
}
BENCHMARK(BM_ApplyRoute)
    ->ArgsProduct({{512, 4096}, {0, 1, 2, 3}})
    ->ArgNames({"row_bytes", "op"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
