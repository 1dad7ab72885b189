// What a CUDA launch covers (exec/cuda/launch_geometry.hpp), without a GPU:
// the kernels' grid-stride loops (exec/cuda/fused_kernel.cuh) simulated
// thread by thread with the grids the host functions give. Every element,
// and every row, is visited exactly once; a reduction over other axes
// (exec/cuda/axis_reduce_map.hpp) visits each loop element once, from its
// own output's thread, in increasing order; a flat kernel
// (exec/cuda/flat_chunks.hpp) writes every element once, in chunks or one by one.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include <ctg/exec/cuda/attention_tiles.hpp>
#include <ctg/exec/cuda/axis_reduce_map.hpp>
#include <ctg/exec/cuda/flat_chunks.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/exec/cuda/transpose_tiles.hpp>
#include <ctg/lower/loop_layout.hpp>

#include "../common/rt_shapes.hpp"

namespace {
// elementwise_group: e = block * threads + thread, then e += grid * threads.
std::vector<int> elementwise_visits(std::size_t total, unsigned threads, unsigned sm_count) {
  std::vector<int> seen(total, 0);
  if (total == 0) return seen;  // (not launched)
  const unsigned grid = ctg::cuda::blocks_for(total, threads, sm_count);
  for (unsigned block = 0; block < grid; ++block)
    for (unsigned t = 0; t < threads; ++t)
      for (std::size_t e = std::size_t{block} * threads + t; e < total; e += std::size_t{grid} * threads) ++seen[e];
  return seen;
}
// elementwise_group on rows at least a block long: tile = block, then tile
// += grid; in a tile j = first + thread, then j += threads.
std::vector<int> tile_visits(std::size_t rows, std::size_t length, unsigned threads, unsigned sm_count) {
  std::vector<int> seen(rows * length, 0);
  if (rows * length == 0) return seen;
  const ctg::cuda::row_tiles tiles(static_cast<ctg::dim_t>(rows), static_cast<ctg::dim_t>(length), threads,
                                   ctg::cuda::tile_elements_per_thread);
  const unsigned grid = ctg::cuda::blocks_for(static_cast<std::size_t>(tiles.count) * threads, threads, sm_count);
  for (unsigned block = 0; block < grid; ++block)
    for (ctg::dim_t tile = block; tile < tiles.count; tile += grid)
      for (unsigned t = 0; t < threads; ++t)
        for (ctg::dim_t j = tiles.first(tile) + t; j < tiles.end(tile); j += threads)
          ++seen[static_cast<std::size_t>(tiles.row(tile)) * length + static_cast<std::size_t>(j)];
  return seen;
}
// row_group: row = block, then row += grid; in a row j = thread, then j += threads.
std::vector<int> row_visits(std::size_t rows, std::size_t length, unsigned threads) {
  std::vector<int> seen(rows * length, 0);
  if (rows == 0) return seen;
  const unsigned grid = ctg::cuda::row_blocks(rows);
  for (unsigned block = 0; block < grid; ++block)
    for (std::size_t row = block; row < rows; row += grid)
      for (unsigned t = 0; t < threads; ++t)
        for (std::size_t j = t; j < length; j += threads) ++seen[row * length + j];
  return seen;
}
// The same for rows a warp takes each (warp_row_group): every row once, by one warp.
std::vector<int> warp_row_visits(std::size_t rows, std::size_t length) {
  std::vector<int> seen(rows * length, 0);
  if (rows == 0) return seen;
  const unsigned grid = ctg::cuda::warp_row_blocks(rows), warps = ctg::cuda::warps_per_row_block;
  for (unsigned block = 0; block < grid; ++block)
    for (unsigned w = 0; w < warps; ++w)
      for (std::size_t row = std::size_t{block} * warps + w; row < rows; row += std::size_t{grid} * warps)
        for (unsigned lane = 0; lane < ctg::cuda::warp_threads; ++lane)
          for (std::size_t j = lane; j < length; j += ctg::cuda::warp_threads) ++seen[row * length + j];
  return seen;
}
bool each_once(const std::vector<int>& v) {
  for (int x : v)
    if (x != 1) return false;
  return true;
}
}  // namespace

