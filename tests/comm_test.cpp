// White-box tests of comm/ on the in-process world: failure propagation, timeouts, mismatch and
// argument errors (each message asserted), accounting for a known sequence, bf16 rounding, barrier,
// TP x CP grid and dynamic CP groups. The serial-model comparisons are properties
// (properties/comm_properties.cpp, comm_mpi_properties.cpp).
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "comm/groups.hpp"
#include "comm/inprocess.hpp"
#include "core/half.hpp"

namespace gdnv {
namespace {

using namespace std::chrono_literals;

// Runs fn on n ranks; returns each rank's CommError message ("" for a rank that raised none).
std::vector<std::string> comm_errors(int n, const std::function<void(comm::Communicator&)>& fn,
                                     std::chrono::milliseconds timeout = 20s) {
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  comm::run_world(n,
                  [&](comm::Communicator& comm) {
                    try {
                      fn(comm);
                    } catch (const comm::CommError& e) {
                      errors[static_cast<std::size_t>(comm.rank())] = e.what();
                    }
                  },
                  {timeout});
  return errors;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<float> nan_floats(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// ---- failures: no hang, the cause reaches every peer ----

TEST(CommFailure, ThrowingRankFailsEveryPeersPendingCollective) {
  // The timeout is far longer than the test may take: the peers must learn of the failure, not time out.
  std::array<std::string, 4> seen;
  const auto start = std::chrono::steady_clock::now();
  try {
    comm::run_world(4,
                    [&](comm::Communicator& comm) {
                      if (comm.rank() == 2) {
                        std::this_thread::sleep_for(50ms);  // the peers are inside all_gather by now
                        throw std::runtime_error("planted failure on rank 2");
                      }
                      try {
                        std::vector<float> mine{1.0f}, all(4);
                        comm.all_gather(mine, all);
                      } catch (const comm::CommError& e) {
                        seen[static_cast<std::size_t>(comm.rank())] = e.what();
                        throw;
                      }
                    },
                    {20s});
    FAIL() << "run_world returned although rank 2 threw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "planted failure on rank 2");  // the first failure, its type kept
  }
  EXPECT_LT(seconds_since(start), 5.0);
  for (const int r : {0, 1, 3})
    EXPECT_EQ(seen[r],
              "all_gather on group of 4 ranks [0, 1, 2, 3] (call #1): rank 2 failed: planted failure on rank 2")
        << "rank " << r;
}

TEST(CommFailure, FailureReachesPeersWaitingInAnotherGroup) {
  std::array<std::string, 4> seen;
  EXPECT_THROW(comm::run_world(4,
                               [&](comm::Communicator& comm) {
                                 const auto pair = comm.split(comm.rank() / 2, comm.rank());  // {0, 1} and {2, 3}
                                 if (comm.rank() == 3) throw ConfigError("planted failure on rank 3");
                                 // Rank 1 comes late: rank 0 is pending when rank 3 fails, rank 1 arrives after.
                                 if (comm.rank() == 1) std::this_thread::sleep_for(50ms);
                                 try {
                                   pair->barrier();
                                 } catch (const comm::CommError& e) {
                                   seen[static_cast<std::size_t>(comm.rank())] = e.what();
                                 }
                               },
                               {20s}),
               ConfigError);
  EXPECT_EQ(seen[0], "barrier on group of 2 ranks [0, 1] (call #1): world rank 3 failed: planted failure on rank 3");
  EXPECT_EQ(seen[1], seen[0]);
  EXPECT_EQ(seen[2],
            "barrier on group of 2 ranks [2, 3] (call #1): rank 1 (world rank 3) failed: planted failure on rank 3");
}

// Every waiter names the cause; the first to see it reports it directly, the others report that it gave up.
void expect_cause(const std::vector<std::string>& errors, const std::vector<int>& ranks, const std::string& where,
                  const std::string& cause) {
  int direct = 0;
  for (const int r : ranks) {
    EXPECT_EQ(errors[r].rfind(where, 0), 0u) << errors[r];
    EXPECT_NE(errors[r].find(cause), std::string::npos) << errors[r];
    direct += errors[r] == where + cause;
  }
  EXPECT_GE(direct, 1);
}

TEST(CommFailure, SkippedCollectiveTimesOutNamingItAndTheMissingRank) {
  const auto errors = comm_errors(
      3,
      [](comm::Communicator& comm) {
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(400ms);  // skips the all_reduce, still running while the peers wait
          return;
        }
        std::vector<double> x{1.0, 2.0};
        comm.all_reduce(x);
      },
      150ms);
  expect_cause(errors, {0, 2},
               "all_reduce on group of 3 ranks [0, 1, 2] (call #1): ", "timed out after 0.15 s: rank 1 did not arrive");
  EXPECT_EQ(errors[1], "");
}

TEST(CommFailure, RankThatReturnedIsNamedWithoutWaitingForTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = comm_errors(4, [](comm::Communicator& comm) {
    if (comm.rank() == 3) return;
    comm.barrier();
  });
  EXPECT_LT(seconds_since(start), 5.0);  // the 20 s timeout was not needed
  expect_cause(errors, {0, 1, 2}, "barrier on group of 4 ranks [0, 1, 2, 3] (call #1): ",
               "rank 3 did not arrive (returned from the world function)");
}

// ---- mismatches between ranks: clear error, no data moved ----

TEST(CommMismatch, AllToAllVCountsDisagreeingAreDetectedBeforeAnyCopy) {
  std::array<std::vector<float>, 2> received;
  const auto errors = comm_errors(2, [&](comm::Communicator& comm) {
    // Rank 0 sends 3 elements to rank 1, but rank 1 expects 4 from rank 0.
    const bool zero = comm.rank() == 0;
    const std::vector<std::int64_t> send_counts =
        zero ? std::vector<std::int64_t>{1, 3} : std::vector<std::int64_t>{2, 1};
    const std::vector<std::int64_t> recv_counts =
        zero ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{4, 1};
    const std::vector<float> send(zero ? 4 : 3, 7.0f);
    auto& recv = received[static_cast<std::size_t>(comm.rank())];
    recv = nan_floats(zero ? 3 : 5);
    comm.all_to_all_v(send, send_counts, recv, recv_counts);
  });
  const std::string want =
      "all_to_all_v on group of 2 ranks [0, 1] (call #1): count mismatch: rank 0 sends 3 "
      "elements to rank 1, which expects 4";
  EXPECT_EQ(errors[0], want);
  EXPECT_EQ(errors[1], want);
  for (const auto& recv : received)
    for (const float x : recv) EXPECT_TRUE(std::isnan(x)) << "data moved despite the mismatch";
}

struct MismatchCase {
  const char* name;
  std::function<void(comm::Communicator&)> call;  // rank 0 and rank 1 disagree
  const char* message;                            // what both ranks report after the "<where>: " prefix
};

class CommMismatchTable : public ::testing::TestWithParam<MismatchCase> {};

TEST_P(CommMismatchTable, BothRanksReportTheDisagreement) {
  const auto errors = comm_errors(2, GetParam().call);
  for (int r = 0; r < 2; ++r) {
    const auto colon = errors[r].find("): ");
    ASSERT_NE(colon, std::string::npos) << errors[r];
    EXPECT_EQ(errors[r].substr(colon + 3), GetParam().message) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Comm, CommMismatchTable,
    ::testing::Values(MismatchCase{"AllGatherV",
                                   [](comm::Communicator& c) {
                                     // Rank 1 sends 2 elements; rank 0 expects 3 from it.
                                     const std::vector<std::int64_t> counts = c.rank() == 0
                                                                                  ? std::vector<std::int64_t>{1, 3}
                                                                                  : std::vector<std::int64_t>{1, 2};
                                     std::vector<float> send(static_cast<std::size_t>(counts[c.rank()]), 1.0f),
                                         recv(static_cast<std::size_t>(counts[0] + counts[1]));
                                     c.all_gather_v(send, recv, counts);
                                   },
                                   "count mismatch: rank 1 sends 2 elements to rank 0, which expects 3"},
                      MismatchCase{"ReduceScatterV",
                                   [](comm::Communicator& c) {
                                     // Rank 1 thinks block 0 has 3 elements; rank 0 says 2.
                                     const std::vector<std::int64_t> counts = c.rank() == 0
                                                                                  ? std::vector<std::int64_t>{2, 2}
                                                                                  : std::vector<std::int64_t>{3, 2};
                                     std::vector<float> send(static_cast<std::size_t>(counts[0] + counts[1]), 1.0f),
                                         recv(static_cast<std::size_t>(counts[c.rank()]));
                                     c.reduce_scatter_v(send, recv, counts);
                                   },
                                   "count mismatch: rank 1 sends 3 elements to rank 0, which expects 2"},
                      MismatchCase{"AllReduce",
                                   [](comm::Communicator& c) {
                                     std::vector<double> x(c.rank() == 0 ? 4 : 5, 1.0);
                                     c.all_reduce(x);
                                   },
                                   "count mismatch: rank 1 sends 5 elements to rank 0, which expects 4"},
                      MismatchCase{"BroadcastRoot",
                                   [](comm::Communicator& c) {
                                     std::vector<float> x(3, 1.0f);
                                     c.broadcast(x, c.rank());
                                   },
                                   "root mismatch: rank 1 uses root 1 but rank 0 uses root 0"},
                      MismatchCase{"Dtype",
                                   [](comm::Communicator& c) {
                                     if (c.rank() == 0) {
                                       std::vector<float> send{1.0f}, recv(2);
                                       c.all_gather(send, recv);
                                     } else {
                                       std::vector<double> send{1.0}, recv(2);
                                       c.all_gather(send, recv);
                                     }
                                   },
                                   "dtype mismatch: rank 1 sends F64 but rank 0 expects F32"},
                      MismatchCase{"Kind",
                                   [](comm::Communicator& c) {
                                     if (c.rank() == 0) {
                                       c.barrier();
                                     } else {
                                       std::vector<float> x{1.0f};
                                       c.all_reduce(x);
                                     }
                                   },
                                   "collective mismatch: rank 1 called all_reduce while rank 0 called barrier"}),
    [](const auto& p) { return std::string(p.param.name); });

// ---- bad arguments on the calling rank: rejected before any rank communicates ----

struct ArgumentCase {
  const char* name;
  std::function<void(comm::Communicator&)> call;  // the same bad call on both ranks
  const char* message;                            // "{rank}" stands for the calling rank
};

class CommArgumentTable : public ::testing::TestWithParam<ArgumentCase> {};

TEST_P(CommArgumentTable, IsRejectedWithItsMessageAndCountsNoCall) {
  std::array<comm::Counters, 2> after;
  const auto errors = comm_errors(2, [&](comm::Communicator& comm) {
    try {
      GetParam().call(comm);
    } catch (const comm::CommError&) {
      after[static_cast<std::size_t>(comm.rank())] = comm.accounting().counters();
      throw;
    }
  });
  for (int r = 0; r < 2; ++r) {
    std::string message = GetParam().message;
    if (const auto at = message.find("{rank}"); at != std::string::npos) message.replace(at, 6, std::to_string(r));
    EXPECT_EQ(errors[r], message) << "rank " << r;
    EXPECT_EQ(after[r].calls(), 0u);
  }
}

std::vector<float> floats(std::size_t n) { return std::vector<float>(n, 1.0f); }

INSTANTIATE_TEST_SUITE_P(
    Comm, CommArgumentTable,
    ::testing::Values(
        ArgumentCase{"SendCountsSum",
                     [](comm::Communicator& c) {
                       auto send = floats(3), recv = floats(2);
                       c.all_to_all_v(send, std::vector<std::int64_t>{1, 1}, recv, std::vector<std::int64_t>{1, 1});
                     },
                     "all_to_all_v on group of 2 ranks [0, 1]: send_counts sum to 2 but the send buffer holds 3 "
                     "elements"},
        ArgumentCase{"CountsLength",
                     [](comm::Communicator& c) {
                       auto send = floats(2), recv = floats(2);
                       c.all_to_all_v(send, std::vector<std::int64_t>{2}, recv, std::vector<std::int64_t>{1, 1});
                     },
                     "all_to_all_v on group of 2 ranks [0, 1]: send_counts has 1 entries for 2 ranks"},
        ArgumentCase{"NegativeCount",
                     [](comm::Communicator& c) {
                       auto send = floats(2), recv = floats(2);
                       c.all_to_all_v(send, std::vector<std::int64_t>{3, -1}, recv, std::vector<std::int64_t>{1, 1});
                     },
                     "all_to_all_v on group of 2 ranks [0, 1]: send_counts[1] is negative (-1)"},
        ArgumentCase{"Aliasing",
                     [](comm::Communicator& c) {
                       auto buf = floats(2);
                       c.all_to_all_v(buf, std::vector<std::int64_t>{1, 1}, buf, std::vector<std::int64_t>{1, 1});
                     },
                     "all_to_all_v on group of 2 ranks [0, 1]: send and recv buffers overlap"},
        ArgumentCase{"AllGatherSize",
                     [](comm::Communicator& c) {
                       auto send = floats(2), recv = floats(3);
                       c.all_gather(send, recv);
                     },
                     "all_gather on group of 2 ranks [0, 1]: recv buffer holds 3 elements, expected size * send count "
                     "= 4"},
        ArgumentCase{"AllGatherVOwnCount",
                     [](comm::Communicator& c) {
                       auto send = floats(2), recv = floats(2);
                       c.all_gather_v(send, recv, std::vector<std::int64_t>{1, 1});
                     },
                     "all_gather on group of 2 ranks [0, 1]: recv_counts[{rank}] is 1 but this rank sends 2 elements"},
        ArgumentCase{"DtypesDiffer",
                     [](comm::Communicator& c) {
                       const auto send = floats(1);
                       std::vector<double> recv(2);
                       c.all_gather(send, recv);
                     },
                     "all_gather on group of 2 ranks [0, 1]: send buffer is F32 but recv buffer is F64"},
        ArgumentCase{"IntegerSum",
                     [](comm::Communicator& c) {
                       std::vector<std::int32_t> x{1, 2};
                       c.all_reduce(x);
                     },
                     "all_reduce on group of 2 ranks [0, 1]: sums are defined for F64, F32 and BF16, not I32"},
        ArgumentCase{"ReduceScatterSize",
                     [](comm::Communicator& c) {
                       auto send = floats(5), recv = floats(2);
                       c.reduce_scatter(send, recv);
                     },
                     "reduce_scatter on group of 2 ranks [0, 1]: send buffer holds 5 elements, expected size * recv "
                     "count = 4"},
        ArgumentCase{"PartialOverlap",
                     [](comm::Communicator& c) {
                       auto buf = floats(4);
                       c.all_reduce(comm::ConstBuf(buf.data(), 3), comm::MutBuf(buf.data() + 1, 3));
                     },
                     "all_reduce on group of 2 ranks [0, 1]: send and recv buffers overlap"},
        ArgumentCase{"NullBuffer",
                     [](comm::Communicator& c) { c.all_reduce(comm::MutBuf(static_cast<float*>(nullptr), 2)); },
                     "all_reduce on group of 2 ranks [0, 1]: send buffer is null but holds 2 elements"},
        ArgumentCase{"BroadcastRoot",
                     [](comm::Communicator& c) {
                       auto x = floats(1);
                       c.broadcast(x, 2);
                     },
                     "broadcast on group of 2 ranks [0, 1]: root 2 is not a rank of the group (0..1)"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(CommWorld, InvalidWorldIsAConfigError) {
  try {
    comm::run_world(0, [](comm::Communicator&) {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "run_world: the world needs at least 1 rank, got 0");
  }
  try {
    comm::run_world(2, [](comm::Communicator&) {}, {0ms});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "run_world: the collective timeout must be positive, got 0 ms");
  }
}

// ---- accounting ----

// A known sequence on 3 ranks; bytes derived from the definitions in comm/accounting.hpp (payload
// between distinct ranks; F64 8 B, F32 4 B, BF16 2 B).
TEST(CommAccounting, KnownSequenceCountsExactCallsAndBytes) {
  std::array<comm::Counters, 3> counted;
  comm::run_world(3, [&](comm::Communicator& comm) {
    const int r = comm.rank();
    const comm::ScopedCounter scope(comm.accounting());
    // all_to_all_v F32 with c[s][d] = s + 2d elements from s to d.
    std::vector<std::int64_t> send_counts, recv_counts;
    for (int p = 0; p < 3; ++p) {
      send_counts.push_back(r + 2 * p);
      recv_counts.push_back(p + 2 * r);
    }
    std::vector<float> a2a_send(static_cast<std::size_t>(3 * r + 6)), a2a_recv(static_cast<std::size_t>(6 * r + 3));
    comm.all_to_all_v(a2a_send, send_counts, a2a_recv, recv_counts);
    // all_gather_v BF16 with counts [1, 0, 2].
    const std::vector<std::int64_t> gather_counts{1, 0, 2};
    std::vector<bf16_t> g_send(static_cast<std::size_t>(gather_counts[r])), g_recv(3);
    comm.all_gather_v(g_send, g_recv, gather_counts);
    // reduce_scatter_v F64 with blocks [2, 3, 1].
    const std::vector<std::int64_t> blocks{2, 3, 1};
    std::vector<double> rs_send(6), rs_recv(static_cast<std::size_t>(blocks[r]));
    comm.reduce_scatter_v(rs_send, rs_recv, blocks);
    // Two all_reduce of 7 F32.
    std::vector<float> x(7);
    comm.all_reduce(x);
    comm.all_reduce(x);
    // broadcast of 4 F64 from rank 1, a barrier, a split.
    std::vector<double> b(4);
    comm.broadcast(b, 1);
    comm.barrier();
    comm.split(0, r);
    counted[static_cast<std::size_t>(r)] = scope.delta();
  });
  struct Want {
    comm::Traffic a2a, gather, rs, ar, bc;
  };
  const std::array<Want, 3> want{{
      // rank 0: a2a sends c01+c02 = 6 (24 B), receives c10+c20 = 3 (12 B); gather sends its 1 to 2 peers (4 B),
      // receives 0+2 (4 B); rs sends blocks 1,2 = 4 (32 B), receives its 2 from 2 peers (32 B); all_reduce owns
      // [0,2) of 7: (7-2) + 2*2 = 9 per call (36 B), twice; broadcast receives 4 (32 B).
      {{1, 24, 12}, {1, 4, 4}, {1, 32, 32}, {2, 72, 72}, {1, 0, 32}},
      // rank 1: a2a sends c10+c12 = 6 (24 B), receives c01+c21 = 6 (24 B); gather sends 0, receives 1+2 (6 B); rs
      // sends 2+1 (24 B), receives 3 from 2 peers (48 B); all_reduce owns [2,4): 9 per call; root: 4 to 2 peers.
      {{1, 24, 24}, {1, 0, 6}, {1, 24, 48}, {2, 72, 72}, {1, 64, 0}},
      // rank 2: a2a sends c20+c21 = 6 (24 B), receives c02+c12 = 9 (36 B); gather sends 2 to 2 peers (8 B),
      // receives 1+0 (2 B); rs sends 2+3 (40 B), receives 1 from 2 peers (16 B); all_reduce owns [4,7): 7-3 + 2*3 =
      // 10 per call (40 B); broadcast receives 4 (32 B).
      {{1, 24, 36}, {1, 8, 2}, {1, 40, 16}, {2, 80, 80}, {1, 0, 32}},
  }};
  for (int r = 0; r < 3; ++r) {
    const comm::Counters& c = counted[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(c[comm::Collective::AllToAllV], want[r].a2a);
    EXPECT_EQ(c[comm::Collective::AllGather], want[r].gather);
    EXPECT_EQ(c[comm::Collective::ReduceScatter], want[r].rs);
    EXPECT_EQ(c[comm::Collective::AllReduce], want[r].ar);
    EXPECT_EQ(c[comm::Collective::Broadcast], want[r].bc);
    EXPECT_EQ(c[comm::Collective::Barrier], (comm::Traffic{1, 0, 0}));
    EXPECT_EQ(c[comm::Collective::Split], (comm::Traffic{1, 0, 0}));
    EXPECT_EQ(c.calls(), 8u);
    EXPECT_EQ(c.host_syncs, 0u);
  }
}

TEST(CommAccounting, ScopedCountersNestAndFeedTheirSink) {
  std::array<comm::Counters, 2> forward, outer;
  comm::run_world(2, [&](comm::Communicator& comm) {
    const auto r = static_cast<std::size_t>(comm.rank());
    const comm::ScopedCounter whole(comm.accounting());
    {
      const comm::ScopedCounter scope(comm.accounting(), &forward[r]);
      std::vector<float> send(4), recv(4);
      const std::vector<std::int64_t> counts{2, 2};
      comm.all_to_all_v(send, counts, recv, counts);
      comm.all_to_all_v(send, counts, recv, counts);
      comm.accounting().host_sync();
    }
    comm.barrier();  // after the inner scope closed: only the outer one sees it
    outer[r] = whole.delta();
  });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(forward[r][comm::Collective::AllToAllV], (comm::Traffic{2, 16, 16}));  // 2 floats to the one peer, twice
    EXPECT_EQ(forward[r][comm::Collective::AllGather].calls, 0u);
    EXPECT_EQ(forward[r][comm::Collective::Barrier].calls, 0u);
    EXPECT_EQ(forward[r].host_syncs, 1u);
    EXPECT_EQ(
        outer[r], forward[r] + [] {
          comm::Counters barrier;
          barrier[comm::Collective::Barrier].calls = 1;
          return barrier;
        }());
  }
}

TEST(CommAccounting, SubGroupsCountOnTheRanksAccounting) {
  std::array<comm::Counters, 4> counted;
  std::array<bool, 4> shared{};
  comm::run_world(4, [&](comm::Communicator& comm) {
    const auto pair = comm.split(comm.rank() / 2, comm.rank());
    const comm::ScopedCounter scope(comm.accounting());
    std::vector<float> x(3);
    pair->all_reduce(x);
    counted[static_cast<std::size_t>(comm.rank())] = scope.delta();
    shared[static_cast<std::size_t>(comm.rank())] = &pair->accounting() == &comm.accounting();
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(shared[r]);
    // Pairs: 3 elements over 2 ranks, the pair's rank 0 owns [0,1) and rank 1 owns [1,3): (3 - own) + own.
    const std::uint64_t moved = 4 * 3;
    EXPECT_EQ(counted[r][comm::Collective::AllReduce], (comm::Traffic{1, moved, moved}));
  }
}

TEST(CommAccounting, FormatsOneLinePerKindCalled) {
  comm::Counters c;
  c[comm::Collective::AllToAllV] = {2, 96, 80};
  c[comm::Collective::Barrier] = {1, 0, 0};
  c.host_syncs = 3;
  c.route_builds = 1;
  EXPECT_EQ(comm::format_counters(c),
            "all_to_all_v: 2 calls, 96 B sent, 80 B received\nbarrier: 1 call, 0 B sent, 0 B received\nhost syncs: 3\n"
            "route builds: 1\n");
}

// ---- semantics ----

TEST(CommSemantics, Bf16SumAccumulatesInFp32AndRoundsOnce) {
  // Rank 0 holds 1 and ranks 1..7 hold 2^-8. In fp32 the sum is 1 + 7*2^-8 = 1 + 3.5*2^-7 exactly, a tie
  // between bf16 neighbours 1 + 3*2^-7 and 1 + 4*2^-7 that RNE sends to the even 1 + 4*2^-7. Rounding to
  // bf16 after every addition instead would give 1 (each 1 + 2^-8 is a tie that rounds back to 1).
  std::array<float, 8> got{};
  comm::run_world(8, [&](comm::Communicator& comm) {
    std::vector<bf16_t> x{bf16_t{float_to_bf16(comm.rank() == 0 ? 1.0f : 0x1p-8f)}};
    comm.all_reduce(x);
    got[static_cast<std::size_t>(comm.rank())] = bf16_to_float(x[0].bits);
  });
  for (const float x : got) EXPECT_EQ(x, 1.0f + 4 * 0x1p-7f);
}

TEST(CommSemantics, NoRankLeavesABarrierBeforeAllArrive) {
  std::atomic<int> arrived{0};
  std::array<int, 4> seen{};
  comm::run_world(4, [&](comm::Communicator& comm) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * comm.rank()));
    ++arrived;
    comm.barrier();
    seen[static_cast<std::size_t>(comm.rank())] = arrived.load();
  });
  for (const int s : seen) EXPECT_EQ(s, 4);
}

// ---- groups ----

TEST(CommGroups, TpCpGridPutsTpInnermost) {
  std::array<std::vector<int>, 8> tp, cp;
  std::array<double, 8> cp_sum{};
  comm::run_world(8, [&](comm::Communicator& world) {
    const auto grid = comm::make_tp_cp_grid(world, 2);
    const auto r = static_cast<std::size_t>(world.rank());
    tp[r] = grid.tp->world_ranks();
    cp[r] = grid.cp->world_ranks();
    std::vector<double> x{static_cast<double>(world.rank())};
    grid.cp->all_reduce(x);  // both CP groups at once
    cp_sum[r] = x[0];
  });
  for (int r = 0; r < 8; ++r) {
    const int tp_rank = r % 2, cp_rank = r / 2;
    EXPECT_EQ(tp[r], (std::vector<int>{2 * cp_rank, 2 * cp_rank + 1}));
    EXPECT_EQ(cp[r], (std::vector<int>{tp_rank, tp_rank + 2, tp_rank + 4, tp_rank + 6}));
    EXPECT_EQ(cp_sum[r], 4 * tp_rank + 12);  // tp_rank + (tp_rank+2) + (tp_rank+4) + (tp_rank+6)
  }
}

TEST(CommGroups, DynamicCpGroupsSplitOncePerSizeAndAreReused) {
  std::array<comm::Counters, 8> at_build, per_batch;
  std::array<std::vector<int>, 8> of_two, of_four;
  std::array<bool, 8> full_is_static{};
  comm::run_world(8, [&](comm::Communicator& world) {
    const auto r = static_cast<std::size_t>(world.rank());
    const std::array sizes{1, 2, 4, 8};
    comm::ScopedCounter build(world.accounting());
    const comm::DynamicCpGroups groups(world, sizes);
    at_build[r] = build.delta();
    const comm::ScopedCounter batches(world.accounting());
    for (const int size : {2, 4, 1, 2}) groups.group(size).barrier();  // micro-batches of varying CP size
    per_batch[r] = batches.delta();
    of_two[r] = groups.group(2).world_ranks();
    of_four[r] = groups.group(4).world_ranks();
    full_is_static[r] = &groups.group(8) == &world;
  });
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(at_build[r][comm::Collective::Split].calls, 3u);  // sizes 1, 2, 4; 8 is the static group
    EXPECT_EQ(per_batch[r][comm::Collective::Split].calls, 0u);
    EXPECT_EQ(per_batch[r][comm::Collective::Barrier].calls, 4u);
    EXPECT_EQ(of_two[r], (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    EXPECT_EQ(of_four[r], (std::vector<int>{r / 4 * 4, r / 4 * 4 + 1, r / 4 * 4 + 2, r / 4 * 4 + 3}));
    EXPECT_TRUE(full_is_static[r]);
  }
}

TEST(CommGroups, BadGroupGeometryFailsBeforeAnyCollective) {
  std::array<std::string, 3> messages;
  std::array<std::uint64_t, 2> calls{};
  comm::run_world(2, [&](comm::Communicator& world) {
    const auto r = static_cast<std::size_t>(world.rank());
    try {
      const std::array sizes{2, 3};
      comm::DynamicCpGroups groups(world, sizes);
    } catch (const ConfigError& e) {
      if (r == 0) messages[0] = e.what();
    }
    try {
      comm::make_tp_cp_grid(world, 4);
    } catch (const ConfigError& e) {
      if (r == 0) messages[1] = e.what();
    }
    calls[r] = world.accounting().counters().calls();
    const std::array sizes{1};
    const comm::DynamicCpGroups groups(world, sizes);
    try {
      groups.group(4);
    } catch (const ConfigError& e) {
      if (r == 0) messages[2] = e.what();
    }
  });
  EXPECT_EQ(messages[0], "dynamic CP size 3 does not divide the static CP size 2; use a divisor of 2");
  EXPECT_EQ(messages[1], "TP x CP grid: tp=4 does not divide the world size 2; use a tp that divides it");
  EXPECT_EQ(messages[2],
            "dynamic CP size 4 was not prepared; list it in the sizes given to DynamicCpGroups (static CP size 2)");
  EXPECT_EQ(calls[0], 0u);
  EXPECT_EQ(calls[1], 0u);
}

}  // namespace
}  // namespace gdnv
