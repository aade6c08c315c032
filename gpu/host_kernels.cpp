// The host emulation of the kernels: host memory, each launch a parallel loop over its items calling
// the same item functions the CUDA kernels call, run in order on the stream's worker thread. Items
// write disjoint outputs, so any thread count gives the same bits (and a race between items would show
// up as a test failure here too).
#include "core/parallel.hpp"
#include "faults/seams.hpp"
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
  const std::shared_ptr<Stream>& stream() const override { return stream_; }

#define GDNV_GPU_HOST_LAUNCH(name, Params, item)                                      \
  void name(const Params& p, std::int64_t items) override {                           \
    loop(p, items, [](const Params& q, std::int64_t i) { ::gdnv::gpu::item(q, i); }); \
  }
  GDNV_GPU_KERNELS(GDNV_GPU_HOST_LAUNCH)
#undef GDNV_GPU_HOST_LAUNCH

  void linear_forward(const LinearParams& p) override { loop(p, p.N * p.out, linear_forward_item); }
  void linear_backward(const LinearParams& p) override {
    loop(p, p.N * p.in, faults::linear_dx_accumulates() ? linear_dx_accumulate_item : linear_dx_item);
    loop(p, p.out * p.in, linear_dw_item);
  }

 private:
  // One launch: the params copied into the task, as a kernel launch copies its arguments.
  template <class Params, class Item>
  void loop(const Params& p, std::int64_t items, Item item) {
    host_->enqueue([p, items, item] { parallel_for(items, 0, [&](std::int64_t i) { item(p, i); }); });
  }

  std::shared_ptr<HostStream> host_ = std::make_shared<HostStream>();
  std::shared_ptr<Stream> stream_ = host_;
};

}  // namespace

std::unique_ptr<Kernels> make_host_kernels() { return std::make_unique<HostKernels>(); }

}  // namespace gdnv::gpu
