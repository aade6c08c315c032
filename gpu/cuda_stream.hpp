#pragma once
// The CUDA Stream: device memory from the stream-ordered allocator (cudaMallocAsync / cudaFreeAsync, so
// neither allocating nor freeing blocks the host), copies and the rank-ordered sum enqueued on one
// non-blocking CUDA stream, events without timing.
#include <cuda_runtime_api.h>

#include <memory>

#include "gpu/stream.hpp"

namespace gdnv::gpu {

// Owned through a shared_ptr: every buffer keeps its stream alive to free in stream order.
class CudaStream final : public Stream, public std::enable_shared_from_this<CudaStream> {
 public:
  // A new stream on the current device; throws Error naming the failed call.
  CudaStream();
  // Work enqueued on `external`, which stays its owner's (e.g. the NCCL communicator's stream).
  explicit CudaStream(cudaStream_t external);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t handle() const { return stream_; }
  // Throws Error "<what>: <CUDA error>" when the last launch on this thread failed.
  static void check_launch(const char* what);

  comm::Memory memory() const override { return comm::Memory::Device; }
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
  void keep_freed_blocks();

  cudaStream_t stream_ = nullptr;
  bool owned_ = true;
};

}  // namespace gdnv::gpu
