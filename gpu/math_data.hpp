#pragma once
// Data movement items: row and column gather/scatter by an index where the backend computes, and
// y += x. One call handles one element; an index outside its range sets the error flag instead.
#include "gpu/math_common.hpp"
#include "gpu/params.hpp"

namespace gdnv::gpu {

// Unit u (of row_units) of indexed row i.
GDNV_HD void copy_row_unit(const RowCopyParams& p, i64 item) {
  const i64 i = item / p.row_units, u = item % p.row_units;
  const i64 r = p.index[i];
  if (r < 0 || r >= p.limit) {
    *p.error.flag = p.error.code;
    return;
  }
  if (p.gather) p.out[i * p.row_units + u] = p.x[r * p.row_units + u];
  else p.out[r * p.row_units + u] = p.x[i * p.row_units + u];
}

// Unit u of element (row, j) of the indexed columns.
GDNV_HD void copy_column_unit(const ColumnCopyParams& p, i64 item) {
  const i64 u = item % p.elem_units, j = (item / p.elem_units) % p.E, row = item / (p.elem_units * p.E);
  const i64 c = p.index[j];
  if (c < 0 || c >= (p.gather ? p.x_cols : p.out_cols)) {
    *p.error.flag = p.error.code;
    return;
  }
  const i64 src = p.gather ? c : j, dst = p.gather ? j : c;
  p.out[(row * p.out_cols + dst) * p.elem_units + u] = p.x[(row * p.x_cols + src) * p.elem_units + u];
}

GDNV_HD double load_any(const void* p, i64 i, Storage s) {
  if (s == Storage::F64) return static_cast<const double*>(p)[i];
  return load(p, i, s == Storage::BF16);
}

// y[i] += x[i] in double for an F64 y, in float otherwise, rounded once to y's dtype.
GDNV_HD void accumulate_item(const AccumulateParams& p, i64 i) {
  if (p.y_type == Storage::F64) {
    static_cast<double*>(p.y)[i] += load_any(p.x, i, p.x_type);
    return;
  }
  const float sum = static_cast<float>(load_any(p.y, i, p.y_type)) + static_cast<float>(load_any(p.x, i, p.x_type));
  store(p.y, i, sum, p.y_type == Storage::BF16);
}

}  // namespace gdnv::gpu
