// The CUDA Backend: gpu/kernels.hpp on one CudaStream (kernels from gpu/cuda_kernels_*.cu, GEMMs through
// cuBLAS on the same stream), composed into a Backend by gpu/kernel_backend.cpp exactly as the host
// emulation is.
#include "gpu/cuda_backend.hpp"

#include <cstdlib>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.hpp"
#include "gpu/cuda_launch.hpp"
#include "gpu/cuda_stream.hpp"
#include "gpu/device.hpp"
#include "gpu/kernel_backend.hpp"
#include "gpu/nccl_comm.hpp"

namespace gdnv::gpu {
namespace {

void check_cublas(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error(what + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(std::shared_ptr<CudaStream> stream) : cuda_(std::move(stream)), stream_(cuda_) {
    check_cublas(cublasCreate(&blas_), "CUDA backend: cublasCreate");
    check_cublas(cublasSetStream(blas_, cuda_->handle()), "CUDA backend: cublasSetStream");
    // Our own workspace: otherwise cuBLAS may cudaMalloc (a device-wide sync) inside a layer.
    workspace_ = cuda_->alloc(kWorkspaceBytes);
    check_cublas(cublasSetWorkspace(blas_, workspace_.get(), kWorkspaceBytes), "CUDA backend: cublasSetWorkspace");
    // No TF32 or reduced-precision reductions: fp32 GEMMs must meet the fp32 gate (docs/DESIGN.md §4).
    check_cublas(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "CUDA backend: cublasSetMathMode");
  }
  ~CudaKernels() override { cublasDestroy(blas_); }
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  std::string platform() const override { return "cuda"; }
  const std::shared_ptr<Stream>& stream() const override { return stream_; }

#define GDNV_GPU_CUDA_OVERRIDE(name, Params, item)          \
  void name(const Params& p, std::int64_t items) override { \
    launch_##name(p, items, cuda_->handle());               \
    CudaStream::check_launch(#name);                        \
  }
  GDNV_GPU_KERNELS(GDNV_GPU_CUDA_OVERRIDE)
#undef GDNV_GPU_CUDA_OVERRIDE

  // Row-major y [N, out] = x [N, in] w^T is column-major y^T = w^T' x^T': gemm(T, N, out, N, in).
  void linear_forward(const LinearParams& p) override {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, p.out, p.N, p.in, p.w, p.in, p.x, p.in, p.y, act(p), p.out, act(p), "linear");
  }
  // dx^T [in, N] = w^T [in, out] dy^T: gemm(N, N, in, N, out); dw^T [in, out] = x^T dy: gemm(N, T, in, out, N).
  void linear_backward(const LinearParams& p) override {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, p.in, p.N, p.out, p.w, p.in, p.dy, p.out, p.y, act(p), p.in, act(p),
         "linear_backward dx");
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, p.in, p.out, p.N, p.x, p.in, p.dy, p.out, p.dw, CUDA_R_32F, p.in, act(p),
         "linear_backward dw");
  }

 private:
  static cudaDataType act(const LinearParams& p) { return p.bf16 ? CUDA_R_16BF : CUDA_R_32F; }

  // C [m, n] = A [m, k] B [k, n] (column-major, after the ops), fp32 compute; zero-sized products leave
  // C as allocated (zeros).
  void gemm(cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n, std::int64_t k, const void* A,
            std::int64_t lda, const void* B, std::int64_t ldb, void* C, cudaDataType c_type, std::int64_t ldc,
            cudaDataType ab_type, const char* what) {
    if (m == 0 || n == 0 || k == 0) return;
    const float one = 1, zero = 0;
    check_cublas(cublasGemmEx(blas_, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &one, A,
                              ab_type, static_cast<int>(lda), B, ab_type, static_cast<int>(ldb), &zero, C, c_type,
                              static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 what);
  }

  static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for sm_90

  std::shared_ptr<CudaStream> cuda_;
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<void> workspace_;
  cublasHandle_t blas_ = nullptr;
};

}  // namespace

std::string cuda_backend_unavailable_reason() { return cuda_unavailable_reason(); }

std::unique_ptr<cp::Backend> make_cuda_backend(DType storage) {
  if (const std::string reason = cuda_backend_unavailable_reason(); !reason.empty())
    throw Error("no CUDA device: " + reason);
  return make_kernel_backend(storage, std::make_unique<CudaKernels>(std::make_shared<CudaStream>()));
}

NcclRank make_nccl_rank(comm::Communicator& mpi, DType storage) {
  if (const std::string reason = cuda_backend_unavailable_reason(); !reason.empty())
    throw Error("no CUDA device: " + reason);
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const int device = (local ? std::atoi(local) : mpi.rank()) % cuda_device_count();
  auto nccl = NcclCommunicator::create(static_cast<comm::MpiCommunicator&>(mpi), device);
  const cudaStream_t stream = nccl->stream();
  NcclRank rank{std::move(nccl), nullptr};
  rank.backend = make_kernel_backend(storage, std::make_unique<CudaKernels>(std::make_shared<CudaStream>(stream)));
  return rank;
}

}  // namespace gdnv::gpu