TEST_CASE("elementwise launches: every element exactly once") {
  for (unsigned sm : {1u, 3u, 132u})
    for (std::size_t n : {std::size_t(1), std::size_t(255), std::size_t(256), std::size_t(257), std::size_t(4099),
                          std::size_t(1) << 20, (std::size_t(1) << 20) + 7}) {
      INFO("n = " << n << ", sm = " << sm);
      CHECK(each_once(elementwise_visits(n, 256, sm)));
    }
  CHECK(elementwise_visits(0, 256, 132).empty());
  // Fewer blocks than the work when the SMs are filled; never more than needed.
  CHECK(ctg::cuda::blocks_for(std::size_t(1) << 30, 256, 132) == 8 * 132);
  CHECK(ctg::cuda::blocks_for(300, 256, 132) == 2);
  CHECK(ctg::cuda::blocks_for(0, 256, 132) == 1);
  CHECK(ctg::cuda::blocks_for(1000, 128, 132, 4) == 2);  // (4 elements per thread)
}

TEST_CASE("grids fixed by the work's size (AdamW's norm): every element once, as many blocks as the size needs") {
  // (A grid-stride loop over n elements: i = block * threads + thread, then i += blocks * threads.)
  for (std::size_t n : {std::size_t(1), std::size_t(2047), std::size_t(2049), std::size_t(1) << 20,
                        std::size_t(3000001)}) {
    const unsigned blocks = ctg::cuda::blocks_up_to(n, 256, 8, 1024);
    INFO("n = " << n << ": " << blocks << " blocks");
    std::vector<int> seen(n, 0);
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = 0; t < 256; ++t)
        for (std::size_t i = std::size_t{b} * 256 + t; i < n; i += std::size_t{blocks} * 256) ++seen[i];
    CHECK(each_once(seen));
  }
  CHECK(ctg::cuda::blocks_up_to(0, 256, 8, 1024) == 1);
  CHECK(ctg::cuda::blocks_up_to(768, 256, 8, 1024) == 1);    // a norm's scale: one block
  CHECK(ctg::cuda::blocks_up_to(2049, 256, 8, 1024) == 2);   // (8 elements a thread)
  CHECK(ctg::cuda::blocks_up_to(50304 * 768, 256, 8, 1024) == 1024);  // GPT-2's embedding: the most
}

TEST_CASE("flat kernels (widen, quantize, dequantize, accumulate): every element once, in chunks or one by one, two a turn") {
  using ctg::dim_t;
  // 16 bytes of the widest array, at most 8 elements.
  CHECK(ctg::kernel::chunk_elements<ctg::bf16, ctg::e4m3> == 8);
  CHECK(ctg::kernel::chunk_elements<float, ctg::e4m3> == 4);
  CHECK(ctg::kernel::chunk_elements<ctg::e4m3> == 8);
  CHECK(ctg::kernel::chunk_elements<double> == 2);
  alignas(16) static float f[64];
  alignas(16) static ctg::bf16 h[64];
  CHECK(ctg::cuda::flat_width(dim_t{64}, f, h) == 4);
  CHECK(ctg::cuda::flat_width(dim_t{62}, f, h) == 1);      // (not a multiple of the chunk)
  CHECK(ctg::cuda::flat_width(dim_t{60}, f + 1, h) == 1);  // (an array off its alignment)
  CHECK(ctg::cuda::flat_width(dim_t{60}, f, h + 2) == 1);
  CHECK(ctg::cuda::flat_width(dim_t{56}, f + 4, h + 4) == 4);  // (8 bytes of bf16 align 4 of them)
  for (unsigned sm : {1u, 132u})
    for (dim_t n : {dim_t{0}, dim_t{8}, dim_t{1000}, dim_t{4099}, dim_t{1} << 20})
      for (dim_t width : {dim_t{8}, dim_t{1}}) {
        if (n % width != 0) continue;
        INFO("n = " << n << ", width = " << width << ", sm = " << sm);
        std::vector<int> seen(static_cast<std::size_t>(n), 0);
        const unsigned grid = ctg::cuda::blocks_for(ctg::cuda::flat_work(n, width), 256, sm);
        bool chunks_as_told = true;
        for (unsigned b = 0; b < grid; ++b)
          for (unsigned t = 0; t < 256; ++t)
            ctg::cuda::for_flat_chunk_pairs<8>(n, width, {b, t, grid, 256}, [&](dim_t i, dim_t j, auto count) {
              constexpr dim_t C = decltype(count)::value;
              chunks_as_told = chunks_as_told && C == width;
              for (dim_t k = 0; k < C; ++k) ++seen[static_cast<std::size_t>(i + k)];
              if (j == ctg::cuda::no_chunk) return;
              // (the thread's next chunk: grid * 256 chunks on)
              chunks_as_told = chunks_as_told && j == i + dim_t{grid} * 256 * C;
              for (dim_t k = 0; k < C; ++k) ++seen[static_cast<std::size_t>(j + k)];
            });
        CHECK(chunks_as_told);
        CHECK(each_once(seen));
      }
}

