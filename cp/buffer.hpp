#pragma once
// A tensor where a Backend computes: host memory for the CPU backend, device memory for CUDA. Row-major
// and contiguous; copies share storage (a Buffer is a handle), reshaped() is a view.
#include <cstdint>
#include <memory>

#include "comm/communicator.hpp"
#include "core/tensor.hpp"

namespace gdnv::cp {

class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, Shape shape, std::shared_ptr<void> storage)
      : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)) {}

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_.at(static_cast<std::size_t>(i < 0 ? rank() + i : i)); }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return storage_ == nullptr; }

  void* data() { return storage_.get(); }
  const void* data() const { return storage_.get(); }
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data());
  }

  // Views for the communicators.
  comm::MutBuf mut() { return comm::MutBuf(data(), numel(), dtype_); }
  comm::ConstBuf view() const { return comm::ConstBuf(data(), numel(), dtype_); }

  // Same storage, new shape of the same element count.
  Buffer reshaped(Shape shape) const {
    if (shape_numel(shape) != numel())
      throw Error("Buffer: cannot view " + shape_str(shape_) + " as " + shape_str(shape));
    return Buffer(dtype_, std::move(shape), storage_);
  }

 private:
  DType dtype_ = DType::F32;
  Shape shape_{0};
  std::shared_ptr<void> storage_;
};

}  // namespace gdnv::cp
