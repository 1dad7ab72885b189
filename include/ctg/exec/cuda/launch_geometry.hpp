#pragma once
// How many blocks a CUDA kernel launches, as plain host functions (no CUDA
// header), so what a launch covers is tested on the CPU
// (tests/unit/cuda_launch_geometry.cpp simulates the kernels' grid-stride
// loops: every element and every row exactly once, for odd sizes, empty
// tensors and more rows than the grid).
#include <cstddef>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::cuda {

// A thread's place in its launch: blockIdx.x, threadIdx.x, gridDim.x,
// blockDim.x (a kernel's per-thread work takes it, so the CPU tests run
// every thread of a launch: cuda::this_thread() on the device).
struct thread_place {
  dim_t block = 0, thread = 0, blocks = 1, threads = 1;
};

// Blocks for a grid-stride loop over n elements, `per_thread` each: a block
// per `threads * per_thread` elements, at least one (a launch of zero blocks
// is an error; an empty tensor's kernel is not launched at all), at most
// max_blocks.
constexpr unsigned blocks_up_to(std::size_t n, unsigned threads, std::size_t per_thread, std::size_t max_blocks) {
  const std::size_t per_block = std::size_t{threads} * per_thread, needed = (n + per_block - 1) / per_block;
  const std::size_t b = needed < max_blocks ? needed : max_blocks;
  return static_cast<unsigned>(b > 0 ? b : 1);
}
// At most enough to fill every SM eight times over (2048 threads of
// 256-thread blocks: a Hopper SM's most, so memory-bound loops keep enough
// loads in flight), never more than the work needs.
constexpr unsigned blocks_for(std::size_t n, unsigned threads, unsigned sm_count, std::size_t per_thread = 1) {
  return blocks_up_to(n, threads, per_thread, std::size_t{sm_count} * 8);
}
// Row groups: one block per row, at most 65535 (a block loops over rows
// blockIdx.x, blockIdx.x + gridDim.x, ...).
inline constexpr std::size_t max_row_blocks = 65535;
constexpr unsigned row_blocks(std::size_t rows) {
  return static_cast<unsigned>(rows < max_row_blocks ? (rows > 0 ? rows : 1) : max_row_blocks);
}
// Rows of at most warp_row_limit elements take a warp each instead (its 32
// lanes in turn, each reduction a warp's shuffles: no block-wide wait, which
// a block of 256 threads pays per reduction for 4 elements a thread on rows
// of 1024): a block of warps_per_row_block warps takes that many rows at a
// time, warp w of block b rows (b * warps + w) + k * (grid * warps). Longer
// rows keep a block, and rows of up to 4096 its row cache in shared memory.
// The choice follows the row's length alone, so the bits follow the shapes.
inline constexpr std::size_t warp_row_limit = 2048;
inline constexpr unsigned warp_threads = 32, warps_per_row_block = 8;
constexpr bool rows_take_a_warp(std::size_t length) { return length <= warp_row_limit; }
constexpr unsigned warp_row_blocks(std::size_t rows) {
  return row_blocks((rows + warps_per_row_block - 1) / warps_per_row_block);
}

// Elementwise groups whose rows are at least a block long run in tiles: a
// tile is `span` consecutive elements of one row (the last tile of a row may
// be shorter), a block takes a tile at a time (tile = block, then += grid),
// and its thread t writes elements t, t + threads, ... of the tile. A thread
// enters a row (divisions, kernel::loop_layout::enter_row) once per tile,
// not once per element.
struct row_tiles {
  dim_t length = 0, span = 0, per_row = 0, count = 0;
  CTG_HD row_tiles(dim_t rows, dim_t row_length, unsigned threads, unsigned per_thread)
      : length(row_length), span(dim_t{threads} * per_thread) {
    per_row = (length + span - 1) / span;
    count = rows * per_row;
  }
  CTG_HD dim_t row(dim_t tile) const { return count == per_row ? 0 : tile / per_row; }  // (one row: no division)
  CTG_HD dim_t first(dim_t tile) const { return (tile - row(tile) * per_row) * span; }  // element in its row
  CTG_HD dim_t end(dim_t tile) const {
    const dim_t e = first(tile) + span;
    return e < length ? e : length;
  }
};
inline constexpr unsigned tile_elements_per_thread = 4;  // element by element
inline constexpr unsigned chunks_per_thread = 2;         // in chunks (16-byte loads)

}  // namespace ctg::cuda
