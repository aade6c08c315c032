#pragma once
// The in-process world: n ranks as threads of one process. Collectives are real rendezvous: each
// rank posts its call, waits for every member's, then copies (or sums) straight out of its peers'
// buffers; no rank leaves a collective while a peer may still read its buffers.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "comm/communicator.hpp"

namespace gdnv::comm {

// How one rank of the in-process world moves collective data. The default (host_data_mover) copies
// host memory on the calling thread. A device mover (gpu/stream_mover.hpp) enqueues the same copies
// and sums on the rank's stream and orders them against its peers' streams, so no collective blocks
// the host on device work. In every collective each rank calls, in this order:
//   ready()                 its send buffer is complete (after the work that produced it)
//   -- every member has posted its call --
//   after_ready(peers)      its reads may start: the peers' send buffers are complete
//   copy / sum ...          its reads of the peers' send buffers, its writes of its recv buffer
//   reads_done()            it has read everything it reads of the peers
//   -- every member has called reads_done() --
//   after_reads(peers)      its later work may overwrite or free what the peers read
// `peers` are the group's movers in group-rank order, this rank's own included.
class DataMover {
 public:
  virtual ~DataMover() = default;
  virtual Memory memory() const = 0;
  // Scratch of `bytes` where the data lives, alive while the returned handle is.
  virtual std::shared_ptr<void> scratch(std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // out[i] = rank-ordered sum of inputs[r][i] (comm/rank_sum.hpp).
  virtual void sum(DType dtype, void* out, std::span<const void* const> inputs, std::int64_t count) = 0;
  virtual void ready() {}
  virtual void after_ready(std::span<DataMover* const> /*peers*/) {}
  virtual void reads_done() {}
  virtual void after_reads(std::span<DataMover* const> /*peers*/) {}
};

// memcpy and comm/rank_sum.hpp on host memory.
std::shared_ptr<DataMover> host_data_mover();

struct WorldOptions {
  // Implicit, so a call can pass just the timeout: run_world(n, fn, {20s}).
  WorldOptions(std::chrono::milliseconds t = std::chrono::milliseconds{60'000}) : timeout(t) {}  // NOLINT

  // How long a collective waits for the other ranks before it fails naming the ones missing.
  std::chrono::milliseconds timeout;
  // Each world rank's mover (and with it the world's Memory); empty, or a null entry: host_data_mover().
  std::vector<std::shared_ptr<DataMover>> movers;
};

// Runs fn on n ranks, each a thread with its own Communicator over the whole world (the movers' Memory),
// and returns when every rank has finished. If a rank throws, every peer's pending and later
// collective throws CommError carrying that rank's message (no hang), and run_world rethrows the
// first failing rank's exception once all threads have joined. A collective also fails at once when
// a rank it waits for has already returned from fn.
void run_world(int n, const std::function<void(Communicator&)>& fn, const WorldOptions& options = {});

}  // namespace gdnv::comm