TEST_CASE("tiled elementwise launches (rows at least a block long): every element exactly once") {
  for (unsigned sm : {1u, 132u})
    for (std::size_t rows : {std::size_t(1), std::size_t(3), std::size_t(1000)})
      for (std::size_t length : {std::size_t(256), std::size_t(768), std::size_t(1024), std::size_t(1025),
                                 std::size_t(5000)}) {
        INFO("rows = " << rows << ", length = " << length << ", sm = " << sm);
        CHECK(each_once(tile_visits(rows, length, 256, sm)));
      }
}

TEST_CASE("row launches: every row and element exactly once, more rows than the grid too") {
  for (std::size_t rows : {std::size_t(1), std::size_t(7), std::size_t(65535), std::size_t(65536), std::size_t(70001)})
    for (std::size_t length : {std::size_t(1), std::size_t(3), std::size_t(300)}) {
      if (rows * length > (std::size_t(1) << 22)) continue;  // (keeps the simulation quick)
      INFO("rows = " << rows << ", length = " << length);
      CHECK(each_once(row_visits(rows, length, 256)));
    }
  CHECK(ctg::cuda::row_blocks(70001) == 65535);
  CHECK(ctg::cuda::row_blocks(0) == 1);
  // A warp per row: rows of up to 2048, in blocks of 8 warps (more rows than the grid too).
  for (std::size_t rows : {std::size_t(1), std::size_t(7), std::size_t(8), std::size_t(9), std::size_t(1000),
                           std::size_t(65535) * 8 + 13})
    for (std::size_t length : {std::size_t(1), std::size_t(37)}) {
      INFO("rows = " << rows << ", length = " << length);
      CHECK(each_once(warp_row_visits(rows, length)));
    }
  CHECK(ctg::cuda::warp_row_blocks(9) == 2);
  CHECK(ctg::cuda::warp_row_blocks(8 * 70001) == 65535);
  CHECK(ctg::cuda::rows_take_a_warp(2048));
  CHECK(!ctg::cuda::rows_take_a_warp(2049));
}

namespace {
using test_shapes::dims;
// The walk of every output's thread, checked against where each element goes
// (the output's broadcast strides, as the CPU computes it).
void check_walk(const ctg::rt_shape& it, const ctg::rt_shape& out, bool by_rows) {
  const ctg::cuda::axis_reduce_map m = ctg::cuda::make_axis_reduce_map(it, out, by_rows);
  const ctg::dim_t L = it.rank ? it.d[it.rank - 1] : 1, total = it.numel();
  ctg::dim_t out_stride[ctg::max_rank]{};
  ctg::kernel::broadcast_strides(out.rank, out.d, it.rank, out_stride);
  std::vector<int> seen(static_cast<std::size_t>(total), 0);
  bool increasing = true, right_output = true;
  CHECK(m.outputs == out.numel());
  for (ctg::dim_t o = 0; o < m.outputs; ++o) {
    ctg::dim_t last = -1;
    for (ctg::dim_t r = 0; r < m.per_output; ++r) {
      const ctg::dim_t e = m.element(o, r);
      increasing = increasing && e > last;
      last = e;
      // Where e lands: its coordinates times the output's strides.
      ctg::dim_t rest = e, at = 0;
      for (std::size_t d = it.rank; d-- > 0;) {
        at += (rest % it.d[d]) * out_stride[d];
        rest /= it.d[d];
      }
      right_output = right_output && at == o;
      const ctg::dim_t n = by_rows ? L : 1;  // (by rows: the whole row from its start)
      for (ctg::dim_t j = 0; j < n; ++j) ++seen[static_cast<std::size_t>(e + j)];
    }
  }
  CHECK(increasing);
  CHECK(right_output);
  CHECK(each_once(seen));
}
}  // namespace

