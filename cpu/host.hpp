#pragma once
// Host Buffers of the CPU backend: allocation, conversion to and from the compute type.
#include <vector>

#include "cp/buffer.hpp"

namespace gdnv::cpu {

using cp::Buffer;

template <class C>
using Array = std::vector<C>;

// Zero-filled host storage of `shape` elements of `dtype`.
Buffer host_buffer(DType dtype, Shape shape);

// The elements of a float Buffer (F64, F32 or BF16) converted to the compute type C (float or double).
template <class C>
Array<C> to_compute(const Buffer& b);

// A host Buffer of `dtype` holding `values`, rounded to nearest even where dtype is narrower than C.
template <class C>
Buffer from_compute(const Array<C>& values, DType dtype, Shape shape);

}  // namespace gdnv::cpu
