#pragma once
// Serial models of every collective, and the properties the in-process (comm_properties) and MPI
// (comm_mpi_properties) suites share. Each check runs on one rank: it builds that rank's inputs from
// (seed, rank, index), runs the collective into a NaN-filled buffer, and compares every output byte
// with the serial model, which rebuilds every other rank's inputs without communication. It also
// checks the call's accounting. A check returns "" or what went wrong on this rank.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "core/half.hpp"
#include "core/rng.hpp"

namespace gdnv::model {

using Counts = std::vector<std::int64_t>;

// Rank r's element i: a normal draw stored in `dtype`.
inline Tensor values(DType dtype, std::uint64_t seed, int rank, std::int64_t count) {
  const Rng rng(seed, 1000 + static_cast<std::uint64_t>(rank));
  std::vector<double> v(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) v[static_cast<std::size_t>(i)] = rng.normal(static_cast<std::uint64_t>(i));
  return Tensor::from_f64(v, {count}, dtype);
}

inline Tensor nans(DType dtype, std::int64_t count) {
  return Tensor::from_f64(
      std::vector<double>(static_cast<std::size_t>(count), std::numeric_limits<double>::quiet_NaN()), {count}, dtype);
}

inline std::int64_t total(const Counts& c) { return std::accumulate(c.begin(), c.end(), std::int64_t{0}); }

// Elements [begin, begin + count) of `src` copied to `dst` at `at`.
inline void copy_elements(Tensor& dst, std::int64_t at, const Tensor& src, std::int64_t begin, std::int64_t count) {
  const auto es = static_cast<std::int64_t>(dtype_size(src.dtype()));
  if (count > 0) std::memcpy(dst.bytes() + at * es, src.bytes() + begin * es, static_cast<std::size_t>(count * es));
}

// The definition of a sum over ranks: element i = ((x_0[i] + x_1[i]) + x_2[i]) + ... in rank order,
// accumulated in fp64 for F64 and fp32 for F32 and BF16, rounded once (RNE) to the dtype.
inline Tensor rank_ordered_sum(const std::vector<Tensor>& xs, std::int64_t begin, std::int64_t count) {
  const DType dtype = xs.at(0).dtype();
  Tensor out(dtype, {count});
  for (std::int64_t i = 0; i < count; ++i) {
    if (dtype == DType::F64) {
      double acc = xs[0].data<double>()[begin + i];
      for (std::size_t r = 1; r < xs.size(); ++r) acc += xs[r].data<double>()[begin + i];
      out.data<double>()[i] = acc;
      continue;
    }
    float acc = static_cast<float>(xs[0].get(begin + i));  // exact: F32 and BF16 values are floats
    for (std::size_t r = 1; r < xs.size(); ++r) acc += static_cast<float>(xs[r].get(begin + i));
    if (dtype == DType::F32) out.data<float>()[i] = acc;
    else out.data<bf16_t>()[i] = bf16_t{float_to_bf16(acc)};
  }
  return out;
}

inline std::string exact(double x) {
  std::ostringstream s;
  s << std::hexfloat << x;
  return s.str();
}

// Bitwise comparison of a whole output with its model. The model must not be constant (a guard
// against a degenerate generator making the comparison trivial).
inline std::string compare(const comm::Communicator& comm, const std::string& what, const Tensor& got,
                           const Tensor& want) {
  const std::string at = "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ", " + what;
  if (want.numel() >= 2) {
    const auto v = want.to_f64();
    if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; }))
      return at + ": the model output is constant";
  }
  if (got.bitwise_equal(want)) return "";
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const auto es = static_cast<std::int64_t>(dtype_size(want.dtype()));
    if (std::memcmp(got.bytes() + i * es, want.bytes() + i * es, static_cast<std::size_t>(es)) != 0)
      return at + ": element " + std::to_string(i) + " of " + std::to_string(want.numel()) + " is " +
             exact(got.get(i)) + ", the serial model gives " + exact(want.get(i));
  }
  return at + ": output shape differs from the model";
}

// The call was exactly one collective of `kind` moving the given bytes.
inline std::string check_traffic(const comm::Communicator& comm, const std::string& what, const comm::Counters& delta,
                                 comm::Collective kind, std::uint64_t sent, std::uint64_t recv) {
  const comm::Traffic want{1, sent, recv};
  if (delta[kind] == want && delta.calls() == 1) return "";
  return "rank " + std::to_string(comm.rank()) + ", " + what + ": accounting is\n" + comm::format_counters(delta) +
         "expected 1 call, " + std::to_string(sent) + " B sent, " + std::to_string(recv) + " B received";
}

inline std::uint64_t bytes(DType dtype, std::int64_t n) { return static_cast<std::uint64_t>(n) * dtype_size(dtype); }

