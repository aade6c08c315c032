#pragma once
// Host Buffers of the CPU backend: allocation, conversion to and from the compute type, argument checks.
#include <cstdint>
#include <string_view>
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

// Throws Error "<op>: <arg> is <dtype> <shape>; expected <dtype> <dims> = <shape>" on any mismatch.
void expect(const Buffer& b, std::string_view op, std::string_view arg, DType dtype, const Shape& shape,
            std::string_view dims);
// Throws Error "<op>: <arg> has shape <shape>; expected rank <rank> <dims>" unless b has that rank.
void expect_rank(const Buffer& b, std::string_view op, std::string_view arg, int rank, std::string_view dims);
// Throws Error "accumulate: y <dtype> <shape> and x ..." unless y and x are F64, F32 or BF16 of one shape.
void expect_accumulable(const Buffer& y, const Buffer& x);
// Throws Error unless cu is [0, ..., tokens], non-decreasing, with at least one sequence.
void expect_varlen(const std::vector<std::int64_t>& cu, std::int64_t tokens, std::string_view op);

}  // namespace gdnv::cpu
