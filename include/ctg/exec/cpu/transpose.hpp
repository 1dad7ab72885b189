#pragma once
// A matrix's transpose on the CPU, by rows of the input: the transpose node
// (exec/cpu/index_ops.hpp) and a product computed transposed
// (exec/cpu/gemm.hpp) both move values with it.
#include <algorithm>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

CTG_HOT_BEGIN

namespace ctg::cpu {

// The side of a tile: transpose_tile rows of x, as many columns.
inline constexpr dim_t transpose_tile = 32;

// Rows [i0, i1) of x [rows, cols] into out [cols, rows]: out[j, i] = x[i, j],
// in tiles of transpose_tile columns (with at most transpose_tile rows, a
// tile's reads and writes both stay in cache). A copy, so any split of the
// rows gives the same result.
template <class T>
void transpose_rows(const T* x, dim_t rows, dim_t cols, T* out, dim_t i0, dim_t i1) {
  for (dim_t j0 = 0; j0 < cols; j0 += transpose_tile) {
    const dim_t j1 = std::min(cols, j0 + transpose_tile);
    for (dim_t j = j0; j < j1; ++j)
      for (dim_t i = i0; i < i1; ++i) out[j * rows + i] = x[i * cols + j];
  }
}

}  // namespace ctg::cpu

CTG_HOT_END
