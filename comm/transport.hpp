#pragma once
// What a transport (in-process, MPI, NCCL) implements against: the checked description of one
// collective (Call), the cross-rank agreement check every transport runs before moving data, and
// small helpers their messages share.
#include <chrono>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace gdnv::comm {

// One collective as the calling rank sees it, checked on that rank; what a transport executes.
// to[p]: elements this rank sends to peer p; from[r]: elements it receives from peer r. all_gather
// sends its whole send buffer to every peer; reduce_scatter sends block p to p and receives its own
// block from every rank; all_reduce sends and receives the whole buffer; broadcast: the root sends
// to everyone, the others receive from the root. Every pair must agree: to_r[p] == from_p[r].
struct Call {
  Collective kind = Collective::Barrier;
  DType dtype = DType::F32;
  const void* send = nullptr;
  void* recv = nullptr;
  int root = 0;
  std::vector<std::int64_t> to, from;

  std::int64_t send_offset(int p) const;  // start of block p in send (all_to_all_v, reduce_scatter)
  std::int64_t recv_offset(int r) const;  // start of block r in recv (all_to_all_v, all_gather)
};

// Cross-rank agreement, the same on every transport: `sender`'s view of its call toward `receiver`
// (kind, dtype, root, to[receiver]) against the receiver's own call. Returns the mismatch, or "".
struct CallHeader {
  std::uint8_t kind = 0;
  std::uint8_t dtype = 0;
  std::int32_t root = 0;
  std::int64_t count = 0;  // sender's to[receiver]
};
CallHeader header_toward(const Call& call, int receiver);
std::string mismatch(const Communicator& comm, const CallHeader& from_sender, int sender, const Call& receiver_call,
                     int receiver);

// Balanced partition of n elements over size ranks: rank p owns [p*n/size, (p+1)*n/size).
std::int64_t partition_begin(std::int64_t n, int size, int p);

// "rank 2" (with its world rank when it differs) when `world_rank` is a member of comm's group,
// else "world rank 5".
std::string name_world_rank(const Communicator& comm, int world_rank);
// "0.15 s".
std::string format_seconds(std::chrono::milliseconds t);
// what() of a captured exception ("unknown exception" when it is not a std::exception).
std::string message_of(const std::exception_ptr& e);

}  // namespace gdnv::comm
