#pragma once
// The in-process world's data path on device memory (comm/inprocess.hpp DataMover): every copy and sum
// of a collective is enqueued on the rank's Stream, after events its peers recorded once their send
// buffers were complete, and the rank's later work waits for its peers to have read. No collective
// blocks the host on the device; one GPU serves several ranks through their own streams.
#include <memory>

#include "comm/inprocess.hpp"
#include "gpu/stream.hpp"

namespace gdnv::gpu {

// Every rank of the world needs one (run_world rejects movers of mixed memory).
std::shared_ptr<comm::DataMover> make_stream_mover(std::shared_ptr<Stream> stream);

}  // namespace gdnv::gpu
