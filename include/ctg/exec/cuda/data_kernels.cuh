#pragma once
// The CUDA store's kernels that are not fused groups or GEMMs: the transpose
// of the last two dims, gather and scatter_add (embeddings), quantize and
// dequantize (FP8), the gradient accumulation of micro-batches and the FP8
// delayed-scaling update. The flat ones (widen, amax, quantize, dequantize,
// accumulate) take 16 bytes at a time where the launch allows
// (exec/cuda/flat_chunks.hpp). Each computes what its CPU twin computes
// (exec/cpu/index_ops.hpp, exec/cpu/quantize.hpp, exec/cpu/store.hpp) with the
// same element functions, so the same bits:
//   * scatter_add adds each output element's rows in the order of the ids,
//     each run of equal ids (sorted first) by threads a column each
//     (exec/cuda/scatter_runs.hpp: no atomics, so two runs are bitwise equal);
//   * quantize takes the amax as the max of the bit patterns of |x| (a max
//     is exact and order-free; a NaN's pattern is above every number's, so a
//     NaN amax stays NaN, as on the CPU).
#include <cstdint>

#include <ctg/core/dtype_rules.hpp>
#include <ctg/core/fp8_scaling.hpp>
#include <ctg/core/type_list.hpp>
#include <ctg/exec/buffers.hpp>
#include <ctg/exec/cuda/flat_chunks.hpp>
#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/exec/cuda/scatter_runs.hpp>
#include <ctg/exec/cuda/transpose_tiles.hpp>

namespace ctg::cuda::kernels {

// A kernel's element types come as one tl::list: nvcc's host pass spells a
// kernel's bare type arguments through the typedefs they were reached by
// (node::dtype of a node that names the user's leaves), a template-id's
// arguments plainly.
template <class Ts, std::size_t I>
using type_at = tl::at_t<I, Ts>;

// C elements of `from` in registers, in wide loads (flat_chunks.hpp).
template <dim_t C, class T>
__device__ CTG_FORCEINLINE void load_elements(T (&to)[C], const T* from) {
  kernel::copy_wide<C * sizeof(T)>(to, from);
}
template <dim_t C, class T>
__device__ CTG_FORCEINLINE void store_elements(T* to, const T (&from)[C]) {
  kernel::copy_wide<C * sizeof(T)>(to, from);
}

// out[i] = f(in[i]) for n elements, in chunks where `width` says, two
// chunks a turn (flat_chunks.hpp), f applied in element order.
template <class From, class To, class F>
__device__ CTG_FORCEINLINE void map_flat(const From* in, To* out, dim_t n, dim_t width, F&& f) {
  for_flat_chunk_pairs<kernel::chunk_elements<From, To>>(n, width, this_thread(), [&](dim_t i, dim_t j, auto count) {
    constexpr dim_t C = decltype(count)::value;
    alignas(16) From a[C], next[C];
    alignas(16) To b[C];
    load_elements(a, in + i);
    if (j != no_chunk) load_elements(next, in + j);
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) b[k] = f(a[k]);
    store_elements(out + i, b);
    if (j == no_chunk) return;
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) b[k] = f(next[k]);
    store_elements(out + j, b);
  });
}

// out[i] = in[i] as To (a matmul's narrower operand widened: exact).
template <class Ts>  // <From, To>
__global__ void widen(const type_at<Ts, 0>* in, type_at<Ts, 1>* out, dim_t n, dim_t width) {
  using From = type_at<Ts, 0>;
  using To = type_at<Ts, 1>;
  map_flat(in, out, n, width, [](From v) { return store_as<To>(load_as<From>(v)); });
}

// `batches` matrices rows x cols of T, each written cols x rows: a tile of
// 32 x 32 per block at a time (exec/cuda/transpose_tiles.hpp).
template <class Ts>
__global__ void __launch_bounds__(transpose_tiles::threads)
    transpose(const type_at<Ts, 0>* in, type_at<Ts, 0>* out, transpose_tiles tiles) {
  constexpr dim_t edge = transpose_tiles::edge;
  __shared__ type_at<Ts, 0> mem[edge][edge + 1];  // (+1: a column's reads fall in different banks)
  const dim_t x = threadIdx.x % edge, line = threadIdx.x / edge;
  for (dim_t t = blockIdx.x; t < tiles.count; t += gridDim.x) {
    const transpose_tiles::tile p = tiles.at(t);
    tiles.load(p, in, mem, x, line);
    __syncthreads();
    tiles.store(p, mem, out, x, line);
    __syncthreads();  // (the block's next tile reuses mem)
  }
}

