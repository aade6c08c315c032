#include "comm/communicator.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "comm/transport.hpp"

namespace gdnv::comm {
namespace {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::int64_t sum(std::span<const std::int64_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

bool is_reducible(DType t) { return t == DType::F64 || t == DType::F32 || t == DType::BF16; }

// Byte ranges [a, a+na) and [b, b+nb) intersect.
bool overlaps(const void* a, std::int64_t na, const void* b, std::int64_t nb) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return na > 0 && nb > 0 && pa < pb + static_cast<std::uintptr_t>(nb) && pb < pa + static_cast<std::uintptr_t>(na);
}

}  // namespace

std::int64_t Call::send_offset(int p) const { return std::accumulate(to.begin(), to.begin() + p, std::int64_t{0}); }
std::int64_t Call::recv_offset(int r) const { return std::accumulate(from.begin(), from.begin() + r, std::int64_t{0}); }

std::int64_t partition_begin(std::int64_t n, int size, int p) { return n * p / size; }

std::string name_world_rank(const Communicator& comm, int world_rank) {
  const auto& ranks = comm.world_ranks();
  const auto it = std::find(ranks.begin(), ranks.end(), world_rank);
  return it == ranks.end() ? "world rank " + std::to_string(world_rank)
                           : comm.who(static_cast<int>(it - ranks.begin()));
}

std::string format_seconds(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000.0 << " s";
  return s.str();
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

Communicator::Communicator(int rank, std::vector<int> world_ranks, std::shared_ptr<Accounting> accounting)
    : rank_(rank), world_ranks_(std::move(world_ranks)), accounting_(std::move(accounting)) {}

std::string Communicator::describe() const {
  return "group of " + std::to_string(size()) + (size() == 1 ? " rank " : " ranks ") + join_ranks(world_ranks_);
}

std::string Communicator::rank_label(int group_rank) const {
  const int w = world_ranks_.at(static_cast<std::size_t>(group_rank));
  return std::to_string(group_rank) + (w == group_rank ? "" : " (world rank " + std::to_string(w) + ")");
}

std::string Communicator::who(int group_rank) const { return "rank " + rank_label(group_rank); }

std::string Communicator::who(std::span<const int> group_ranks) const {
  std::string s = group_ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < group_ranks.size(); ++i) s += (i ? ", " : "") + rank_label(group_ranks[i]);
  return s;
}

std::string Communicator::where(const Call& call) const {
  return std::string(collective_name(call.kind)) + " on " + describe() + " (call #" + std::to_string(calls_) + ")";
}

std::vector<std::int64_t> Communicator::same_count(std::int64_t n) const {
  return std::vector<std::int64_t>(static_cast<std::size_t>(size()), n);
}

Call Communicator::start(Collective kind, ConstBuf send, MutBuf recv, std::vector<std::int64_t> to,
                         std::vector<std::int64_t> from, int root) {
  ++calls_;
  return Call{kind, send.dtype, send.data, recv.data, root, std::move(to), std::move(from)};
}

void Communicator::run(const Call& call) {
  execute(call);
  finish(call);
}

void Communicator::finish(const Call& call) {
  const auto esize = static_cast<std::uint64_t>(dtype_size(call.dtype));
  std::uint64_t sent = 0, recv = 0;
  if (call.kind == Collective::AllReduce) {
    // Reduce-scatter of the balanced partition, then all-gather of the summed parts.
    const std::int64_t n = call.to[0];
    const std::int64_t own = partition_begin(n, size(), rank_ + 1) - partition_begin(n, size(), rank_);
    sent = recv = static_cast<std::uint64_t>((n - own) + (size() - 1) * own) * esize;
  } else {
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      sent += static_cast<std::uint64_t>(call.to[p]) * esize;
      recv += static_cast<std::uint64_t>(call.from[p]) * esize;
    }
  }
  accounting_->record(call.kind, sent, recv);
}

namespace {

// Checks shared by every collective on the calling rank, before anything is sent.
struct LocalCheck {
  const Communicator& comm;
  std::string what;

