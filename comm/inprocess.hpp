#pragma once
// The in-process world: n ranks as threads of one process. Collectives are real rendezvous: each
// rank posts its call, waits for every member's, then copies (or sums) straight out of its peers'
// buffers; no rank leaves a collective while a peer may still read its buffers.
#include <chrono>
#include <functional>

#include "comm/communicator.hpp"

namespace gdnv {

struct WorldOptions {
  // How long a collective waits for the other ranks before it fails naming the ones missing.
  std::chrono::milliseconds timeout{60'000};
};

// Runs fn on n ranks, each a thread with its own Communicator over the whole world (Memory::Host),
// and returns when every rank has finished. If a rank throws, every peer's pending and later
// collective throws CommError carrying that rank's message (no hang), and run_world rethrows the
// first failing rank's exception once all threads have joined. A collective also fails at once when
// a rank it waits for has already returned from fn.
void run_world(int n, const std::function<void(Communicator&)>& fn, const WorldOptions& options = {});

}  // namespace gdnv