// out[i, :] = table[ids[i], :] (row_len elements per row; ids checked before the step).
template <class Ts>
__global__ void gather(const type_at<Ts, 0>* table, const i32* ids, type_at<Ts, 0>* out, dim_t row_len, dim_t total) {
  for (dim_t e = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; e < total; e += dim_t{gridDim.x} * blockDim.x) {
    const dim_t i = e / row_len, k = e % row_len;
    out[e] = table[ids[i] * row_len + k];
  }
}

// positions[i] = i, for the sort of scatter_add's ids.
template <int = 0>
__global__ void positions(std::int32_t* p, dim_t n) {
  for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < n; i += dim_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<std::int32_t>(i);
}

// out (zeroed) at each run of the sorted ids: block b takes sorted positions
// b, b + grid, ..., its threads the row's columns (scatter_runs.hpp).
template <class Ts>  // <TO, TG>
__global__ void scatter_add_runs(const std::int32_t* sorted_ids, const std::int32_t* sorted_positions, dim_t n,
                                 const type_at<Ts, 1>* rows_in, dim_t row_len, type_at<Ts, 0>* out) {
  for (dim_t s = blockIdx.x; s < n; s += gridDim.x)
    for (dim_t k = threadIdx.x; k < row_len; k += blockDim.x)
      scatter_add_run(sorted_ids, sorted_positions, n, s, k, rows_in, row_len, out);
}

// The amax of n values into *amax_bits (zeroed before): each block's max, then one atomicMax.
__device__ inline void block_amax(float local, unsigned* amax_bits) {
  __shared__ unsigned block;
  if (threadIdx.x == 0) block = 0;
  __syncthreads();
  atomicMax(&block, __float_as_uint(fabsf(local)));
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(amax_bits, block);
}
// (Current scaling's pass before the cast: in chunks where `width` says,
// two a turn, as map_flat; a max is order-free, so the same bits.)
template <class Ts>
__global__ void amax(const type_at<Ts, 0>* x, dim_t n, dim_t width, unsigned* amax_bits) {
  using TX = type_at<Ts, 0>;
  float m = 0.0f;
  for_flat_chunk_pairs<kernel::chunk_elements<TX>>(n, width, this_thread(), [&](dim_t i, dim_t j, auto count) {
    constexpr dim_t C = decltype(count)::value;
    alignas(16) TX a[C], next[C];
    load_elements(a, x + i);
    if (j != no_chunk) load_elements(next, x + j);
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) m = fp8_scaling::amax_combine(m, fabsf(static_cast<float>(load_as<TX>(a[k]))));
    if (j == no_chunk) return;
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) m = fp8_scaling::amax_combine(m, fabsf(static_cast<float>(load_as<TX>(next[k]))));
  });
  block_amax(m, amax_bits);
}

// The cast of x with the scale the recipe gives, and the side data
// (exec/buffers.hpp). Delayed: the stored scale (*scale_leaf), the amax taken
// in the same pass. Current: the scale from the amax taken before.
template <class Ts, bool Delayed, int Margin>  // Ts: <TX, Fmt>
__global__ void quantize(const type_at<Ts, 0>* x, type_at<Ts, 1>* q, dim_t n, const float* scale_leaf,
                         fp8_side_data* side, dim_t width) {
  using TX = type_at<Ts, 0>;
  using Fmt = type_at<Ts, 1>;
  float scale = 1.0f;
  if constexpr (Delayed) {
    scale = *scale_leaf;
  } else {
    scale = fp8_scaling::current_scale(side->amax, dtype_traits<Fmt>::max, Margin);  // (as the CPU's: exec/cpu/quantize.hpp)
  }
  float m = 0.0f;
  map_flat(x, q, n, width, [&](TX e) {
    const float v = static_cast<float>(load_as<TX>(e));
    if constexpr (Delayed) m = fp8_scaling::amax_combine(m, fabsf(v));
    return fp8_scaling::quantize<Fmt>(v, scale);
  });
  if constexpr (Delayed) block_amax(m, reinterpret_cast<unsigned*>(&side->amax));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    side->scale = scale;
    // (Current: the amax is known. Delayed: set by delayed_scale_inv once every block's amax is in.)
    if constexpr (!Delayed) side->scale_inv = fp8_scaling::scale_inv_of(side->amax, scale);
  }
}

