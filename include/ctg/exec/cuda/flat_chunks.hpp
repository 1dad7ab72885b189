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

// Thread `at`'s part of n elements: f(i, std::integral_constant<dim_t, C>{})
// for each of its chunks of C consecutive elements from i, grid-stride: C
// = V where width > 1, else 1.
template <dim_t V, class F>
CTG_HD void for_flat_chunks(dim_t n, dim_t width, thread_place at, F&& f) {
  const dim_t first = at.block * at.threads + at.thread, step = at.blocks * at.threads;
  if constexpr (V > 1) {
    if (width > 1) {
      for (dim_t c = first; c < n / V; c += step) f(c * V, std::integral_constant<dim_t, V>{});
      return;
    }
  }
  for (dim_t i = first; i < n; i += step) f(i, std::integral_constant<dim_t, 1>{});
}

}  // namespace ctg::cuda
