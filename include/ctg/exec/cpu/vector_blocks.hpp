#pragma once
// The CPU loops' shape for an element loop that should vectorize: blocks of
// 16 with no loop-carried dependence, then the rest one by one.
#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::cpu {

// f(j) for j in [j0, j1): blocks of 16 under `ivdep`, then the tail. GCC
// vectorizes the blocks at -O2 too (its very-cheap cost model takes a loop of
// a known trip count that needs no alias check; a plain loop over a run-time
// count vectorizes only at -O3, measured 2.2x the time at -O2). f must not
// carry anything from one j to the next, nor write what another j reads; a
// lambda is marked CTG_INLINE_LAMBDA, so its body is in the loop.
template <class F>
CTG_FORCEINLINE void each_in_blocks_of_16(dim_t j0, dim_t j1, F&& f) {
  dim_t j = j0;
  for (; j + 16 <= j1; j += 16) {
#pragma GCC ivdep
    for (dim_t u = 0; u < 16; ++u) f(j + u);
  }
  for (; j < j1; ++j) f(j);
}

}  // namespace ctg::cpu
