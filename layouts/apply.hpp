#pragma once
// Row permutations of row-major [rows, width] buffers, and the two non-identity halves of the
// zigzag <-> contiguous swap (route.hpp). Shared by the CP modes and the tests.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/tensor.hpp"
#include "layouts/route.hpp"

namespace gdnv::layouts {

// dst row k = src row index[k]. Unchecked: every index must name a src row.
void gather_rows(const std::uint8_t* src,  // [rows, row_bytes]
                 std::span<const std::int64_t> index, std::size_t row_bytes,
                 std::uint8_t* dst);  // [index.size(), row_bytes]
// dst row index[k] = src row k. Unchecked: every index must name a dst row.
void scatter_rows(const std::uint8_t* src,  // [index.size(), row_bytes]
                  std::span<const std::int64_t> index, std::size_t row_bytes,
                  std::uint8_t* dst);  // [rows, row_bytes]

// Tensor forms over dim 0 (the other dims make the row); ConfigError on an index outside the rows.
Tensor gather_rows(const Tensor& src,                     // [rows, ...]
                   std::span<const std::int64_t> index);  // -> [index.size(), ...]
// Rows not named by index stay zero.
Tensor scatter_rows(const Tensor& src,                                        // [index.size(), ...]
                    std::span<const std::int64_t> index, std::int64_t rows);  // -> [rows, ...]

// Contiguous -> zigzag: this rank's send buffer from its contiguous local tensor.
Tensor gather_to_send_order(const Route& route,
                            const Tensor& contiguous);  // [T/W, ...] -> [T/W, ...]
// Zigzag -> contiguous: this rank's contiguous local tensor from its receive buffer.
Tensor scatter_from_receive_order(const Route& route,
                                  const Tensor& received);  // [T/W, ...] -> [T/W, ...]

}  // namespace gdnv::layouts
