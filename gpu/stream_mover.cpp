// Per collective each rank records `ready` after the work that produced its send buffer; once all have
// posted, it waits for its peers' `ready`, enqueues its reads, records `done`; once all have recorded,
// it waits for its peers' `done`, so its later writes and stream-ordered frees cannot overtake a peer's
// read. Events are reused across collectives: a wait takes the point recorded when it is enqueued,
// and the world's rendezvous puts every record of a round before the peers' waits of that round.
#include "gpu/stream_mover.hpp"

#include <vector>

namespace gdnv::gpu {
namespace {

class StreamMover final : public comm::DataMover {
 public:
  explicit StreamMover(std::shared_ptr<Stream> stream)
      : s_(std::move(stream)), ready_(s_->make_event()), done_(s_->make_event()) {}

  comm::Memory memory() const override { return s_->memory(); }
  std::shared_ptr<void> scratch(std::size_t bytes) override { return s_->alloc(bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override { s_->copy(dst, src, bytes); }

  // The contributions side by side in scratch, then one rank-ordered sum.
  void sum(DType dtype, void* out, std::span<const void* const> inputs, std::int64_t count) override {
    if (count == 0) return;
    const auto bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
    const std::shared_ptr<void> blocks = s_->alloc(inputs.size() * bytes);
    for (std::size_t r = 0; r < inputs.size(); ++r)
      s_->copy(static_cast<std::byte*>(blocks.get()) + r * bytes, inputs[r], bytes);
    s_->rank_sum(dtype, out, blocks.get(), count, static_cast<int>(inputs.size()), count);
  }

  void ready() override { s_->record(ready_); }
  void after_ready(std::span<comm::DataMover* const> peers) override {
    for (comm::DataMover* p : peers)
      if (p != this) s_->wait(peer(p).ready_);
  }
  void reads_done() override { s_->record(done_); }
  void after_reads(std::span<comm::DataMover* const> peers) override {
    for (comm::DataMover* p : peers)
      if (p != this) s_->wait(peer(p).done_);
  }

 private:
  // run_world gives every rank of a device world a mover of the same memory: a stream mover.
  static StreamMover& peer(comm::DataMover* p) { return *static_cast<StreamMover*>(p); }

  std::shared_ptr<Stream> s_;
  std::shared_ptr<Stream::Event> ready_, done_;
};

}  // namespace

std::shared_ptr<comm::DataMover> make_stream_mover(std::shared_ptr<Stream> stream) {
  return std::make_shared<StreamMover>(std::move(stream));
}

}  // namespace gdnv::gpu