// c[s][d]: elements rank s sends to rank d.
inline std::string check_all_to_all_v(comm::Communicator& comm, DType dtype, const std::vector<Counts>& c,
                                      std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const auto send_of = [&](int s) { return values(dtype, seed, s, total(c[s])); };
  Counts recv_counts;
  for (int s = 0; s < n; ++s) recv_counts.push_back(c[s][me]);
  const Tensor send = send_of(me);
  Tensor got = nans(dtype, total(recv_counts));
  const comm::ScopedCounter scope(comm.accounting());
  comm.all_to_all_v(send, c[me], got, recv_counts);
  const comm::Counters delta = scope.delta();

  Tensor want(dtype, {total(recv_counts)});
  std::int64_t at = 0;
  for (int s = 0; s < n; ++s) {
    const std::int64_t begin = std::accumulate(c[s].begin(), c[s].begin() + me, std::int64_t{0});
    copy_elements(want, at, send_of(s), begin, c[s][me]);
    at += c[s][me];
  }
  const std::int64_t others_in = total(recv_counts) - c[me][me], others_out = total(c[me]) - c[me][me];
  return compare(comm, "all_to_all_v", got, want) + check_traffic(comm, "all_to_all_v", delta,
                                                                  comm::Collective::AllToAllV, bytes(dtype, others_out),
                                                                  bytes(dtype, others_in));
}

// counts[r]: elements rank r contributes; `equal` uses the equal-size all_gather (counts all equal).
inline std::string check_all_gather(comm::Communicator& comm, DType dtype, const Counts& counts, bool equal,
                                    std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const Tensor send = values(dtype, seed, me, counts[me]);
  Tensor got = nans(dtype, total(counts));
  const comm::ScopedCounter scope(comm.accounting());
  if (equal) comm.all_gather(send, got);
  else comm.all_gather_v(send, got, counts);
  const comm::Counters delta = scope.delta();

  Tensor want(dtype, {total(counts)});
  std::int64_t at = 0;
  for (int r = 0; r < n; ++r) {
    copy_elements(want, at, values(dtype, seed, r, counts[r]), 0, counts[r]);
    at += counts[r];
  }
  return compare(comm, "all_gather", got, want) + check_traffic(comm, "all_gather", delta, comm::Collective::AllGather,
                                                                bytes(dtype, (n - 1) * counts[me]),
                                                                bytes(dtype, total(counts) - counts[me]));
}

// counts[p]: size of block p; `equal` uses the equal-block reduce_scatter (counts all equal).
inline std::string check_reduce_scatter(comm::Communicator& comm, DType dtype, const Counts& counts, bool equal,
                                        std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const Tensor send = values(dtype, seed, me, total(counts));
  Tensor got = nans(dtype, counts[me]);
  const comm::ScopedCounter scope(comm.accounting());
  if (equal) comm.reduce_scatter(send, got);
  else comm.reduce_scatter_v(send, got, counts);
  const comm::Counters delta = scope.delta();

  std::vector<Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(values(dtype, seed, r, total(counts)));
  const std::int64_t begin = std::accumulate(counts.begin(), counts.begin() + me, std::int64_t{0});
  return compare(comm, "reduce_scatter", got, rank_ordered_sum(all, begin, counts[me])) +
         check_traffic(comm, "reduce_scatter", delta, comm::Collective::ReduceScatter,
                       bytes(dtype, total(counts) - counts[me]), bytes(dtype, (n - 1) * counts[me]));
}

inline std::string check_all_reduce(comm::Communicator& comm, DType dtype, std::int64_t count, bool in_place,
                                    std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const Tensor send = values(dtype, seed, me, count);
  Tensor got = in_place ? send : nans(dtype, count);
  const comm::ScopedCounter scope(comm.accounting());
  if (in_place) comm.all_reduce(got);
  else comm.all_reduce(send, got);
  const comm::Counters delta = scope.delta();

  std::vector<Tensor> all;
  for (int r = 0; r < n; ++r) all.push_back(values(dtype, seed, r, count));
  // Accounted as reduce-scatter + all-gather of the balanced partition: this rank owns `own` elements.
  const std::int64_t own = (me + 1) * count / n - me * count / n;
  const std::uint64_t moved = bytes(dtype, (count - own) + (n - 1) * own);
  return compare(comm, in_place ? "in-place all_reduce" : "all_reduce", got, rank_ordered_sum(all, 0, count)) +
         check_traffic(comm, "all_reduce", delta, comm::Collective::AllReduce, moved, moved);
}

inline std::string check_broadcast(comm::Communicator& comm, DType dtype, std::int64_t count, int root,
                                   std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const Tensor want = values(dtype, seed, root, count);
  Tensor got = me == root ? want : nans(dtype, count);
  const comm::ScopedCounter scope(comm.accounting());
  comm.broadcast(got, root);
  const comm::Counters delta = scope.delta();
  return compare(comm, "broadcast", got, want) + check_traffic(comm, "broadcast", delta, comm::Collective::Broadcast,
                                                               bytes(dtype, me == root ? (n - 1) * count : 0),
                                                               bytes(dtype, me == root ? 0 : count));
}

