#include "layouts/apply.hpp"

#include <cstring>
#include <string>

#include "core/error.hpp"

namespace gdnv::layouts {
namespace {

std::size_t row_bytes_of(const Tensor& t) {
  if (t.rank() < 1) throw ConfigError("a row permutation needs a tensor with at least one dimension, got a scalar");
  const Shape row_shape(t.shape().begin() + 1, t.shape().end());
  return dtype_size(t.dtype()) * static_cast<std::size_t>(shape_numel(row_shape));
}

void check_indices(std::span<const std::int64_t> index, std::int64_t rows) {
  for (std::size_t k = 0; k < index.size(); ++k)
    if (index[k] < 0 || index[k] >= rows)
      throw ConfigError("row index " + std::to_string(index[k]) + " at position " + std::to_string(k) +
                        " is outside a tensor of " + std::to_string(rows) + " rows");
}

Shape with_rows(const Shape& shape, std::int64_t rows) {
  Shape out = shape;
  out[0] = rows;
  return out;
}

void check_route_rows(const Route& route, const Tensor& t, const char* what) {
  if (t.rank() >= 1 && t.dim(0) == static_cast<std::int64_t>(route.index.size())) return;
  throw ConfigError(std::string(what) + " has shape " + shape_str(t.shape()) + " but the route of cp rank " +
                    std::to_string(route.cp_rank) + " of " + std::to_string(route.cp_size) + " moves " +
                    std::to_string(route.index.size()) + " rows; build the route from this micro-batch's cu_seqlens");
}

}  // namespace

void gather_rows(const std::uint8_t* src, std::span<const std::int64_t> index, std::size_t row_bytes,
                 std::uint8_t* dst) {
  for (std::size_t k = 0; k < index.size(); ++k)
    std::memcpy(dst + k * row_bytes, src + static_cast<std::size_t>(index[k]) * row_bytes, row_bytes);
}

void scatter_rows(const std::uint8_t* src, std::span<const std::int64_t> index, std::size_t row_bytes,
                  std::uint8_t* dst) {
  for (std::size_t k = 0; k < index.size(); ++k)
    std::memcpy(dst + static_cast<std::size_t>(index[k]) * row_bytes, src + k * row_bytes, row_bytes);
}

Tensor gather_rows(const Tensor& src, std::span<const std::int64_t> index) {
  const std::size_t row_bytes = row_bytes_of(src);
  check_indices(index, src.dim(0));
  Tensor dst(src.dtype(), with_rows(src.shape(), static_cast<std::int64_t>(index.size())));
  gather_rows(src.bytes(), index, row_bytes, dst.bytes());
  return dst;
}

Tensor scatter_rows(const Tensor& src, std::span<const std::int64_t> index, std::int64_t rows) {
  const std::size_t row_bytes = row_bytes_of(src);
  if (src.dim(0) != static_cast<std::int64_t>(index.size()))
    throw ConfigError("scatter of " + shape_str(src.shape()) + " rows with " + std::to_string(index.size()) +
                      " indices; give one index per row");
  check_indices(index, rows);
  Tensor dst(src.dtype(), with_rows(src.shape(), rows));
  scatter_rows(src.bytes(), index, row_bytes, dst.bytes());
  return dst;
}

Tensor gather_to_send_order(const Route& route, const Tensor& contiguous) {
  check_route_rows(route, contiguous, "the contiguous local tensor");
  return gather_rows(contiguous, route.index);
}

Tensor scatter_from_receive_order(const Route& route, const Tensor& received) {
  check_route_rows(route, received, "the receive buffer");
  return scatter_rows(received, route.index, received.dim(0));
}

}  // namespace gdnv::layouts
