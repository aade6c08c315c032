// The host emulation of the kernels: host memory, each launch a parallel loop over its items calling
// the same item functions the CUDA kernels call. Items write disjoint outputs, so any thread count
// gives the same bits (and a race between items would show up as a test failure here too).
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/parallel.hpp"
#include "gpu/kernels.hpp"
#include "gpu/math_conv.hpp"
#include "gpu/math_data.hpp"
#include "gpu/math_gates.hpp"
#include "gpu/math_gdr.hpp"
#include "gpu/math_linear.hpp"
#include "gpu/math_norm.hpp"

namespace gdnv::gpu {
namespace {

class HostKernels final : public Kernels {
 public:
  std::string platform() const override { return "emu"; }
  Memory memory() const override { return Memory::Host; }

  std::shared_ptr<void> alloc(std::size_t bytes) override {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (!p) throw Error("emulated backend: cannot allocate " + std::to_string(bytes) + " bytes");
    return std::shared_ptr<void>(p, std::free);
  }
  void copy_in(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_out(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void finish(const char* /*op: host loops have finished when they return*/) override {}

#define GDNV_GPU_HOST_LAUNCH(name, Params, item)                              \
  void name(const Params& p, std::int64_t items) override {                   \
    parallel_for(items, 0, [&p](std::int64_t i) { ::gdnv::gpu::item(p, i); });           \
  }
  GDNV_GPU_KERNELS(GDNV_GPU_HOST_LAUNCH)
#undef GDNV_GPU_HOST_LAUNCH

  void linear_forward(const LinearParams& p) override {
    parallel_for(p.N * p.out, 0, [&p](std::int64_t i) { linear_forward_item(p, i); });
  }
  void linear_backward(const LinearParams& p) override {
    parallel_for(p.N * p.in, 0, [&p](std::int64_t i) { linear_dx_item(p, i); });
    parallel_for(p.out * p.in, 0, [&p](std::int64_t i) { linear_dw_item(p, i); });
  }
};

}  // namespace

std::unique_ptr<Kernels> make_host_kernels() { return std::make_unique<HostKernels>(); }

}  // namespace gdnv::gpu
