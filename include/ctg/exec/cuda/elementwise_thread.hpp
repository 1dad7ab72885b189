#pragma once
// What one thread of an elementwise group's kernel computes
// (exec/cuda/fused_kernel.cuh, elementwise_group), as host and device code:
// tests/unit/cuda_elementwise.cpp runs every thread of launches through it on
// the CPU against the CPU backend's own loop.
//
// Two ways, chosen on the host per launch (exec/cuda/chunk_width.hpp):
//   * chunks: a thread reads and writes V consecutive elements of a row, each
//     buffer's V values in 16-byte loads and the output's in 16-byte stores
//     (lower/read_ahead.hpp);
//   * elements: one at a time, any layout.
// Either way rows at least a block of chunks (or elements) long run in tiles
// (launch_geometry.hpp, row_tiles: two chunks, or four elements, a thread),
// a thread entering its row (divisions) once per tile; shorter rows take a
// chunk (element) per thread, entering its row each time.
#include <cstddef>
#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/exec/cuda/chunk_width.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>
#include <ctg/lower/read_ahead.hpp>

CTG_HOT_BEGIN

namespace ctg::cuda {

// Threads a launch needs (before the grid's cap: launch_geometry.hpp,
// blocks_for): a block's worth per tile where rows are tiled, else one per
// chunk (element).
inline std::size_t elementwise_work(dim_t rows, dim_t row_length, dim_t width, unsigned threads) {
  const dim_t per_row = row_length / width;
  if (per_row >= dim_t{threads})
    return static_cast<std::size_t>(
               row_tiles(rows, per_row, threads, width > 1 ? chunks_per_thread : tile_elements_per_thread).count) *
           threads;
  return static_cast<std::size_t>(rows * per_row);
}

// Thread `at`'s chunks, two a turn: both are read before either is
// written, so each thread keeps two 16-byte loads per buffer in flight (one
// leaves a memory-bound group short of the bandwidth a copy reaches). Rows
// at least a block of chunks long run in tiles of two chunks a thread
// (row_tiles), the thread's chunks t and t + threads of the tile, both in one
// row (entered once: its divisions); shorter rows take a chunk per thread,
// grid-stride, a turn the thread's next two (each entering its row).
template <class Plan, std::size_t K, std::size_t NR>
CTG_HD void elementwise_chunks(const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                               typename Plan::outputs out, thread_place at) {
  using Body = typename Plan::body;
  constexpr dim_t V = plan_chunk<Plan>;
  const dim_t L = layout.row_length(), rows = layout.rows(), per_row = L / V;
  auto in_row = [&](dim_t row) {
    kernel::context<K, NR> t = c;
    layout.enter_row(t, row);
    return t;
  };
  // Chunk a of row context ta, and chunk b of tb where has_b.
  auto write_pair = [&](const kernel::context<K, NR>& ta, dim_t row_a, dim_t a, bool has_b,
                        const kernel::context<K, NR>& tb, dim_t row_b, dim_t b) {
    const auto va = kernel::read_chunk<Body, V>(ta, a * V);
    if (has_b) {
      const auto vb = kernel::read_chunk<Body, V>(tb, b * V);
      kernel::store_chunk<Body, V>(va, out.from(row_a * L));
      kernel::store_chunk<Body, V>(vb, out.from(row_b * L));
    } else {
      kernel::store_chunk<Body, V>(va, out.from(row_a * L));
    }
  };
  if (per_row >= at.threads) {
    const row_tiles tiles(rows, per_row, static_cast<unsigned>(at.threads), chunks_per_thread);
    for (dim_t tile = at.block; tile < tiles.count; tile += at.blocks) {
      const dim_t row = tiles.row(tile), a = tiles.first(tile) + at.thread, b = a + at.threads, end = tiles.end(tile);
      if (a >= end) continue;
      const kernel::context<K, NR> t = in_row(row);
      write_pair(t, row, a, b < end, t, row, b);
    }
    return;
  }
  const dim_t total = rows * per_row, step = at.blocks * at.threads;
  for (dim_t e = at.block * at.threads + at.thread; e < total; e += 2 * step) {
    const dim_t f = e + step, row_e = e / per_row;
    if (f < total) {
      const dim_t row_f = f / per_row;
      write_pair(in_row(row_e), row_e, e - row_e * per_row, true, in_row(row_f), row_f, f - row_f * per_row);
    } else {
      const kernel::context<K, NR> t = in_row(row_e);
      write_pair(t, row_e, e - row_e * per_row, false, t, row_e, 0);
    }
  }
}

// Thread `at`'s elements, one at a time: several per tile where rows are a
// block long (computed together, so their loads are in flight together).
template <class Plan, std::size_t K, std::size_t NR>
CTG_HD void elementwise_elements(const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                                 typename Plan::outputs out, thread_place at) {
  using Body = typename Plan::body;
  using T = typename Plan::dtype;
  constexpr unsigned N = tile_elements_per_thread;
  const dim_t L = layout.row_length(), rows = layout.rows();
  if (L >= at.threads) {
    const row_tiles tiles(rows, L, static_cast<unsigned>(at.threads), N);
    for (dim_t tile = at.block; tile < tiles.count; tile += at.blocks) {
      const dim_t row = tiles.row(tile), first = tiles.first(tile), end = tiles.end(tile);
      kernel::context<K, NR> t = c;
      layout.enter_row(t, row);
      const auto row_out = out.from(row * L);
      if (end - first == tiles.span) {
        compute_t<T> v[N];
        CTG_UNROLL
        for (unsigned k = 0; k < N; ++k) v[k] = Body::value(t, first + k * at.threads + at.thread);
        CTG_UNROLL
        for (unsigned k = 0; k < N; ++k) row_out.put(first + k * at.threads + at.thread, v[k]);
      } else {
        for (dim_t j = first + at.thread; j < end; j += at.threads) row_out.put(j, Body::value(t, j));
      }
    }
    return;
  }
  const dim_t total = rows * L;
  for (dim_t e = at.block * at.threads + at.thread; e < total; e += at.blocks * at.threads) {
    kernel::context<K, NR> t = c;
    const dim_t row = e / L;
    layout.enter_row(t, row);
    out.put(e, Body::value(t, e - row * L));
  }
}

// Thread `at` of a launch of the group: in chunks of `width` (chunk_width) or element by element.
template <class Plan, std::size_t K, std::size_t NR>
CTG_HD void elementwise_thread(const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                               typename Plan::outputs out, dim_t width, thread_place at) {
  if constexpr (plan_chunk<Plan> > 1)
    if (width > 1) return elementwise_chunks<Plan>(c, layout, out, at);
  elementwise_elements<Plan>(c, layout, out, at);
}

}  // namespace ctg::cuda

CTG_HOT_END
