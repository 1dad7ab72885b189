#pragma once
// The CUDA store's flat kernels, over n contiguous elements
// (exec/cuda/data_kernels.cuh: widen, quantize, dequantize, accumulate),
// take V elements at a time in 16-byte accesses where n is a multiple of V
// and every array starts aligned for V of its type (flat_width, decided on
// the host per launch), else one at a time. V fills 16 bytes of the widest
// type the kernel reads or writes (at most 8: kernel::chunk_elements). Host and device code:
// unit.cuda_launch_geometry walks every thread of launches with it.
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/lower/read_ahead.hpp>

namespace ctg::cuda {

// The chunk a launch over n elements of these arrays takes (1: one at a time).
template <class... Ts>
dim_t flat_width(dim_t n, const Ts*... arrays) {
  constexpr dim_t V = kernel::chunk_elements<Ts...>;
  const bool fits = V > 1 && n % V == 0 &&
                    ((reinterpret_cast<std::uintptr_t>(arrays) % kernel::chunk_alignment<Ts, V> == 0) && ...);
  return fits ? V : 1;
}

// Threads a launch needs: one per chunk.
inline std::size_t flat_work(dim_t n, dim_t width) { return static_cast<std::size_t>(n / width); }

// Thread `at`'s part of n elements, grid-stride, in turns of two chunks of
// C consecutive elements (C = V where width > 1, else 1): f(i, j,
// std::integral_constant<dim_t, C>{}) for the chunk from element i and the
// thread's next, from j (no_chunk where the thread has no next). The
// kernels read both chunks before they write either, so each thread keeps
// two loads per array in flight (with one, a memory-bound kernel stays well
// short of the bandwidth a copy reaches).
inline constexpr dim_t no_chunk = -1;
template <dim_t V, class F>
CTG_HD void for_flat_chunk_pairs(dim_t n, dim_t width, thread_place at, F&& f) {
  const dim_t first = at.block * at.threads + at.thread, step = at.blocks * at.threads;
  auto turns = [&](dim_t chunks, auto c) {
    constexpr dim_t C = decltype(c)::value;
    for (dim_t k = first; k < chunks; k += 2 * step) f(k * C, k + step < chunks ? (k + step) * C : no_chunk, c);
  };
  if constexpr (V > 1) {
    if (width > 1) return turns(n / V, std::integral_constant<dim_t, V>{});
  }
  turns(n, std::integral_constant<dim_t, 1>{});
}

}  // namespace ctg::cuda
