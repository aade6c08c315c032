// Gate step "communicator semantics": every collective sum is the rank-ordered sum rounded once, bit for
// bit, and the bytes every rank moves are the cost model's (docs/DESIGN.md §3.2, §12).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/inprocess.hpp"
#include "comm/transport.hpp"
#include "core/rng.hpp"
#include "cost/cost.hpp"
#include "cpu/backend.hpp"
#include "gate/steps.hpp"
#include "harness/world.hpp"

namespace gdnv::gate {
namespace {

using Ints = std::vector<std::int64_t>;

enum class SumKind { AllReduce, ReduceScatter, ReduceScatterV };
struct SumCollective {
  const char* name;
  SumKind kind;
};
constexpr SumCollective kSums[] = {{"all_reduce", SumKind::AllReduce},
                                   {"reduce_scatter", SumKind::ReduceScatter},
                                   {"reduce_scatter_v", SumKind::ReduceScatterV}};

// Elements per rank's block; reduce_scatter_v gives block p 8 + 3p elements.
constexpr std::int64_t kBlock = 24;
Ints block_counts(SumKind kind, int n) {
  Ints counts;
  for (int p = 0; p < n; ++p) counts.push_back(kind == SumKind::ReduceScatterV ? 8 + 3 * p : kBlock);
  return counts;
}

// Rank r's contribution to element i, exact in `dtype`, of three kinds that make the sum's order and
// rounding visible: (0) s on rank 0 and s 2^-8 on every other rank (a bf16 sum rounded once is
// s (1 + (n-1) 2^-8) rounded, one rounded after every addition stays s: 1 + 2^-8 ties to even);
// (1) +B on rank p, -B on rank p+1 (mod n) and N(0, 1) elsewhere, B = 2^24 (2^53 for F64): the small
// values added before the cancellation lose their low bits, so any other order gives other bits;
// (2) N(0, 1) on every rank.
Tensor contributions(const std::string& label, DType dtype, int n, int rank, std::int64_t count) {
  const Rng rng(stream_of(label), "rank " + std::to_string(rank));
  const double big = dtype == DType::F64 ? 0x1p53 : 0x1p24;
  Tensor t(DType::F64, {count});
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t k = i / 3;
    const double s = (k % 2 ? -1.0 : 1.0) * std::ldexp(1.0, static_cast<int>(k % 7) - 3);
    const int p = static_cast<int>(k % n);
    double x = rng.normal(static_cast<std::uint64_t>(i));
    if (i % 3 == 0) x = rank == 0 ? s : s * 0x1p-8;
    else if (i % 3 == 1 && rank == p) x = big * s;
    else if (i % 3 == 1 && rank == (p + 1) % n) x = -big * s;
    t.set(i, x);
  }
  return t.to(dtype);
}

// The contract's sum, written out here rather than taken from comm/rank_sum.hpp: elements
// [begin, begin + count) of every rank's contribution added in rank order, accumulated in fp64 (F64)
// or fp32 (F32, BF16), rounded once to the dtype.
Tensor rank_ordered(const std::vector<Tensor>& sends, DType dtype, std::int64_t begin, std::int64_t count) {
  std::vector<double> out;
  for (std::int64_t i = begin; i < begin + count; ++i) {
    if (dtype == DType::F64) {
      double acc = sends[0].get(i);
      for (std::size_t r = 1; r < sends.size(); ++r) acc += sends[r].get(i);
      out.push_back(acc);
    } else {
      float acc = static_cast<float>(sends[0].get(i));
      for (std::size_t r = 1; r < sends.size(); ++r) acc += static_cast<float>(sends[r].get(i));
      out.push_back(acc);
    }
  }
  return Tensor::from_f64(out, {count}, dtype);
}

// What each rank receives from `calls` calls of the collective on an in-process world of n ranks.
std::vector<std::vector<Tensor>> run_sums(SumKind kind, const std::vector<Tensor>& sends, DType dtype, int calls) {
  const int n = static_cast<int>(sends.size());
  const Ints counts = block_counts(kind, n);
  std::vector<std::vector<Tensor>> got(static_cast<std::size_t>(n));
  comm::run_world(n, [&](comm::Communicator& c) {
    const Tensor& send = sends[static_cast<std::size_t>(c.rank())];
    for (int call = 0; call < calls; ++call) {
      Tensor recv(dtype, {kind == SumKind::AllReduce ? send.numel() : counts[static_cast<std::size_t>(c.rank())]});
      if (kind == SumKind::AllReduce) c.all_reduce(send, recv);
      else if (kind == SumKind::ReduceScatter) c.reduce_scatter(send, recv);
      else c.reduce_scatter_v(send, recv, counts);
      got[static_cast<std::size_t>(c.rank())].push_back(recv);
    }
  });
  return got;
}

std::vector<Tensor> world_contributions(const std::string& label, DType dtype, int n, std::int64_t count) {
  std::vector<Tensor> sends;
  for (int r = 0; r < n; ++r) sends.push_back(contributions(label, dtype, n, r, count));
  return sends;
}

// (a) every rank's result equals, bit for bit, the rank-ordered sum rounded once.
std::string sum_is_rank_ordered(const std::string& label, SumKind kind, DType dtype, int n) {
  const Ints counts = block_counts(kind, n);
  std::int64_t total = 0;
  for (auto c : counts) total += c;
  const std::vector<Tensor> sends = world_contributions(label, dtype, n, kind == SumKind::AllReduce ? kBlock : total);
  const auto got = run_sums(kind, sends, dtype, 1);
  std::int64_t begin = 0;
  for (int r = 0; r < n; ++r) {
    const std::int64_t count = kind == SumKind::AllReduce ? kBlock : counts[static_cast<std::size_t>(r)];
    const Tensor want = rank_ordered(sends, dtype, kind == SumKind::AllReduce ? 0 : begin, count);
    const Tensor& have = got[static_cast<std::size_t>(r)][0];
    const std::size_t es = dtype_size(dtype);
    for (std::int64_t i = 0; i < count; ++i)
      if (std::memcmp(have.bytes() + i * es, want.bytes() + i * es, es) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "rank %d element %lld: %.17g, the rank-ordered sum rounded once is %.17g", r,
                      static_cast<long long>(i), have.get(i), want.get(i));
        return buf;
      }
    begin += count;
  }
  return "";
}

