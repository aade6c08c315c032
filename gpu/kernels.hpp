#pragma once
// Where the kernels of gpu/math_*.hpp run: one "launch" per kernel, each calling its item function for
// every item in [0, items), enqueued on the kernels' Stream. The host emulation (make_host_kernels)
// loops on the CPU on its stream's worker; the CUDA backend (gpu/cuda_backend.cpp) launches one thread
// per item on a CUDA stream. The backend (gpu/kernel_backend.*)
// composes ops from these launches once for both, so ctest checks on the CPU exactly the item
// functions and the composition the GPU runs.
#include <cstddef>
#include <memory>
#include <string>

#include "gpu/params.hpp"
#include "gpu/stream.hpp"

namespace gdnv::gpu {

// X(launch name, params type, item function): every kernel of the backend, by family.
#define GDNV_GPU_DATA_KERNELS(X)                      \
  X(copy_rows, RowCopyParams, copy_row_unit)          \
  X(copy_columns, ColumnCopyParams, copy_column_unit) \
  X(accumulate, AccumulateParams, accumulate_item)
#define GDNV_GPU_NORM_KERNELS(X)                  \
  X(norm_forward, NormParams, norm_forward_row)   \
  X(norm_backward, NormParams, norm_backward_row) \
  X(norm_weight_grad, NormParams, norm_weight_grad)
#define GDNV_GPU_CONV_KERNELS(X)                 \
  X(conv_forward, ConvParams, conv_forward_item) \
  X(conv_dpre, ConvParams, conv_dpre_item)       \
  X(conv_dx, ConvParams, conv_dx_item)           \
  X(conv_dhalo, ConvParams, conv_dhalo_item)     \
  X(conv_weight_grad, ConvParams, conv_weight_grad_item)
#define GDNV_GPU_GATE_KERNELS(X)                     \
  X(gates_forward, GateParams, gates_forward_item)   \
  X(gates_backward, GateParams, gates_backward_item) \
  X(gates_param_grad, GateParams, gates_param_grad)
#define GDNV_GPU_GDR_KERNELS(X)                                               \
  X(l2norm, GdrParams, l2norm_row)                                            \
  X(l2norm_backward, GdrParams, l2norm_backward_row)                          \
  X(gdr_forward, GdrParams, gdr_forward_task)                                 \
  X(gdr_backward, GdrParams, gdr_backward_task)                               \
  X(gdr_last_span_map, GdrParams, gdr_last_span_map_task)                     \
  X(gdr_first_backward_span_map, GdrParams, gdr_first_backward_span_map_task) \
  X(fold_span_maps, FoldParams, fold_span_maps_task)
#define GDNV_GPU_KERNELS(X) \
  GDNV_GPU_DATA_KERNELS(X)  \
  GDNV_GPU_NORM_KERNELS(X)  \
  GDNV_GPU_CONV_KERNELS(X)  \
  GDNV_GPU_GATE_KERNELS(X)  \
  GDNV_GPU_GDR_KERNELS(X)

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual std::string platform() const = 0;  // "emu" | "cuda": the backend name's prefix
  // Where every launch is enqueued, in order: storage, copies and synchronisation go through it too.
  virtual const std::shared_ptr<Stream>& stream() const = 0;

#define GDNV_GPU_DECLARE_LAUNCH(name, Params, item) virtual void name(const Params& p, std::int64_t items) = 0;
  GDNV_GPU_KERNELS(GDNV_GPU_DECLARE_LAUNCH)
#undef GDNV_GPU_DECLARE_LAUNCH

  // GEMMs in fp32 compute on row-major operands (LinearParams): y = x w^T; dx = dy w; dw = dy^T x.
  virtual void linear_forward(const LinearParams& p) = 0;
  virtual void linear_backward(const LinearParams& p) = 0;
};

// The host emulation: every launch loops over its items on the CPU (items in parallel, as on a GPU),
// asynchronously on a HostStream.
std::unique_ptr<Kernels> make_host_kernels();

}  // namespace gdnv::gpu
