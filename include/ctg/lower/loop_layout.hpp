#pragma once
// Where a fusion group's loop runs, shared by the CPU loops and the CUDA
// kernels: the iteration shape, seen as rows along its last dim, and for each
// buffer slot its strides over that shape (0 where the buffer broadcasts).
// A body (kernel_expr.hpp) reads slot k of row r at base[k] + j: enter_row
// sets base[] (and the row's position, for index-aware ops).
#include <cstddef>
#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

CTG_HOT_BEGIN

namespace ctg::kernel {

// Strides of a buffer of shape (rank, dims) seen from a loop of rank
// loop_rank: right-aligned, 0 where the buffer has no dim or a dim of 1.
CTG_HD inline void broadcast_strides(std::size_t rank, const dim_t* dims, std::size_t loop_rank, dim_t* stride) {
  dim_t step = 1;
  const std::size_t off = loop_rank - rank;
  for (std::size_t d = loop_rank; d-- > 0;) {
    if (d < off) {
      stride[d] = 0;
      continue;
    }
    const dim_t sd = dims[d - off];
    stride[d] = sd == 1 ? 0 : step;
    step *= sd;
  }
}

template <std::size_t K>
struct loop_layout {
  std::size_t rank = 0;
  dim_t dims[max_rank]{};
  dim_t stride[K][max_rank]{};

  CTG_HD dim_t row_length() const { return rank ? dims[rank - 1] : 1; }
  CTG_HD dim_t rows() const {
    dim_t n = 1;
    for (std::size_t d = 0; d + 1 < rank; ++d) n *= dims[d];
    return n;
  }
  // Slot k reads a buffer of shape (buffer_rank, buffer_dims).
  CTG_HD void set_slot(std::size_t k, std::size_t buffer_rank, const dim_t* buffer_dims) {
    broadcast_strides(buffer_rank, buffer_dims, rank, stride[k]);
  }
  // Where row `row` starts in a buffer with strides `s` (over the outer dims).
  CTG_HD dim_t row_offset(dim_t row, const dim_t* s) const {
    dim_t off = 0;
    for (std::size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
      off += (row % dims[d]) * s[d];
      row /= dims[d];
    }
    return off;
  }
  // Point context c at row `row`: each slot's base and the row's index along
  // the second-to-last dim. The row's index along each outer dim is found
  // once for all slots, in 32-bit division where it fits: a GPU has no
  // divider, and 64-bit division costs several times the 32-bit one.
  template <class Ctx>
  CTG_HD void enter_row(Ctx& c, dim_t row) const {
    const std::size_t outer = rank > 0 ? rank - 1 : 0;
    dim_t index[max_rank]{};
    constexpr dim_t narrow = 0xFFFFFFFF;
    if (row <= narrow) {
      std::uint32_t r = static_cast<std::uint32_t>(row);
      for (std::size_t d = outer; d-- > 0;) {
        if (dims[d] > narrow) {  // (then r < dims[d])
          index[d] = r;
          r = 0;
          continue;
        }
        const std::uint32_t n = static_cast<std::uint32_t>(dims[d]), q = r / n;
        index[d] = r - q * n;
        r = q;
      }
    } else {
      for (std::size_t d = outer; d-- > 0;) {
        const dim_t q = row / dims[d];
        index[d] = row - q * dims[d];
        row = q;
      }
    }
    for (std::size_t k = 0; k < K; ++k) {
      dim_t off = 0;
      for (std::size_t d = 0; d < outer; ++d) off += index[d] * stride[k][d];
      c.base[k] = off;
    }
    c.row_pos = rank >= 2 ? index[rank - 2] : 0;
  }
};

}  // namespace ctg::kernel

CTG_HOT_END
