#pragma once
// A queue of device work that runs in order, apart from the host: a CUDA stream (gpu/cuda_stream.cpp)
// or its host emulation (make_host_stream), whose worker thread runs the queue asynchronously as a GPU
// would, so ctest exercises the same ordering the device needs. One rank's kernels and its in-process
// collectives share one Stream; events order it after work enqueued on another rank's. Only
// synchronize() blocks the host on the queue.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "comm/communicator.hpp"

namespace gdnv::gpu {

class Stream {
 public:
  class Event {
   public:
    virtual ~Event() = default;
  };

  virtual ~Stream() = default;
  virtual comm::Memory memory() const = 0;
  // Zero-filled storage, freed in stream order with the last handle: work enqueued before the release
  // may still use it.
  virtual std::shared_ptr<void> alloc(std::size_t bytes) = 0;
  // Enqueued; host_src may be reused as soon as this returns.
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  // Enqueued copy between two buffers of this memory (the stream's own or a peer's on the same device).
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void zero(void* dst, std::size_t bytes) = 0;
  // Enqueued: out[i] = rank-ordered sum of blocks[r * stride + i] over r < n, i < count
  // (comm/rank_sum.hpp); dtype F64, F32 or BF16.
  virtual void rank_sum(DType dtype, void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count) = 0;
  virtual std::shared_ptr<Event> make_event() = 0;
  // Marks the point after everything enqueued so far.
  virtual void record(const std::shared_ptr<Event>& event) = 0;
  // Later work on this stream waits for the point `event` marked when wait was called
  // (cudaStreamWaitEvent's semantics: a later record does not move it).
  virtual void wait(const std::shared_ptr<Event>& event) = 0;
  // Enqueued copy to host memory: host_dst holds the bytes after the next synchronize().
  virtual void fetch(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Blocks the host until everything enqueued has run; throws Error "<what>: ..." for a failure.
  virtual void synchronize(const char* what) = 0;
};

// The emulation's stream: host memory, a worker thread running the queue in order.
class HostStream final : public Stream {
 public:
  HostStream();
  ~HostStream() override;
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Runs task on the worker after everything enqueued before it.
  void enqueue(std::function<void()> task);

  comm::Memory memory() const override { return comm::Memory::Host; }
  std::shared_ptr<void> alloc(std::size_t bytes) override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void rank_sum(DType dtype, void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count) override;
  std::shared_ptr<Event> make_event() override;
  void record(const std::shared_ptr<Event>& event) override;
  void wait(const std::shared_ptr<Event>& event) override;
  void fetch(void* host_dst, const void* src, std::size_t bytes) override;
  void synchronize(const char* what) override;

 private:
  struct Queue;
  std::shared_ptr<Queue> queue_;  // shared with the storage deleters, which free in stream order
};

}  // namespace gdnv::gpu
