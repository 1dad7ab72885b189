#pragma once
// What one thread of a row group's block computes for a row
// (exec/cuda/fused_kernel.cuh, row_group), as host and device code:
// tests/unit/cuda_row_thread.cpp runs every thread of a block through it on
// the CPU. A thread takes the row's elements thread, thread + threads, ...
// or its chunks of V elements the same way, read in 16-byte loads where the
// launch allows (exec/cuda/chunk_width.hpp, lower/read_ahead.hpp). The
// block combines the threads' parts (a CUB reduction: library code).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/node_table.hpp>
#include <ctg/lower/read_ahead.hpp>

CTG_HOT_BEGIN

namespace ctg::cuda {

// A reduction over a few adds of one buffer (an RMSNorm's mean of squares,
// a max): few registers a value, so a thread reads two chunks before
// folding either, two 16-byte loads in flight (with one, a block's rows of
// such a sum ran at half the copy bandwidth, waiting on each load). A
// costlier one reads a chunk at a time: holding two of its values cost
// registers, and so blocks an SM, on Hopper (the SASS review of stop 50).
template <class X>
struct fold_cost {  // (constants and row values: nothing to load)
  static constexpr std::size_t loads = 0;
  static constexpr bool few_adds = true;
};
template <std::size_t Slot, class T, bool Advances>
struct fold_cost<kernel::load<Slot, T, Advances>> {
  static constexpr std::size_t loads = 1;
  static constexpr bool few_adds = true;
};
template <std::uint32_t Stream, std::uint64_t PBits, std::size_t Slot, bool Advances, class T>
struct fold_cost<kernel::dropout<Stream, PBits, Slot, Advances, T>> {
  static constexpr std::size_t loads = 0;
  static constexpr bool few_adds = false;  // (a Philox draw)
};
template <class Op, class T, class... Xs>
struct fold_cost<kernel::apply<Op, T, Xs...>> {
  static constexpr std::size_t loads = (std::size_t(0) + ... + fold_cost<Xs>::loads);
  static constexpr bool few_adds =
      (detail::a_few_adds<Op> || std::is_same_v<Op, kernel::pass>) && (fold_cost<Xs>::few_adds && ...);
};
template <class X>
inline constexpr bool folds_two_chunks = fold_cost<X>::few_adds && fold_cost<X>::loads <= 1;

// The thread's part of row reduction R over the row c is in (L elements):
// its values folded by R's op in f64 (a max of f32 values in f32: it picks
// one of them, the same in either), in its order. Which elements a thread
// folds, and so the block's bits, follow the shape alone: where L is a
// multiple of V, its chunks thread, thread + threads, ... (each V elements
// in order), read in 16-byte loads where `width` says the launch allows,
// else one by one; otherwise its elements thread, thread + threads, ...
// With `keep` (the row cache: lower/kernel_expr.hpp), each value is kept at
// keep[j] too.
template <class R, dim_t V, class Ctx, class Keep = std::nullptr_t>
CTG_HD double row_part(const Ctx& c, dim_t L, dim_t width, dim_t thread, dim_t threads, Keep keep = nullptr) {
  using X = typename R::child;
  using op = typename R::op;
  using value_t = std::remove_cvref_t<decltype(X::value(c, dim_t{}))>;
  using part_t =
      std::conditional_t<std::is_same_v<op, ctg::op::max_r> && std::is_same_v<value_t, float>, float, double>;
  part_t part = op::template identity<part_t>();
  auto fold = [&](const auto& t, dim_t j) {
    const auto v = X::value(t, j);
    if constexpr (!std::is_null_pointer_v<Keep>) keep[j] = v;
    part = op::combine(part, static_cast<part_t>(v));
  };
  if constexpr (V > 1) {
    if (L % V == 0) {
      dim_t ch = thread;
      if constexpr (folds_two_chunks<X>) {
        // (Chunks ch and ch + threads read, then folded in that order: the same bits.)
        if (width > 1)
          for (; ch + threads < L / V; ch += 2 * threads) {
            const auto t0 = kernel::read_chunk<X, V>(c, ch * V), t1 = kernel::read_chunk<X, V>(c, (ch + threads) * V);
            CTG_UNROLL
            for (dim_t k = 0; k < V; ++k) fold(t0, t0.first + k);
            CTG_UNROLL
            for (dim_t k = 0; k < V; ++k) fold(t1, t1.first + k);
          }
      }
      for (; ch < L / V; ch += threads) {
        if (width > 1) {
          const auto t = kernel::read_chunk<X, V>(c, ch * V);
          CTG_UNROLL
          for (dim_t k = 0; k < V; ++k) fold(t, t.first + k);
        } else {
          for (dim_t k = 0; k < V; ++k) fold(c, ch * V + k);
        }
      }
      return part;
    }
  }
  for (dim_t j = thread; j < L; j += threads) fold(c, j);
  return part;  // (a float part widened: exact)
}

// The thread's outputs of the row: Body's value at j to element j of the
// row `row_out` starts (kernel::group_outputs: the root, and a side output).
// The thread writes the elements its row_part folds, so that reading the
// row cache it reads only what it kept itself (the block does not wait
// between a row's outputs and the next row's reductions, which overwrite
// the cache).
template <class Body, dim_t V, class T, class S, class Ctx>
CTG_HD void row_outputs(const Ctx& c, dim_t L, dim_t width, kernel::group_outputs<T, S> row_out, dim_t thread,
                        dim_t threads) {
  if constexpr (V > 1) {
    if (L % V == 0) {
      for (dim_t ch = thread; ch < L / V; ch += threads) {
        if (width > 1) {
          kernel::write_chunk<Body, V>(c, ch * V, row_out);
        } else {
          for (dim_t k = 0; k < V; ++k) row_out.put(ch * V + k, Body::value(c, ch * V + k));
        }
      }
      return;
    }
  }
  for (dim_t j = thread; j < L; j += threads) row_out.put(j, Body::value(c, j));
}

}  // namespace ctg::cuda

CTG_HOT_END