  void require(bool ok, const std::string& message) const {
    if (!ok) throw CommError(what + ": " + message);
  }
  void buffer(const void* data, std::int64_t count, const char* name) const {
    require(count >= 0, std::string(name) + " has a negative count (" + std::to_string(count) + ")");
    require(data != nullptr || count == 0,
            std::string(name) + " is null but holds " + std::to_string(count) + " elements");
  }
  // Both buffers valid and of one dtype.
  void buffers(ConstBuf send, MutBuf recv) const {
    buffer(send.data, send.count, "send buffer");
    buffer(recv.data, recv.count, "recv buffer");
    same_dtype(send.dtype, recv.dtype);
  }
  void same_dtype(DType send, DType recv) const {
    require(send == recv,
            "send buffer is " + std::string(dtype_name(send)) + " but recv buffer is " + std::string(dtype_name(recv)));
  }
  void reducible(DType t) const {
    require(is_reducible(t), "sums are defined for F64, F32 and BF16, not " + std::string(dtype_name(t)));
  }
  void counts(std::span<const std::int64_t> c, const char* name) const {
    require(static_cast<int>(c.size()) == comm.size(), std::string(name) + " has " + std::to_string(c.size()) +
                                                           " entries for " + std::to_string(comm.size()) + " ranks");
    for (std::size_t p = 0; p < c.size(); ++p)
      require(c[p] >= 0, std::string(name) + "[" + std::to_string(p) + "] is negative (" + std::to_string(c[p]) + ")");
  }
  void total(std::span<const std::int64_t> c, const char* name, std::int64_t buffer_count, const char* buffer) const {
    require(sum(c) == buffer_count, std::string(name) + " sum to " + std::to_string(sum(c)) + " but the " + buffer +
                                        " holds " + std::to_string(buffer_count) + " elements");
  }
  void disjoint(ConstBuf send, MutBuf recv) const {
    const auto es = static_cast<std::int64_t>(dtype_size(send.dtype));
    require(!overlaps(send.data, send.count * es, recv.data, recv.count * es), "send and recv buffers overlap");
  }
};

}  // namespace

void Communicator::all_to_all_v(ConstBuf send, std::span<const std::int64_t> send_counts, MutBuf recv,
                                std::span<const std::int64_t> recv_counts) {
  const LocalCheck check{*this, "all_to_all_v on " + describe()};
  check.buffers(send, recv);
  check.counts(send_counts, "send_counts");
  check.counts(recv_counts, "recv_counts");
  check.total(send_counts, "send_counts", send.count, "send buffer");
  check.total(recv_counts, "recv_counts", recv.count, "recv buffer");
  check.disjoint(send, recv);
  run(start(Collective::AllToAllV, send, recv, {send_counts.begin(), send_counts.end()},
            {recv_counts.begin(), recv_counts.end()}));
}

void Communicator::all_gather(ConstBuf send, MutBuf recv) {
  const auto counts = same_count(send.count);
  const LocalCheck check{*this, "all_gather on " + describe()};
  check.require(recv.count == send.count * size(),
                "recv buffer holds " + std::to_string(recv.count) +
                    " elements, expected size * send count = " + std::to_string(send.count * size()));
  all_gather_v(send, recv, counts);
}

void Communicator::all_gather_v(ConstBuf send, MutBuf recv, std::span<const std::int64_t> recv_counts) {
  const LocalCheck check{*this, "all_gather on " + describe()};
  check.buffers(send, recv);
  check.counts(recv_counts, "recv_counts");
  check.total(recv_counts, "recv_counts", recv.count, "recv buffer");
  check.require(recv_counts[rank()] == send.count, "recv_counts[" + std::to_string(rank()) + "] is " +
                                                       std::to_string(recv_counts[rank()]) + " but this rank sends " +
                                                       std::to_string(send.count) + " elements");
  check.disjoint(send, recv);
  run(start(Collective::AllGather, send, recv, same_count(send.count), {recv_counts.begin(), recv_counts.end()}));
}

void Communicator::reduce_scatter(ConstBuf send, MutBuf recv) {
  const auto counts = same_count(recv.count);
  const LocalCheck check{*this, "reduce_scatter on " + describe()};
  check.require(send.count == recv.count * size(),
                "send buffer holds " + std::to_string(send.count) +
                    " elements, expected size * recv count = " + std::to_string(recv.count * size()));
  reduce_scatter_v(send, recv, counts);
}

