#pragma once
// How the CUDA kernels of fused attention (exec/cuda/attention_kernels.cuh)
// split the work, as host code tested on the CPU
// (tests/unit/cuda_launch_geometry.cpp). A block takes `rows` queries (or,
// for dk and dv, keys) of one head, a thread each; it goes over the other
// side's tokens a tile of `rows` at a time, the tile's values in shared
// memory in the compute type C, each row padded by one element (a thread's
// own row, read by its thread alone, then lies in its own bank). At most
// four tiles are in shared memory at once (dk and dv: the block's keys and
// values, a tile of queries and of their gradients), within 40 KB.
#include <cstddef>

#include <ctg/core/config.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::cuda {

struct attention_tiles {
  static constexpr std::size_t shared_bytes = 40 * 1024;
  static constexpr int most_tiles = 4;

  // Rows a block takes (and a tile holds) for heads of `features`, in C of `c_bytes`: 32, or the largest power of
  // two below it whose four tiles fit.
  CTG_HD static constexpr int rows_for(dim_t features, std::size_t c_bytes) {
    int rows = 32;
    while (rows > 1 && std::size_t(most_tiles) * std::size_t(rows) * std::size_t(features + 1) * c_bytes > shared_bytes)
      rows /= 2;
    return rows;
  }
  // Does one row of one tile fit at all (a head dim of at most ~1280 in f64)?
  CTG_HD static constexpr bool fits(dim_t features, std::size_t c_bytes) {
    return std::size_t(most_tiles) * std::size_t(features + 1) * c_bytes <= shared_bytes;
  }
  // Blocks along the tokens of one head.
  CTG_HD static constexpr dim_t blocks_per_head(dim_t tokens, int rows) { return (tokens + rows - 1) / rows; }

  // The element of a tile [rows][features] that thread t loads at its k-th
  // turn, e = t + k * rows: consecutive threads on consecutive tokens where
  // the layout has tokens contiguous (feature_rows), else on consecutive features.
  struct slot {
    int row, feature;
  };
  CTG_HD static constexpr slot slot_of(int e, int rows, int features, bool tokens_contiguous) {
    return tokens_contiguous ? slot{e % rows, e / rows} : slot{e / features, e % features};
  }
};

}  // namespace ctg::cuda