// (b) every rank receives the same bits, and so does every repeated call.
std::string all_reduce_is_deterministic(const std::string& label, DType dtype, int n) {
  const auto got = run_sums(SumKind::AllReduce, world_contributions(label, dtype, n, kBlock), dtype, 3);
  for (int r = 0; r < n; ++r)
    for (std::size_t call = 0; call < got[0].size(); ++call)
      if (!got[static_cast<std::size_t>(r)][call].bitwise_equal(got[0][0]))
        return "rank " + std::to_string(r) + " call " + std::to_string(call + 1) + " differs from rank 0 call 1";
  return "";
}

// (c) One layer's run: the matrix geometry of the CP mode matrix (hidden 24, Hk 4, Hv 8, dk 6, dv 10,
// THD lengths 8W, 4W: spans of 12 tokens, longer than the conv halo).
harness::RunSpec bytes_spec(cp::CpMode mode, int W, DType dtype) {
  harness::RunSpec s;
  s.layer = {24, 4, 8, 6, 10, 4, 1e-6, false};
  s.cp.mode = mode;
  s.cp.cp = W;
  s.dtype = dtype;
  s.lengths = {8 * W, 4 * W};
  s.gates = harness::GateRegime::Weak;
  return s;
}

// "forward all_gather: 2 calls, 96 B sent, 96 B received; the cost model: ..." for the first kind that
// differs, or the host syncs or route builds.
std::string counters_differ(const char* phase, const comm::Counters& got, const comm::Counters& want) {
  for (int k = 0; k < comm::kCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::Collective>(k);
    const comm::Traffic& g = got[kind];
    const comm::Traffic& w = want[kind];
    if (g == w) continue;
    const auto line = [](const comm::Traffic& t) {
      return std::to_string(t.calls) + " calls, " + std::to_string(t.bytes_sent) + " B sent, " +
             std::to_string(t.bytes_recv) + " B received";
    };
    return std::string(phase) + " " + std::string(comm::collective_name(kind)) + ": " + line(g) +
           "; the cost model: " + line(w);
  }
  if (got != want) return std::string(phase) + " host syncs or route builds differ from the cost model";
  return "";
}