TEST_CASE("reductions over other axes: each loop element reaches its output once, in increasing order") {
  check_walk(dims({7, 5}), dims({1, 5}), false);              // sum<0>
  check_walk(dims({7, 5}), dims({5}), false);                 // sum_to<[5]>
  check_walk(dims({3, 4, 5}), dims({3, 1, 5}), false);        // a middle axis
  check_walk(dims({2, 3, 4, 5}), dims({1, 3, 1, 5}), false);  // two runs of axes
  check_walk(dims({2, 1, 4, 5}), dims({1, 1, 4, 5}), false);  // a dim of 1 in the loop
  check_walk(dims({3, 4, 5}), dims({1, 1, 1}), true);         // everything, last axis by rows
  check_walk(dims({3, 4, 5}), dims({}), true);                // a scalar
  check_walk(dims({3, 4, 5}), dims({3, 1, 1}), true);         // the last two axes
  check_walk(dims({6, 1}), dims({1, 1}), false);              // rows of one element
  // Empty loops: no visits; an empty reduced dim leaves every output the value over nothing.
  CHECK(ctg::cuda::make_axis_reduce_map(dims({0, 5}), dims({1, 5}), false).per_output == 0);
  CHECK(ctg::cuda::make_axis_reduce_map(dims({0, 5}), dims({1, 5}), false).outputs == 5);
  CHECK(ctg::cuda::make_axis_reduce_map(dims({4, 0}), dims({4, 1}), true).per_output == 0);
  CHECK_THROWS_AS(ctg::cuda::make_axis_reduce_map(dims({4, 5}), dims({2, 5}), false), ctg::error);
}

TEST_CASE("reductions over other axes: chunks cover every visit once, within the partials' fixed bound") {
  struct shape_case {
    ctg::rt_shape it, out;
    bool by_rows;
  };
  const shape_case cases[] = {
      {dims({8192, 768}), dims({1, 768}), false},  // a norm scale's gradient: 768 outputs of 8192 visits
      {dims({8, 1024, 768}), dims({}), true},      // a scalar: 8192 row visits
      {dims({7, 5}), dims({1, 5}), false},         // fewer visits than chunks wanted
      {dims({3, 70000}), dims({1, 70000}), false},  // more outputs than parallel sums wanted: one chunk
      {dims({1000003, 1}), dims({1, 1}), false},   // a prime count of visits
      {dims({0, 5}), dims({1, 5}), false},         // no visits
  };
  // The parallel sums the kernel's paths ask for (axis_reduce_split_for):
  // a sum a thread, tiles, 16-byte chunks of 8 outputs, rows in lanes.
  constexpr ctg::dim_t P = ctg::cuda::axis_reduce_parallel_threads;
  const ctg::dim_t asks[][2] = {{P, ctg::cuda::axis_reduce_min_chunk},
                                {P * ctg::cuda::tile_elements_per_thread, ctg::cuda::axis_reduce_min_chunk},
                                {P * 8, ctg::cuda::axis_reduce_min_chunk},
                                {P / 16, 1}};
  for (const shape_case& s : cases)
    for (const auto& ask : asks) {
      const auto m = ctg::cuda::make_axis_reduce_map(s.it, s.out, s.by_rows);
      const auto split = ctg::cuda::split_visits(m, ask[0], ask[1]);
      INFO("visits " << m.per_output << ", outputs " << m.outputs << ", " << ask[0] << " sums wanted: "
                     << split.chunks << " chunks of " << split.chunk);
      CHECK(split.chunks >= 1);
      CHECK(split.chunks <= ctg::cuda::axis_reduce_max_chunks);
      // (the workspace's fixed partials: only more than one chunk uses them)
      if (split.chunks > 1) {
        CHECK(split.chunks * m.outputs < 2 * ask[0]);
        CHECK(split.chunks * m.outputs <= ctg::cuda::axis_reduce_max_partials);
        CHECK(2 * split.chunk >= ask[1]);  // (chunks of about min_chunk visits at the least)
      }
      std::vector<int> seen(static_cast<std::size_t>(m.per_output), 0);
      for (ctg::dim_t c = 0; c < split.chunks; ++c) {
        CHECK((m.per_output == 0 || split.first(c) < split.end(c, m.per_output)));  // no empty chunk
        for (ctg::dim_t r = split.first(c); r < split.end(c, m.per_output); ++r)
          ++seen[static_cast<std::size_t>(r)];
      }
      CHECK(each_once(seen));
    }
}

