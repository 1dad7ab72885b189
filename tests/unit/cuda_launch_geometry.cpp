// What a CUDA launch covers (exec/cuda/launch_geometry.hpp), without a GPU:
// the kernels' grid-stride loops (exec/cuda/fused_kernel.cuh) simulated
// thread by thread with the grids the host functions give. Every element,
// and every row, is visited exactly once.
#include <doctest/doctest.h>

#include <vector>

#include <ctg/exec/cuda/launch_geometry.hpp>

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
  CHECK(ctg::cuda::blocks_for(std::size_t(1) << 30, 256, 132) == 4 * 132);
  CHECK(ctg::cuda::blocks_for(300, 256, 132) == 2);
  CHECK(ctg::cuda::blocks_for(0, 256, 132) == 1);
  CHECK(ctg::cuda::blocks_for(1000, 128, 132, 4) == 2);  // (4 elements per thread)
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
}
