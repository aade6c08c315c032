#pragma once
// One interface over a group of ranks for the collectives the CP modes need, so each mode is written
// once and runs on in-process threads (comm/inprocess.hpp), MPI processes (comm/mpi.hpp) or NCCL on
// GPUs (gpu/nccl_comm.hpp). Semantics shared by every transport:
// - Buffers are typed views (pointer, element count, DType): host memory, or device memory where
//   memory() is Memory::Device.
// - Every rank of a group calls the same collectives in the same order. Arguments are checked on the
//   calling rank first (sizes, counts, root), then across ranks before any data moves: a different
//   collective, dtype or root, or a count a sender and a receiver disagree on, throws CommError.
// - Sums are deterministic: element i is ((x_0 + x_1) + x_2) + ... in group-rank order, accumulated
//   in fp64 (F64) or fp32 (F32, BF16) and rounded once to the storage dtype (comm/rank_sum.hpp), so
//   every transport and every thread timing gives the same bits.
// - A rank that fails makes its peers' pending and later collectives throw CommError carrying its
//   message; a collective that waits longer than the world's timeout throws, naming the collective
//   and the ranks that did not arrive.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/accounting.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

namespace gdnv::comm {

// A collective that cannot complete: bad arguments, a mismatch between ranks, a failed peer, a timeout.
struct CommError : Error {
  using Error::Error;
};

enum class Memory : std::uint8_t { Host, Device };

// `count` contiguous elements of `dtype` at `data`.
struct MutBuf {
  void* data = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::F32;

  MutBuf(void* d, std::int64_t n, DType t) : data(d), count(n), dtype(t) {}
  template <class T>
  MutBuf(T* d, std::int64_t n) : MutBuf(static_cast<void*>(d), n, dtype_of<T>()) {}
  template <class T>
  MutBuf(std::span<T> s) : MutBuf(s.data(), static_cast<std::int64_t>(s.size())) {}
  template <class T>
  MutBuf(std::vector<T>& v) : MutBuf(v.data(), static_cast<std::int64_t>(v.size())) {}
  MutBuf(Tensor& t) : MutBuf(t.bytes(), t.numel(), t.dtype()) {}
};

struct ConstBuf {
  const void* data = nullptr;
  std::int64_t count = 0;
  DType dtype = DType::F32;

  ConstBuf(const void* d, std::int64_t n, DType t) : data(d), count(n), dtype(t) {}
  template <class T>
  ConstBuf(const T* d, std::int64_t n) : ConstBuf(static_cast<const void*>(d), n, dtype_of<T>()) {}
  template <class T>
  ConstBuf(std::span<T> s) : ConstBuf(s.data(), static_cast<std::int64_t>(s.size())) {}
  template <class T>
  ConstBuf(const std::vector<T>& v) : ConstBuf(v.data(), static_cast<std::int64_t>(v.size())) {}
  ConstBuf(const Tensor& t) : ConstBuf(t.bytes(), t.numel(), t.dtype()) {}
  ConstBuf(const MutBuf& b) : ConstBuf(b.data, b.count, b.dtype) {}
};

struct Call;  // comm/transport.hpp

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(world_ranks_.size()); }
  // World rank of each member, in group-rank order.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  virtual Memory memory() const = 0;
  // This rank's accounting, shared with every group split from the same world (and with a transport
  // layered on this one, e.g. NCCL over MPI).
  Accounting& accounting() const { return *accounting_; }
  const std::shared_ptr<Accounting>& shared_accounting() const { return accounting_; }
  // "group of 2 ranks [4, 6]" (the members' world ranks), used in messages.
  std::string describe() const;
  // "rank 1", or "rank 1 (world rank 6)" when the two differ; "ranks 1, 3" for several.
  std::string who(int group_rank) const;
  std::string who(std::span<const int> group_ranks) const;

  // send holds one block per peer, back to back in rank order (send_counts[p] elements for peer p);
  // recv gets recv_counts[r] elements from each peer r, back to back in rank order.
  void all_to_all_v(ConstBuf send, std::span<const std::int64_t> send_counts, MutBuf recv,
                    std::span<const std::int64_t> recv_counts);
  // Every rank's send (the same count on all ranks) concatenated in rank order: recv.count ==
  // size() * send.count.
  void all_gather(ConstBuf send, MutBuf recv);
  // Variable sizes: rank r contributes recv_counts[r] elements (recv_counts[rank()] == send.count).
  void all_gather_v(ConstBuf send, MutBuf recv, std::span<const std::int64_t> recv_counts);
  // recv = sum over ranks of block rank() of send, equal blocks: send.count == size() * recv.count.
  void reduce_scatter(ConstBuf send, MutBuf recv);
  // Variable blocks: block p of send has counts[p] elements; recv.count == counts[rank()].
  void reduce_scatter_v(ConstBuf send, MutBuf recv, std::span<const std::int64_t> counts);
  // Elementwise sum over ranks; recv may be send itself.
  void all_reduce(ConstBuf send, MutBuf recv);
  void all_reduce(MutBuf data) { all_reduce(data, data); }
  // The root's buf to every rank.
  void broadcast(MutBuf buf, int root);
  void barrier();
  // Ranks with the same color form a new group ordered by (key, rank); a negative color joins no
  // group and gets nullptr. The new group shares this rank's Accounting.
  std::unique_ptr<Communicator> split(int color, int key);

 protected:
  Communicator(int rank, std::vector<int> world_ranks, std::shared_ptr<Accounting> accounting);
  // "all_gather on group of 4 ranks [0, 1, 2, 3] (call #2)": the prefix of every message about a call.
  std::string where(const Call& call) const;

  // Runs a call that passed the local checks; throws CommError on cross-rank failures.
  virtual void execute(const Call& call) = 0;
  virtual std::unique_ptr<Communicator> execute_split(const Call& call, int color, int key) = 0;

 private:
  std::string rank_label(int group_rank) const;
  std::vector<std::int64_t> same_count(std::int64_t n) const;  // n for every rank
  // A call that passed the local checks; to/from as documented on Call.
  Call start(Collective kind, ConstBuf send, MutBuf recv, std::vector<std::int64_t> to, std::vector<std::int64_t> from,
             int root = 0);
  void run(const Call& call);  // execute, then account
  void finish(const Call& call);

  int rank_;
  std::vector<int> world_ranks_;
  std::shared_ptr<Accounting> accounting_;
  std::uint64_t calls_ = 0;
};

}  // namespace gdnv::comm