// (c) every rank's calls and bytes per collective kind, forward and backward, equal the cost model's.
std::string bytes_match_cost_model(const harness::RunSpec& spec) {
  const auto geometries = harness::planned_micro_batches(spec);
  const auto runs = harness::run_in_process(spec, harness::make_cases(spec), cpu::make_backend);
  for (std::size_t m = 0; m < runs.size(); ++m)
    for (std::size_t w = 0; w < runs[m].ranks.size(); ++w) {
      const harness::RankOutput& got = runs[m].ranks[w];
      const cost::RankCost want =
          cost::layer_cost(geometries[m], harness::place_of(spec, static_cast<int>(w), runs[m].cp_size));
      for (const auto& why : {counters_differ("forward", got.forward, want.forward.comm),
                              counters_differ("backward", got.backward, want.backward.comm)})
        if (!why.empty()) return "rank " + std::to_string(w) + " " + why;
    }
  return "";
}

// (d) The balanced partition the MPI and NCCL all-reduces split a tensor by (comm/transport.hpp
// partition_begin): rank p's part [begin(p), begin(p + 1)) covers [0, n) in order, each part floor(n / W)
// or ceil(n / W) elements, for counts that do not split evenly.
std::string partition_is_balanced(std::int64_t n, int W) {
  if (comm::partition_begin(n, W, 0) != 0 || comm::partition_begin(n, W, W) != n)
    return "the parts do not cover [0, n)";
  for (int p = 0; p < W; ++p) {
    const std::int64_t size = comm::partition_begin(n, W, p + 1) - comm::partition_begin(n, W, p);
    if (size != n / W && size != (n + W - 1) / W)
      return "rank " + std::to_string(p) + "'s part holds " + std::to_string(size) + " elements";
  }
  return "";
}

// docs/DESIGN.md §3.2 and §12: sums in rank order, accumulated wide and rounded once, the same bits on
// every rank and call (worlds of 2..8 ranks), and every rank's collectives, calls and bytes, as the cost
// model predicts them (each mode at W = 2, 4, fp32 and bf16). The same cases with --quick (0.3 s).
StepResult run(const StepOptions& options) {
  StepResult r(options);
  for (int n = 2; n <= 8; ++n)
    for (DType dtype : {DType::BF16, DType::F32, DType::F64}) {
      const std::string at = std::string(dtype_name(dtype)) + " W=" + std::to_string(n);
      for (const SumCollective& sum : kSums) {
        const std::string label = std::string(sum.name) + " " + at + " rank-ordered sum";
        r.check_case(label, [&] { return sum_is_rank_ordered(label, sum.kind, dtype, n); });
      }
      const std::string label = "all_reduce " + at + " same bits on every rank and call";
      r.check_case(label, [&] { return all_reduce_is_deterministic(label, dtype, n); });
    }
  for (int W = 2; W <= 8; ++W)
    for (std::int64_t n :
         {std::int64_t{1}, std::int64_t{W - 1}, std::int64_t{W + 1}, std::int64_t{25}, std::int64_t{1000003}})
      r.check_case("balanced partition of " + std::to_string(n) + " over W=" + std::to_string(W),
                   [=] { return partition_is_balanced(n, W); });
  for (cp::CpMode mode : {cp::CpMode::Headwise, cp::CpMode::Chunkwise, cp::CpMode::AllGather})
    for (int W : {2, 4})
      for (DType dtype : {DType::F32, DType::BF16}) {
        const harness::RunSpec spec = bytes_spec(mode, W, dtype);
        r.check_case(std::string(cp::mode_name(mode)) + " W=" + std::to_string(W) + " " +
                         std::string(dtype_name(dtype)) + " thd bytes against the cost model",
                     [&] { return bytes_match_cost_model(spec); });
      }
  return r;
}

}  // namespace

const Step communicator_semantics{"communicator semantics", run};

}  // namespace gdnv::gate