void Communicator::reduce_scatter_v(ConstBuf send, MutBuf recv, std::span<const std::int64_t> counts) {
  const LocalCheck check{*this, "reduce_scatter on " + describe()};
  check.buffers(send, recv);
  check.reducible(send.dtype);
  check.counts(counts, "counts");
  check.total(counts, "counts", send.count, "send buffer");
  check.require(counts[rank()] == recv.count, "counts[" + std::to_string(rank()) + "] is " +
                                                  std::to_string(counts[rank()]) + " but the recv buffer holds " +
                                                  std::to_string(recv.count) + " elements");
  check.disjoint(send, recv);
  run(start(Collective::ReduceScatter, send, recv, {counts.begin(), counts.end()}, same_count(recv.count)));
}

void Communicator::all_reduce(ConstBuf send, MutBuf recv) {
  const LocalCheck check{*this, "all_reduce on " + describe()};
  check.buffers(send, recv);
  check.reducible(send.dtype);
  check.require(send.count == recv.count, "send buffer holds " + std::to_string(send.count) +
                                              " elements but recv buffer " + std::to_string(recv.count));
  if (send.data != recv.data) check.disjoint(send, recv);
  run(start(Collective::AllReduce, send, recv, same_count(send.count), same_count(send.count)));
}

void Communicator::broadcast(MutBuf buf, int root) {
  const LocalCheck check{*this, "broadcast on " + describe()};
  check.buffer(buf.data, buf.count, "buffer");
  check.require(root >= 0 && root < size(),
                "root " + std::to_string(root) + " is not a rank of the group (0.." + std::to_string(size() - 1) + ")");
  std::vector<std::int64_t> from = same_count(0);
  from[root] = buf.count;
  run(start(Collective::Broadcast, buf, buf, same_count(rank() == root ? buf.count : 0), std::move(from), root));
}

void Communicator::barrier() {
  const MutBuf none(nullptr, 0, DType::F32);
  run(start(Collective::Barrier, none, none, same_count(0), same_count(0)));
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  const MutBuf none(nullptr, 0, DType::F32);
  const Call call = start(Collective::Split, none, none, same_count(0), same_count(0));
  auto child = execute_split(call, color, key);
  finish(call);
  return child;
}

CallHeader header_toward(const Call& call, int receiver) {
  return {static_cast<std::uint8_t>(call.kind), static_cast<std::uint8_t>(call.dtype), call.root,
          call.to[static_cast<std::size_t>(receiver)]};
}

std::string mismatch(const Communicator& comm, const CallHeader& from_sender, int sender, const Call& receiver_call,
                     int receiver) {
  const auto kind = static_cast<Collective>(from_sender.kind);
  if (kind != receiver_call.kind)
    return "collective mismatch: " + comm.who(sender) + " called " + std::string(collective_name(kind)) + " while " +
           comm.who(receiver) + " called " + std::string(collective_name(receiver_call.kind));
  if (kind == Collective::Barrier || kind == Collective::Split) return "";
  const auto dtype = static_cast<DType>(from_sender.dtype);
  if (dtype != receiver_call.dtype)
    return "dtype mismatch: " + comm.who(sender) + " sends " + std::string(dtype_name(dtype)) + " but " +
           comm.who(receiver) + " expects " + std::string(dtype_name(receiver_call.dtype));
  if (from_sender.root != receiver_call.root)
    return "root mismatch: " + comm.who(sender) + " uses root " + std::to_string(from_sender.root) + " but " +
           comm.who(receiver) + " uses root " + std::to_string(receiver_call.root);
  const std::int64_t expected = receiver_call.from[static_cast<std::size_t>(sender)];
  if (from_sender.count != expected)
    return "count mismatch: " + comm.who(sender) + " sends " + std::to_string(from_sender.count) + " elements to " +
           comm.who(receiver) + ", which expects " + std::to_string(expected);
  return "";
}

}  // namespace gdnv::comm
