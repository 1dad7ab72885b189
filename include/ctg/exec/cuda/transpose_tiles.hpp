#pragma once
// How the CUDA transpose (kernels::transpose: a transpose node, and FP8's
// transposed operand copies for cuBLASLt) moves `batches` row-major
// matrices rows x cols to cols x rows: in tiles of 32 x 32 through shared
// memory, so that both the reads and the writes of a warp are consecutive
// addresses (element by element, the writes of a warp land `rows` apart,
// one memory sector each). Host and device code: tests/unit/
// cuda_launch_geometry.cpp runs every thread of every tile on the CPU.
//
// A block of 256 threads is 8 lines of 32: thread (x, line) reads rows
// line, line + 8, ... of the tile at column x into tile[row][x], waits for
// the block, then writes the tile's columns as the output's rows: output
// row col0 + k, column row0 + x, from tile[x][k].
#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::cuda {

struct transpose_tiles {
  static constexpr dim_t edge = 32;
  static constexpr unsigned threads = 256, lines = threads / edge;
  dim_t rows = 0, cols = 0, across = 0, down = 0, count = 0;  // tiles across a matrix's columns, down its rows

  CTG_HD transpose_tiles(dim_t r, dim_t c, dim_t batches)
      : rows(r), cols(c), across((c + edge - 1) / edge), down((r + edge - 1) / edge), count(across * down * batches) {}

  struct tile {
    dim_t matrix = 0, row0 = 0, col0 = 0;  // the matrix's first element (in and out), the tile's first row and column
  };
  // Tile t: its batch, then its row of tiles, then its column of tiles.
  CTG_HD tile at(dim_t t) const {
    const dim_t per = across * down, b = t / per, rc = t - b * per, tr = rc / across;
    return {b * rows * cols, tr * edge, (rc - tr * across) * edge};
  }

  // Thread (x, line)'s reads of tile p into the tile memory.
  template <class T>
  CTG_HD void load(const tile& p, const T* in, T (*mem)[edge + 1], dim_t x, dim_t line) const {
    const dim_t c = p.col0 + x;
    for (dim_t k = line; k < edge; k += lines) {
      const dim_t r = p.row0 + k;
      if (r < rows && c < cols) mem[k][x] = in[p.matrix + r * cols + c];
    }
  }
  // Its writes, once the whole tile is in: output row col0 + k, column row0 + x.
  template <class T>
  CTG_HD void store(const tile& p, const T (*mem)[edge + 1], T* out, dim_t x, dim_t line) const {
    const dim_t r = p.row0 + x;
    for (dim_t k = line; k < edge; k += lines) {
      const dim_t c = p.col0 + k;
      if (r < rows && c < cols) out[p.matrix + c * rows + r] = mem[x][k];
    }
  }
};

}  // namespace ctg::cuda
