#pragma once
// How the CUDA scatter_add (an embedding's gradient: each row i of g added
// at row ids[i] of a zeroed table) runs in parallel and still gives the CPU's
// bits (exec/cpu/index_ops.hpp adds the rows in the order of i). The ids are
// sorted with their positions, stably (cub::DeviceRadixSort: library code),
// so each id's positions form a run in increasing order; then thread (s, k)
// where s starts a run adds column k of the run's rows in that order, from
// zero, and writes the sum once. No atomics, no thread waits on another, and
// each table element gets the CPU's additions in the CPU's order.
//
// (The first kernel gave each column a thread walking every id: a
// [8192 tokens, 768] gradient ran 768 threads, 3 blocks, each 8192 additions
// in sequence, every one waiting on the table element it read.)
//
// Host and device code: tests/unit/cuda_scatter_runs.cpp runs every (s, k)
// on the CPU, with std::stable_sort for the sort, against the CPU backend
// (its runner, and a store's gradient); tests/cuda/index_ops.cu on a GPU.
#include <bit>
#include <cstddef>
#include <cstdint>

#include <ctg/core/config.hpp>
#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/shape.hpp>

namespace ctg::cuda {

// Sorted position s of the ids: where column k of its run's sum goes, if s
// starts a run (nothing otherwise). sorted_ids[s] is the id at position
// positions[s] of the ids, sorted stably by id.
template <class TO, class TG>
CTG_HD void scatter_add_run(const std::int32_t* sorted_ids, const std::int32_t* positions, dim_t n, dim_t s, dim_t k,
                            const TG* rows_in, dim_t row_len, TO* out) {
  const std::int32_t id = sorted_ids[s];
  if (s > 0 && sorted_ids[s - 1] == id) return;  // (within a run: its first position sums it)
  TO sum = TO(0);  // (the CPU's zeroed table, then += in the same type: the same bits)
  for (dim_t t = s; t < n && sorted_ids[t] == id; ++t)
    sum += static_cast<TO>(load_as<TG>(rows_in[dim_t{positions[t]} * row_len + k]));
  out[dim_t{id} * row_len + k] = sum;
}

// The low bits a radix sort of ids in [0, rows) needs to look at.
constexpr int id_bits(dim_t rows) {
  const int bits = rows > 1 ? std::bit_width(static_cast<std::uint64_t>(rows - 1)) : 1;
  return bits < 31 ? bits : 31;
}

// Where the sort's buffers lie in one scratch arena, each 256-byte aligned:
// the positions 0..n-1, the sorted ids, their positions, and the sort's own
// temporary storage (its size as cub asks for it).
struct scatter_sort_layout {
  std::size_t positions = 0, sorted_ids = 0, sorted_positions = 0, temp = 0, temp_bytes = 0, bytes = 0;
  scatter_sort_layout(std::size_t n, std::size_t temp_storage) : temp_bytes(temp_storage) {
    auto take = [&](std::size_t b) {
      const std::size_t at = bytes;
      bytes += (b + 255) / 256 * 256;
      return at;
    };
    positions = take(n * sizeof(std::int32_t));
    sorted_ids = take(n * sizeof(std::int32_t));
    sorted_positions = take(n * sizeof(std::int32_t));
    temp = take(temp_bytes);
  }
};

}  // namespace ctg::cuda
