#include "gpu/cuda_stream.hpp"

#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "gpu/rank_sum_kernel.hpp"

namespace gdnv::gpu {
namespace {

void check_cuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw Error(what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

struct CudaEvent final : Stream::Event {
  CudaEvent() { check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"); }
  ~CudaEvent() override { cudaEventDestroy(event); }  // a pending event is released once it completes
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t event = nullptr;
};

}  // namespace

CudaStream::CudaStream() {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "CUDA stream: cudaStreamCreate");
  keep_freed_blocks();
}

CudaStream::CudaStream(cudaStream_t external) : stream_(external), owned_(false) { keep_freed_blocks(); }

// Freed blocks stay in the device's pool: returning them to the driver at each synchronize costs time,
// and a later cudaMallocAsync would take them back.
void CudaStream::keep_freed_blocks() {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaGetDevice(&device), "CUDA stream: cudaGetDevice");
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "CUDA stream: cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
             "CUDA stream: cudaMemPoolSetAttribute");
}

CudaStream::~CudaStream() {
  if (owned_) cudaStreamDestroy(stream_);
}

void CudaStream::check_launch(const char* what) {
  check_cuda(cudaGetLastError(), std::string(what) + ": kernel launch");
}

std::shared_ptr<void> CudaStream::alloc(std::size_t bytes) {
  void* p = nullptr;
  const std::size_t n = bytes == 0 ? 1 : bytes;
  check_cuda(cudaMallocAsync(&p, n, stream_), "CUDA stream: cudaMallocAsync of " + std::to_string(bytes) + " bytes");
  check_cuda(cudaMemsetAsync(p, 0, n, stream_), "CUDA stream: cudaMemsetAsync");
  return std::shared_ptr<void>(p, [self = shared_from_this()](void* q) { cudaFreeAsync(q, self->stream_); });
}

void CudaStream::upload(void* dst, const void* host_src, std::size_t bytes) {
  if (bytes) check_cuda(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "CUDA stream: upload");
}

void CudaStream::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes) check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "CUDA stream: copy");
}

void CudaStream::zero(void* dst, std::size_t bytes) {
  check_cuda(cudaMemsetAsync(dst, 0, bytes, stream_), "CUDA stream: cudaMemsetAsync");
}

void CudaStream::rank_sum(DType dtype, void* out, const void* blocks, std::int64_t stride, int n, std::int64_t count) {
  device_rank_sum(dtype, out, blocks, stride, n, count, stream_);
  check_launch("rank_sum");
}

std::shared_ptr<Stream::Event> CudaStream::make_event() { return std::make_shared<CudaEvent>(); }

void CudaStream::record(const std::shared_ptr<Event>& event) {
  check_cuda(cudaEventRecord(static_cast<CudaEvent&>(*event).event, stream_), "CUDA stream: cudaEventRecord");
}

void CudaStream::wait(const std::shared_ptr<Event>& event) {
  check_cuda(cudaStreamWaitEvent(stream_, static_cast<CudaEvent&>(*event).event, 0),
             "CUDA stream: cudaStreamWaitEvent");
}

void CudaStream::synchronize(const char* what) { check_cuda(cudaStreamSynchronize(stream_), what); }

void CudaStream::fetch(void* host_dst, const void* src, std::size_t bytes) {
  if (bytes) check_cuda(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "CUDA stream: fetch");
}

}  // namespace gdnv::gpu