TEST_CASE("transposes: every thread of every 32 x 32 tile, each element moved once to its place") {
  using tiles_t = ctg::cuda::transpose_tiles;
  constexpr ctg::dim_t edge = tiles_t::edge;
  for (ctg::dim_t batches : {ctg::dim_t{1}, ctg::dim_t{3}})
    for (ctg::dim_t rows : {ctg::dim_t{1}, ctg::dim_t{31}, ctg::dim_t{32}, ctg::dim_t{33}, ctg::dim_t{100}})
      for (ctg::dim_t cols : {ctg::dim_t{1}, ctg::dim_t{32}, ctg::dim_t{65}}) {
        INFO("batches = " << batches << ", rows = " << rows << ", cols = " << cols);
        const ctg::dim_t n = batches * rows * cols;
        std::vector<int> in(static_cast<std::size_t>(n)), out(in.size(), -1), writes(in.size(), 0);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(i);
        const tiles_t tiles(rows, cols, batches);
        CHECK(tiles.count == batches * ((rows + edge - 1) / edge) * ((cols + edge - 1) / edge));
        for (ctg::dim_t t = 0; t < tiles.count; ++t) {
          const tiles_t::tile p = tiles.at(t);
          int mem[edge][edge + 1];
          for (auto& line : mem)
            for (int& v : line) v = -2;  // (a write of an element no thread read shows as -2)
          for (unsigned th = 0; th < tiles_t::threads; ++th) tiles.load(p, in.data(), mem, th % edge, th / edge);
          // The tile's writes into a fresh output, counted per element across tiles.
          std::vector<int> tile_out(out.size(), -1);
          for (unsigned th = 0; th < tiles_t::threads; ++th) tiles.store(p, mem, tile_out.data(), th % edge, th / edge);
          for (std::size_t i = 0; i < out.size(); ++i)
            if (tile_out[i] != -1) out[i] = tile_out[i], ++writes[i];
        }
        bool placed = true;
        for (ctg::dim_t b = 0; b < batches; ++b)
          for (ctg::dim_t r = 0; r < rows; ++r)
            for (ctg::dim_t c = 0; c < cols; ++c)
              placed = placed && out[static_cast<std::size_t>(b * rows * cols + c * rows + r)] ==
                                     in[static_cast<std::size_t>(b * rows * cols + r * cols + c)];
        CHECK(placed);
        CHECK(std::count(writes.begin(), writes.end(), 1) == static_cast<std::ptrdiff_t>(writes.size()));
      }
}

TEST_CASE("fused attention launches: tiles fit shared memory, every row once, every tile element loaded once") {
  using at = ctg::cuda::attention_tiles;
  for (ctg::dim_t features : {1, 8, 37, 64, 128, 300, 1000})
    for (std::size_t c_bytes : {4u, 8u}) {
      CAPTURE(features);
      CAPTURE(c_bytes);
      const int rows = at::rows_for(features, c_bytes);
      CHECK((rows >= 1 && rows <= 32 && (rows & (rows - 1)) == 0));
      if (at::fits(features, c_bytes)) CHECK(4 * std::size_t(rows) * std::size_t(features + 1) * c_bytes <= at::shared_bytes);
      if (rows < 32) CHECK(4 * std::size_t(2 * rows) * std::size_t(features + 1) * c_bytes > at::shared_bytes);
      for (bool tokens_contiguous : {false, true}) {  // threads t, turns e = t + k * rows (load_tile)
        std::vector<int> seen(std::size_t(rows) * std::size_t(features), 0);
        for (int t = 0; t < rows; ++t)
          for (int e = t; e < rows * int(features); e += rows) {
            const auto s = at::slot_of(e, rows, int(features), tokens_contiguous);
            REQUIRE((s.row >= 0 && s.row < rows && s.feature >= 0 && s.feature < features));
            ++seen[std::size_t(s.row) * std::size_t(features) + std::size_t(s.feature)];
          }
        CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
      }
    }
  CHECK_FALSE(at::fits(1280, 8));
  // Blocks: head = block / per_head, rows first = block % per_head * rows + thread (rows_of).
  for (ctg::dim_t tokens : {0, 1, 31, 32, 33, 37, 100})
    for (int rows : {1, 8, 32}) {
      const ctg::dim_t heads = 3, per_head = at::blocks_per_head(tokens, rows);
      std::vector<int> seen(std::size_t(heads * tokens), 0);
      for (ctg::dim_t block = 0; block < heads * per_head; ++block)
        for (int t = 0; t < rows; ++t) {
          const ctg::dim_t head = block / per_head, row = block % per_head * rows + t;
          if (row < tokens) ++seen[std::size_t(head * tokens + row)];
        }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
    }
}
