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

// The digits of a flat index in a mixed radix (dims' sizes, taken inner to
// outer): its index along each dim. In 32-bit division where the index fits
// (then so does every digit): a GPU has no divider, and 64-bit division
// costs several times the 32-bit one.
class index_digits {
 public:
  CTG_HD explicit index_digits(dim_t i) : wide_(i), narrow_(static_cast<std::uint32_t>(i)), fits_(i <= narrow_max) {}
  // The index along the next dim (of size n); what is left counts the dims outside it.
  CTG_HD dim_t next(dim_t n) {
    if (!fits_) {
      const dim_t q = wide_ / n, digit = wide_ - q * n;
      wide_ = q;
      return digit;
    }
    if (n > narrow_max) {  // (then the rest is below n)
      const dim_t digit = narrow_;
      narrow_ = 0;
      return digit;
    }
    const std::uint32_t m = static_cast<std::uint32_t>(n), q = narrow_ / m, digit = narrow_ - q * m;
    narrow_ = q;
    return digit;
  }
  // The index over the dims not taken yet.
  CTG_HD dim_t rest() const { return fits_ ? dim_t{narrow_} : wide_; }

 private:
  static constexpr dim_t narrow_max = 0xFFFFFFFF;
  dim_t wide_;
  std::uint32_t narrow_;
  bool fits_;
};

template <std::size_t K>
struct loop_layout {
  std::size_t rank = 0;
  dim_t dims[max_rank]{};
  dim_t stride[K][max_rank]{};

  // (Both index the dims by constants only: see enter_row.)
  CTG_HD dim_t row_length() const {
    dim_t n = 1;
    CTG_UNROLL
    for (std::size_t d = 0; d < max_rank; ++d)
      if (d + 1 == rank) n = dims[d];
    return n;
  }
  CTG_HD dim_t rows() const {
    dim_t n = 1;
    CTG_UNROLL
    for (std::size_t d = 0; d + 1 < max_rank; ++d)
      if (d + 1 < rank) n *= dims[d];
    return n;
  }
  // The same elements as one row, for a loop whose every slot moves with it
  // in its shape (lower/group.hpp, loop_kind::flat): a kernel then enters no
  // row, and an element's index in the row is its index in every buffer.
  CTG_HD loop_layout one_row() const {
    loop_layout l;
    l.rank = 1;
    l.dims[0] = rows() * row_length();
    for (std::size_t k = 0; k < K; ++k) l.stride[k][0] = 1;
    return l;
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
  // once for all slots. The loop runs over every dim a loop can have
  // (unrolled, the absent ones skipped): on a GPU every index into the
  // layout and the context is then a constant, and nothing goes through
  // local memory.
  template <class Ctx>
  CTG_HD void enter_row(Ctx& c, dim_t row) const {
    CTG_UNROLL
    for (std::size_t k = 0; k < K; ++k) c.base[k] = 0;
    c.row_pos = 0;
    const std::size_t outer = rank > 0 ? rank - 1 : 0;
    index_digits digits(row);
    CTG_UNROLL
    for (std::size_t i = 0; i + 1 < max_rank; ++i) {
      const std::size_t d = max_rank - 2 - i;  // (inner to outer)
      if (d < outer) move_along(c, d, digits.next(dims[d]));
    }
  }
  // Move context c by `by` along outer dim d: each slot's base, and the
  // row's index where d is the second-to-last dim.
  template <class Ctx>
  CTG_HD void move_along(Ctx& c, std::size_t d, dim_t by) const {
    CTG_UNROLL
    for (std::size_t k = 0; k < K; ++k) c.base[k] += by * stride[k][d];
    if (d + 2 == rank) c.row_pos += by;
  }
};

}  // namespace ctg::kernel

CTG_HOT_END