// Delayed scaling, after quantize: the tensor's scale_inv from its amax
// (fp8_scaling::scale_inv_of: NaN when the amax is not finite). One thread.
// (A template, as every kernel of a header: defined plainly, it was defined
// again in each .cu that includes it, and a program of two did not link.)
template <int = 0>
__global__ void delayed_scale_inv(fp8_side_data* side) {
  side->scale_inv = fp8_scaling::scale_inv_of(side->amax, side->scale);
}

template <class Ts>  // <Fmt, T>
__global__ void dequantize(const type_at<Ts, 0>* q, const fp8_side_data* side, type_at<Ts, 1>* out, dim_t n,
                           dim_t width) {
  using Fmt = type_at<Ts, 0>;
  using T = type_at<Ts, 1>;
  const float scale_inv = side->scale_inv;
  map_flat(q, out, n, width, [=](Fmt e) { return store_as<T>(fp8_scaling::dequantize<Fmt>(e, scale_inv)); });
}

// dst += src, in T's compute type, rounded once to T.
template <class Ts>
__global__ void accumulate(type_at<Ts, 0>* dst, const type_at<Ts, 0>* src, dim_t n, dim_t width) {
  using T = type_at<Ts, 0>;
  for_flat_chunk_pairs<kernel::chunk_elements<T>>(n, width, this_thread(), [&](dim_t i, dim_t j, auto count) {
    constexpr dim_t C = decltype(count)::value;
    alignas(16) T d[C], s[C], next_d[C], next_s[C];
    load_elements(d, dst + i);
    load_elements(s, src + i);
    if (j != no_chunk) {
      load_elements(next_d, dst + j);
      load_elements(next_s, src + j);
    }
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) d[k] = store_as<T>(load_as<T>(d[k]) + load_as<T>(s[k]));
    store_elements(dst + i, d);
    if (j == no_chunk) return;
    CTG_UNROLL
    for (dim_t k = 0; k < C; ++k) next_d[k] = store_as<T>(load_as<T>(next_d[k]) + load_as<T>(next_s[k]));
    store_elements(dst + j, next_d);
  });
}

// A value of n <= 8 bytes (its bits in `bits`, little-endian) written to
// dst: in order on the stream, and captured into a graph as its argument.
template <int = 0>
__global__ void write_value(std::byte* dst, std::uint64_t bits, unsigned n) {
  for (unsigned i = 0; i < n; ++i) dst[i] = static_cast<std::byte>(bits >> (8 * i));
}

// Work done layer by layer (F::run_layer: FP8 delayed scaling's fold and
// update, exec/fp8_state.hpp), a thread per layer.
template <class F>
__global__ void each_layer(F work, std::size_t layers) {
  // (Over the grid in strides: blocks_for caps the grid, at 8 blocks an SM.)
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t l = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < layers; l += stride)
    work.run_layer(l);
}

}  // namespace ctg::cuda::kernels

namespace ctg::cuda {

// kernels::transpose over `batches` matrices rows x cols on the device's stream.
template <class T>
void launch_transpose(const device& dev, const T* in, T* out, dim_t rows, dim_t cols, dim_t batches) {
  const transpose_tiles tiles(rows, cols, batches);
  if (tiles.count == 0) return;
  kernels::transpose<tl::list<T>><<<dev.blocks_for(static_cast<std::size_t>(tiles.count), 1),
                                    transpose_tiles::threads, 0, dev.stream()>>>(in, out, tiles);
  check_launch("ctg::cuda::kernels::transpose");
}

}  // namespace ctg::cuda