// split(colors[r], keys[r]): membership and order against the model, then every sub-group at once
// gathers its members' parent ranks and sums their values (concurrent groups must not interfere).
inline std::string check_split(comm::Communicator& comm, const std::vector<int>& colors, const std::vector<int>& keys,
                               std::uint64_t seed) {
  const int n = comm.size(), me = comm.rank();
  const std::string at = "rank " + std::to_string(me) + " of " + std::to_string(n) + ", split: ";
  const auto sub = comm.split(colors[me], keys[me]);
  if (colors[me] < 0) return sub ? at + "a negative color must give no group" : "";
  std::vector<int> members;  // parent ranks of my color, ordered by (key, rank)
  for (int r = 0; r < n; ++r)
    if (colors[r] == colors[me]) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  const int want_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  std::vector<int> want_world;
  for (int r : members) want_world.push_back(comm.world_ranks()[static_cast<std::size_t>(r)]);
  if (!sub || sub->size() != static_cast<int>(members.size()) || sub->rank() != want_rank ||
      sub->world_ranks() != want_world)
    return at + "the sub-group's size, rank or members differ from the model";

  std::vector<std::int64_t> parent{me}, gathered(members.size(), -1);
  sub->all_gather(parent, gathered);
  if (!std::equal(gathered.begin(), gathered.end(), members.begin())) return at + "all_gather order differs";
  const Tensor send = values(DType::F32, seed, me, 5);
  Tensor got = nans(DType::F32, 5);
  sub->all_reduce(send, got);
  std::vector<Tensor> all;
  for (int r : members) all.push_back(values(DType::F32, seed, r, 5));
  return compare(*sub, "all_reduce in a split group", got, rank_ordered_sum(all, 0, 5));
}

// Runs `check` on every rank of a group of n ranks; returns what failed, or "".
using Check = std::function<std::string(comm::Communicator&)>;
using Runner = std::function<std::string(int n, const Check& check)>;

inline rc::Gen<DType> gen_dtype() { return rc::gen::element(DType::F64, DType::F32, DType::BF16); }
// Per-peer counts, zero about a third of the time.
inline rc::Gen<Counts> gen_counts(int n) {
  return rc::gen::container<Counts>(static_cast<std::size_t>(n), rc::gen::element<std::int64_t>(0, 0, 1, 2, 3, 5, 8));
}
// Per-rank counts: all equal (for the equal-size collectives) or each drawn on its own.
inline Counts draw_counts(int n, bool equal) {
  return equal ? Counts(static_cast<std::size_t>(n), *rc::gen::inRange<std::int64_t>(0, 9)) : *gen_counts(n);
}
inline rc::Gen<std::uint64_t> gen_seed() { return rc::gen::arbitrary<std::uint64_t>(); }

inline void require_no_error(const std::string& error) {
  if (!error.empty()) RC_FAIL(error);
}

// The property bodies, shared by every suite; max_n is the largest group the runner can make.
inline void all_to_all_v_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const DType dtype = *gen_dtype();
  const auto c = *rc::gen::container<std::vector<Counts>>(static_cast<std::size_t>(n), gen_counts(n));
  const auto seed = *gen_seed();
  require_no_error(run(n, [&](comm::Communicator& comm) { return check_all_to_all_v(comm, dtype, c, seed); }));
}

inline void all_gather_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const DType dtype = *gen_dtype();
  const bool equal = *rc::gen::arbitrary<bool>();
  const Counts counts = draw_counts(n, equal);
  const auto seed = *gen_seed();
  require_no_error(
      run(n, [&](comm::Communicator& comm) { return check_all_gather(comm, dtype, counts, equal, seed); }));
}

inline void reduce_scatter_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const DType dtype = *gen_dtype();
  const bool equal = *rc::gen::arbitrary<bool>();
  const Counts counts = draw_counts(n, equal);
  const auto seed = *gen_seed();
  require_no_error(
      run(n, [&](comm::Communicator& comm) { return check_reduce_scatter(comm, dtype, counts, equal, seed); }));
}

inline void all_reduce_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const DType dtype = *gen_dtype();
  const auto count = *rc::gen::inRange<std::int64_t>(0, 40);
  const bool in_place = *rc::gen::arbitrary<bool>();
  const auto seed = *gen_seed();
  require_no_error(
      run(n, [&](comm::Communicator& comm) { return check_all_reduce(comm, dtype, count, in_place, seed); }));
}

inline void broadcast_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const DType dtype = *gen_dtype();
  const auto count = *rc::gen::inRange<std::int64_t>(0, 20);
  const int root = *rc::gen::inRange(0, n);
  const auto seed = *gen_seed();
  require_no_error(run(n, [&](comm::Communicator& comm) { return check_broadcast(comm, dtype, count, root, seed); }));
}

inline void split_matches_model(const Runner& run, int max_n) {
  const int n = *rc::gen::inRange(1, max_n + 1);
  const auto colors = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n), rc::gen::inRange(-1, 3));
  const auto keys = *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(n), rc::gen::inRange(0, 3));
  const auto seed = *gen_seed();
  require_no_error(run(n, [&](comm::Communicator& comm) { return check_split(comm, colors, keys, seed); }));
}

}  // namespace gdnv::model
