// Every collective of the in-process world against its serial model (properties/comm_testing.hpp):
// groups of 1..8 ranks, random counts including zeros, F64/F32/BF16. Each rank sleeps a varying few
// microseconds before the collective, so arrival order changes from case to case; the bits must not.
#include <chrono>
#include <thread>

#include "comm/inprocess.hpp"
#include "properties/comm_testing.hpp"

namespace gdnv {
namespace {

constexpr int kMaxRanks = 8;

// Runs `check` on every rank of an in-process world of n ranks, each after a pseudo-random delay.
std::string in_world(int n, const model::Check& check) {
  static std::uint64_t round = 0;
  ++round;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  comm::run_world(n,
                  [&](comm::Communicator& comm) {
                    std::this_thread::sleep_for(std::chrono::microseconds(hash64(round, comm.rank(), 0) % 200));
                    errors[static_cast<std::size_t>(comm.rank())] = check(comm);
                  },
                  {std::chrono::seconds(10)});
  std::string all;
  for (const auto& e : errors) all += e.empty() ? "" : e + "\n";
  return all;
}

RC_GTEST_PROP(CommInProcess, AllToAllVMatchesSerialModel, ()) {
  model::all_to_all_v_matches_model(in_world, kMaxRanks);
}
RC_GTEST_PROP(CommInProcess, AllGatherMatchesSerialModel, ()) { model::all_gather_matches_model(in_world, kMaxRanks); }
RC_GTEST_PROP(CommInProcess, ReduceScatterMatchesSerialModel, ()) {
  model::reduce_scatter_matches_model(in_world, kMaxRanks);
}
RC_GTEST_PROP(CommInProcess, AllReduceMatchesSerialModel, ()) { model::all_reduce_matches_model(in_world, kMaxRanks); }
RC_GTEST_PROP(CommInProcess, BroadcastMatchesSerialModel, ()) { model::broadcast_matches_model(in_world, kMaxRanks); }
RC_GTEST_PROP(CommInProcess, SplitGroupsMatchSerialModel, ()) { model::split_matches_model(in_world, kMaxRanks); }

// The same all_reduce with ranks arriving in two random orders (rank r sleeps delay[r] * 100 us
// first) gives the same bits on every rank.
RC_GTEST_PROP(CommInProcess, SumBitsDoNotDependOnArrivalOrder, ()) {
  const int n = *rc::gen::inRange(2, kMaxRanks + 1);
  const DType dtype = *model::gen_dtype();
  const auto seed = *model::gen_seed();
  const auto gen_delays = rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n), rc::gen::inRange(0, 8));
  const auto run = [&](const std::vector<int>& delay) {
    std::vector<Tensor> out(static_cast<std::size_t>(n));
    comm::run_world(n, [&](comm::Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      std::this_thread::sleep_for(std::chrono::microseconds(100 * delay[r]));
      Tensor x = model::values(dtype, seed, comm.rank(), 33);
      comm.all_reduce(x);
      out[r] = x;
    });
    return out;
  };
  const auto first = run(*gen_delays), second = run(*gen_delays);
  RC_ASSERT(!first[0].bitwise_equal(model::values(dtype, seed, 0, 33)));  // the sum changed rank 0's data
  for (int r = 0; r < n; ++r) {
    RC_ASSERT(first[r].bitwise_equal(first[0]));
    RC_ASSERT(second[r].bitwise_equal(first[0]));
  }
}

}  // namespace
}  // namespace gdnv
