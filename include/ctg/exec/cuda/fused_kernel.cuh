#pragma once
// One fusion group, one kernel: the group's name-free body
// (kernel::body_t, lower/kernel_expr.hpp) evaluated by the same CTG_HD code as
// the CPU loops.
//   * elementwise groups: chunks of a row in 16-byte loads and stores where
//     the launch allows, else element by element; tiles of a row per block
//     where rows are long, else a chunk (element) per thread, grid-stride
//     (exec/cuda/elementwise_thread.hpp);
//   * row groups (inlined row reductions, e.g. softmax or a norm, and row
//     reductions as roots): one warp per row where rows are at most 2048
//     long, else one block, its threads taking the row's elements, or its
//     chunks in 16-byte loads, in turn (exec/cuda/row_thread.hpp); each
//     reduction in f64 (warp shuffles, or a CUB block reduction), in slot
//     order, its result shared before the row's elements are written; a
//     sum whose values the output reads again (softmax's exp) kept in
//     shared memory as it is summed (the row cache);
//   * reductions over other axes: chunks of each output's visits summed in
//     parallel (where the last dim is kept, V outputs of a row at once in
//     16-byte loads, as the launch allows; where it is summed too, 16
//     threads per chunk, a lane of each row each), then each output's
//     chunks in a fixed order, a block per output (launch_axis_reduce,
//     exec/cuda/axis_reduce_map.hpp).
// Elementwise results equal the CPU's bit for bit (f64's exp, log, tanh and
// erf excepted: each side's library's, core/math.hpp). Reductions combine in
// another order than the CPU's row order (a tree, or chunks), so they agree
// with the CPU within f64 rounding before the single rounding to the node's
// dtype; the order is fixed by the shapes, so two runs give the same bits.
#include <cub/block/block_reduce.cuh>

#include <ctg/exec/cuda/axis_reduce_map.hpp>
#include <ctg/exec/cuda/elementwise_thread.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/exec/cuda/row_thread.hpp>
#include <ctg/exec/cuda/runtime.cuh>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

namespace ctg::cuda {

// Kernels are instantiated on a group's name-free plan (kernel::fused_plan:
// body, inlined reductions, root reduction, dtype), one type: nvcc's host
// pass spells a kernel's bare type arguments through the typedefs they were
// reached by, which name the user's graph; inside a template-id it spells
// them plainly.

// Each thread as elementwise_thread.hpp says: chunks of `width` elements in
// 16-byte loads and stores where the launch allows, else element by element.
template <class Plan, std::size_t K, std::size_t NR>
__global__ void elementwise_group(kernel::context<K, NR> c, kernel::loop_layout<K> layout,
                                  typename Plan::outputs out, dim_t width) {
  elementwise_thread<Plan>(c, layout, out, width, this_thread());
}

}  // namespace ctg::cuda

namespace ctg::detail {
template <class Op>
struct cub_combine_with {
  __device__ double operator()(double a, double b) const { return Op::combine(a, b); }
};

// Reduction R of the row, over the block: every thread folds its part of
// the row (row_thread.hpp), the block combines the parts, and thread 0 takes
// R's value. With `keep` (the row cache), each value folded is kept at keep[j] too.
template <class R, unsigned Threads, ctg::dim_t V, class Ctx, class Keep = std::nullptr_t>
__device__ double block_row_reduce(const Ctx& c, dim_t L, dim_t width, void* temp_storage, double* shared,
                                   Keep keep = nullptr) {
  using reduce = cub::BlockReduce<double, Threads>;
  const double part = ctg::cuda::row_part<R, V>(c, L, width, threadIdx.x, Threads, keep);
  const double all = reduce(*static_cast<typename reduce::TempStorage*>(temp_storage))
                         .Reduce(part, cub_combine_with<typename R::op>{});
  if (threadIdx.x == 0) *shared = R::value_of(all, L);
  __syncthreads();
  const double v = *shared;
  __syncthreads();  // temp storage and `shared` are reused by the next reduction
  return v;
}

// v of each of Width lanes (a power of two up to 32; mask: the lanes taking
// part) combined by shuffles down to the first lane (halving: lane l with lane
// l + h, for h = Width / 2, ..., 1), the result given to all of them.
template <class Op, unsigned Width>
__device__ double shuffle_fold(double v, unsigned mask) {
#pragma unroll
  for (unsigned h = Width / 2; h >= 1; h /= 2) v = Op::combine(v, __shfl_down_sync(mask, v, h, Width));
  return __shfl_sync(mask, v, 0, Width);
}

// Reduction R of the row, over a warp: every lane folds its part of the row
// (row_thread.hpp), the parts combine by shuffle_fold, and every lane takes
// R's value. With `keep` (the row cache), each value folded is kept at keep[j] too.
template <class R, ctg::dim_t V, class Ctx, class Keep = std::nullptr_t>
__device__ double warp_row_reduce(const Ctx& c, dim_t L, dim_t width, unsigned lane, Keep keep = nullptr) {
  const double part = ctg::cuda::row_part<R, V>(c, L, width, lane, ctg::cuda::warp_threads, keep);
  return R::value_of(shuffle_fold<typename R::op, ctg::cuda::warp_threads>(part, 0xFFFFFFFFu), L);
}

// Each of the row's reductions Rs into t.local, in slot order, by
// reduce(std::type_identity<R>{}, keep): the row cache's (Cached) keeping
// its values at `kept`, the others nothing (keep = nullptr).
template <class Cached, class... Rs, class Ctx, class Kept, class Reduce>
__device__ void reduce_row_keeping(tl::list<Rs...>, Ctx& t, Kept* kept, Reduce&& reduce) {
  auto one = [&]<class R>(std::type_identity<R>) {
    if constexpr (std::is_same_v<R, Cached>) return reduce(std::type_identity<R>{}, kept);
    else return reduce(std::type_identity<R>{}, nullptr);
  };
  ((t.local[Rs::slot] = one(std::type_identity<Rs>{})), ...);
}
}  // namespace ctg::detail

namespace ctg::cuda {

// Rows short enough for a warp (rows_take_a_warp): a warp per row, its
// lanes taking the row's elements or chunks in turn as a block's threads
// would, each reduction a warp_row_reduce. An output whose body reads a
// sum's values keeps them as it sums them (the row cache, as row_group's),
// each warp in its slice of shared memory, for rows of up to
// warp_row_cache_bytes of them; longer rows compute them again.
inline constexpr std::size_t warp_row_cache_bytes = 4096;  // (8 warps: 32 KB a block)
template <class Plan, std::size_t K, std::size_t NR>
__global__ void __launch_bounds__(warp_threads * warps_per_row_block)
    warp_row_group(kernel::context<K, NR> c, kernel::loop_layout<K> layout, typename Plan::outputs out, dim_t width) {
  using Body = typename Plan::body;
  using Reductions = typename Plan::reductions;
  using T = typename Plan::dtype;
  constexpr dim_t V = plan_chunk<Plan>;
  using ctx = kernel::context<K, NR>;
  using cached = std::conditional_t<Plan::loop == loop_kind::row_reduce, void,
                                    typename ctg::detail::row_cache_of<Body, Reductions>::type>;
  const unsigned lane = threadIdx.x % warp_threads, warp = threadIdx.x / warp_threads;
  const dim_t L = layout.row_length(), rows = layout.rows();
  const dim_t first_row = blockIdx.x * dim_t{warps_per_row_block} + warp, row_step = dim_t{gridDim.x} * warps_per_row_block;
  if constexpr (!std::is_void_v<cached>) {
    using Kept = decltype(cached::child::value(std::declval<const ctx&>(), dim_t(0)));
    constexpr dim_t limit = warp_row_cache_bytes / sizeof(Kept);
    __shared__ Kept kept_by_warp[warps_per_row_block][limit];
    if (L <= limit) {
      Kept* kept = kept_by_warp[warp];
      for (dim_t row = first_row; row < rows; row += row_step) {
        kernel::kept_context<ctx, Kept> t;
        static_cast<ctx&>(t) = c;
        t.kept = kept;
        layout.enter_row(t, row);
        ctg::detail::reduce_row_keeping<cached>(Reductions{}, t, kept, [&]<class Q>(std::type_identity<Q>, auto keep) {
          return ctg::detail::warp_row_reduce<Q, V>(t, L, width, lane, keep);
        });
        // (A lane reads back only the elements it kept itself, in the same
        // order: no wait, and none before the next row.)
        row_outputs<ctg::detail::row_cache_body<Body, cached>, V>(t, L, width, out.from(row * L), lane, warp_threads);
      }
      return;
    }
  }
  for (dim_t row = first_row; row < rows; row += row_step) {
    ctx t = c;
    layout.enter_row(t, row);
    [&]<class... Rs>(tl::list<Rs...>) {
      ((t.local[Rs::slot] = ctg::detail::warp_row_reduce<Rs, V>(t, L, width, lane)), ...);
    }(Reductions{});
    if constexpr (Plan::loop != loop_kind::row_reduce) {
      row_outputs<Body, V>(t, L, width, out.from(row * L), lane, warp_threads);
    } else {
      using root = kernel::row_reduction<0, typename Plan::root_op, T, Body>;
      const double v = ctg::detail::warp_row_reduce<root, V>(t, L, width, lane);
      if (lane == 0) out.root[row] = store_as<T>(v);
    }
  }
}

// Root: either the group's elementwise output or (loop_kind::row_reduce) a
// row reduction written once per row. An output whose body reads a sum's
// values keeps them in shared memory as it sums them (the row cache,
// lower/kernel_expr.hpp), for rows of up to kernel::row_cache_limit.
template <class Plan, unsigned Threads, std::size_t K, std::size_t NR>
__global__ void __launch_bounds__(Threads)
    row_group(kernel::context<K, NR> c, kernel::loop_layout<K> layout, typename Plan::outputs out, dim_t width) {
  using Body = typename Plan::body;
  using Reductions = typename Plan::reductions;
  using T = typename Plan::dtype;
  constexpr dim_t V = plan_chunk<Plan>;
  using ctx = kernel::context<K, NR>;
  using cached = std::conditional_t<Plan::loop == loop_kind::row_reduce, void,
                                    typename ctg::detail::row_cache_of<Body, Reductions>::type>;
  __shared__ typename cub::BlockReduce<double, Threads>::TempStorage temp;
  __shared__ double shared;
  const dim_t L = layout.row_length(), rows = layout.rows();
  if constexpr (!std::is_void_v<cached>) {
    using Kept = decltype(cached::child::value(std::declval<const ctx&>(), dim_t(0)));
    __shared__ Kept kept[kernel::row_cache_limit];
    if (L <= kernel::row_cache_limit) {
      for (dim_t row = blockIdx.x; row < rows; row += gridDim.x) {
        kernel::kept_context<ctx, Kept> t;
        static_cast<ctx&>(t) = c;
        t.kept = kept;
        layout.enter_row(t, row);
        ctg::detail::reduce_row_keeping<cached>(Reductions{}, t, kept, [&]<class Q>(std::type_identity<Q>, auto keep) {
          return ctg::detail::block_row_reduce<Q, Threads, V>(t, L, width, &temp, &shared, keep);
        });
        // (A thread reads back only the elements it kept itself, in the
        // same order: no wait, and none before the next row.)
        row_outputs<ctg::detail::row_cache_body<Body, cached>, V>(t, L, width, out.from(row * L), threadIdx.x,
                                                                   Threads);
      }
      return;
    }
  }
  for (dim_t row = blockIdx.x; row < rows; row += gridDim.x) {
    kernel::context<K, NR> t = c;
    layout.enter_row(t, row);
    [&]<class... Rs>(tl::list<Rs...>) {
      ((t.local[Rs::slot] = ctg::detail::block_row_reduce<Rs, Threads, V>(t, L, width, &temp, &shared)), ...);
    }(Reductions{});
    if constexpr (Plan::loop != loop_kind::row_reduce) {
      row_outputs<Body, V>(t, L, width, out.from(row * L), threadIdx.x, Threads);
    } else {
      using root = kernel::row_reduction<0, typename Plan::root_op, T, Body>;
      const double v = ctg::detail::block_row_reduce<root, Threads, V>(t, L, width, &temp, &shared);
      if (threadIdx.x == 0) out.root[row] = store_as<T>(v);
    }
  }
}

// A visited row's combination by kernel::row_sum_lanes (16) consecutive
// threads of a warp (mask: theirs), lane u taking combine_row's lane u
// (kernel::row_reduction::lane_part), folded by shuffles in fold_lanes'
// order (shuffle_fold): combine_row's bits, given to all 16. (A thread per
// row would leave the GPU idle where few outputs sum long rows: a loss
// summed over every element of [8192, 4096].)
struct row_lanes {
  unsigned lane, mask;
  template <class R, class Ctx>
  __device__ double combine(const Ctx& c, dim_t L) const {
    return ctg::detail::shuffle_fold<typename R::op, unsigned{R::lanes}>(R::lane_part(c, L, lane), mask);
  }
};

// Root reducing axes other than the last (exec/cuda/axis_reduce_map.hpp):
// chunks of outputs' visits. With one chunk per output it writes the
// outputs; else their partials, which axis_reduce_combine adds up. Where
// the loop's last dim is kept and at least a block long, a thread walks up
// to tile_elements_per_thread outputs of a row at once (axis_reduce_tiling);
// else one chunk of one output.
template <class Plan, std::size_t K, std::size_t NR>
__global__ void axis_reduce_group(kernel::context<K, NR> c, kernel::loop_layout<K> layout, axis_reduce_map map,
                                  axis_reduce_split split, double count, double* partials, void* out_bytes,
                                  dim_t width) {
  using T = typename Plan::dtype;
  using Op = typename Plan::root_op;
  T* out = static_cast<T*>(out_bytes);
  auto write = [&](dim_t chunk, dim_t o, double v) {
    if (split.chunks == 1) out[o] = store_as<T>(Op::finalize(v, count));
    else partials[chunk * map.outputs + o] = v;
  };
  if constexpr (rows_in_lanes<Plan>) {
    // Each chunk of an output's rows by kernel::row_sum_lanes threads (row_lanes).
    constexpr unsigned lanes = unsigned{kernel::row_sum_lanes};
    const unsigned lane = threadIdx.x % lanes;
    const row_lanes rows{lane, ((1u << lanes) - 1) << (threadIdx.x % warp_threads / lanes * lanes)};
    const dim_t total = split.chunks * map.outputs, groups = dim_t{blockDim.x / lanes};
    for (dim_t i = blockIdx.x * groups + threadIdx.x / lanes; i < total; i += dim_t{gridDim.x} * groups) {
      const dim_t chunk = split.chunks == 1 ? 0 : i / map.outputs, o = i - chunk * map.outputs;
      const double v =
          axis_reduce_output<Plan>(c, layout, map, o, split.first(chunk), split.end(chunk, map.per_output), rows);
      if (lane == 0) write(chunk, o, v);
    }
    return;
  }
  if constexpr (Plan::root_advances && plan_chunk<Plan> > 1) {
    // In chunks of V outputs of a row: each visited row's V values in 16-byte loads.
    constexpr dim_t V = plan_chunk<Plan>;
    if (width > 1) {
      const dim_t per_chunk = map.outputs / V, total = split.chunks * per_chunk;
      for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < total; i += dim_t{gridDim.x} * blockDim.x) {
        const dim_t chunk = i / per_chunk, o = (i - chunk * per_chunk) * V;
        double acc[V];
        axis_reduce_outputs<Plan, V>(c, layout, map, o, 1, V, split.first(chunk), split.end(chunk, map.per_output),
                                     acc, true);
        CTG_UNROLL
        for (dim_t k = 0; k < V; ++k) write(chunk, o + k, acc[k]);
      }
      return;
    }
  }
  if constexpr (Plan::root_advances) {
    if (axis_reduce_tiling::applies<Plan>(map, blockDim.x)) {
      constexpr unsigned N = tile_elements_per_thread;
      const axis_reduce_tiling tiling(map, split, blockDim.x);
      for (dim_t tile = blockIdx.x; tile < tiling.tiles.count; tile += gridDim.x) {
        const axis_reduce_tiling::work w = tiling.at(tile, threadIdx.x);
        if (w.n == 0) continue;
        double acc[N];
        axis_reduce_outputs<Plan, N>(c, layout, map, w.output, blockDim.x, w.n, split.first(w.chunk),
                                     split.end(w.chunk, map.per_output), acc);
#pragma unroll
        for (unsigned k = 0; k < N; ++k)
          if (k < w.n) write(w.chunk, w.output + k * blockDim.x, acc[k]);
      }
      return;
    }
  }
  const dim_t total = split.chunks * map.outputs;
  for (dim_t i = blockIdx.x * dim_t{blockDim.x} + threadIdx.x; i < total; i += dim_t{gridDim.x} * blockDim.x) {
    const dim_t chunk = split.chunks == 1 ? 0 : i / map.outputs, o = i - chunk * map.outputs;
    write(chunk, o,
          axis_reduce_output<Plan>(c, layout, map, o, split.first(chunk), split.end(chunk, map.per_output)));
  }
}

// Each output's partials combined in combine_chunks' order, a block per
// output, a lane per thread. (Op and T as a template-id: instantiated once
// per reduction and dtype, not per group.)
template <class OpAndT>
__global__ void __launch_bounds__(combine_lanes)
    axis_reduce_combine(const double* partials, dim_t chunks, dim_t outputs, double count, void* out_bytes) {
  using Op = tl::at_t<0, OpAndT>;
  using T = tl::at_t<1, OpAndT>;
  T* out = static_cast<T*>(out_bytes);
  __shared__ double lane[combine_lanes];
  for (dim_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    lane[threadIdx.x] = combine_lane<Op>(partials, chunks, outputs, o, threadIdx.x);
    __syncthreads();
    for (unsigned h = combine_lanes / 2; h > 0; h /= 2) {
      if (threadIdx.x < h) lane[threadIdx.x] = Op::combine(lane[threadIdx.x], lane[threadIdx.x + h]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[o] = store_as<T>(Op::finalize(lane[0], count));
    __syncthreads();  // (lane 0 read before the next output overwrites it)
  }
}

// Launches the fused group with this plan over `layout`, writing `out`
// (its root, and its side output where it has one), on the device's stream.
template <class GroupPlan, std::size_t K, std::size_t NR>
void launch_fused(const device& dev, const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                  typename GroupPlan::outputs out) {
  // (The plan spelled as a template-id: GroupPlan may have been reached
  // through kernel::fused_plan_t, which names the graph.)
  using Plan = kernel::fused_plan<typename GroupPlan::body, typename GroupPlan::reductions, typename GroupPlan::dtype,
                                  GroupPlan::loop, typename GroupPlan::root_op, GroupPlan::root_advances,
                                  GroupPlan::inputs, typename GroupPlan::side_dtype>;
  constexpr loop_kind loop = Plan::loop;
  static_assert(loop != loop_kind::axis_reduce, "ctg: internal: a reduction over other axes: launch_axis_reduce");
  constexpr unsigned threads = 256;
  if constexpr (loop == loop_kind::flat || (loop == loop_kind::rows && Plan::reductions::size == 0)) {
    const dim_t L = layout.row_length(), rows = layout.rows();
    if (rows * L == 0) return;
    const dim_t width = chunk_width<Plan>(c, layout, out);
    const std::size_t work = elementwise_work(rows, L, width, threads);
    elementwise_group<Plan><<<dev.blocks_for(work, threads), threads, 0, dev.stream()>>>(c, layout, out, width);
    check_launch("ctg::cuda::elementwise_group");
  } else {
    const std::size_t rows = static_cast<std::size_t>(layout.rows());
    if (rows == 0) return;
    if (rows_take_a_warp(static_cast<std::size_t>(layout.row_length()))) {
      warp_row_group<Plan><<<warp_row_blocks(rows), warp_threads * warps_per_row_block, 0, dev.stream()>>>(
          c, layout, out, chunk_width<Plan>(c, layout, out));
      check_launch("ctg::cuda::warp_row_group");
      return;
    }
    row_group<Plan, threads>
        <<<row_blocks(rows), threads, 0, dev.stream()>>>(c, layout, out, chunk_width<Plan>(c, layout, out));
    check_launch("ctg::cuda::row_group");
  }
}

// Launches the reduction group with this plan (loop_kind::axis_reduce): its
// loop over the shape `it`, writing `out` of shape `out_shape`; `partials`
// holds the chunks' sums between the two kernels (made at its largest with the workspace).
template <class GroupPlan, std::size_t K, std::size_t NR, class T>
void launch_axis_reduce(const device& dev, const kernel::context<K, NR>& c, const kernel::loop_layout<K>& layout,
                        const rt_shape& it, const rt_shape& out_shape, T* out, arena& partials) {
  using Plan = kernel::fused_plan<typename GroupPlan::body, typename GroupPlan::reductions, typename GroupPlan::dtype,
                                  GroupPlan::loop, typename GroupPlan::root_op, GroupPlan::root_advances,
                                  GroupPlan::inputs>;
  static_assert(!GroupPlan::outputs::has_side, "ctg: internal: only an elementwise group has a side output");
  static_assert(Plan::loop == loop_kind::axis_reduce,
                "ctg: internal: launch_axis_reduce runs reductions over other axes");
  const axis_reduce_map map = make_axis_reduce_map(it, out_shape, !Plan::root_advances);
  if (map.outputs == 0) return;
  const axis_reduce_split split = axis_reduce_split_for<Plan>(map);
  const dim_t total = it.numel();
  const double count = static_cast<double>(total) / static_cast<double>(map.outputs);
  const std::size_t sums = static_cast<std::size_t>(split.chunks * map.outputs);
  auto* part = reinterpret_cast<double*>(split.chunks > 1 ? take_reserved(partials, sums * sizeof(double),
                                                                            "a reduction over other axes")
                                                           : partials.data());
  constexpr unsigned threads = axis_reduce_block_threads;
  const dim_t width = axis_reduce_chunks<Plan>(map) ? chunk_width<Plan>(c, layout, {out, nullptr}) : 1;
  const std::size_t work = axis_reduce_threads<Plan>(map, split, width);
  axis_reduce_group<Plan><<<dev.blocks_for(work, threads), threads, 0, dev.stream()>>>(c, layout, map, split, count,
                                                                                       part, out, width);
  check_launch("ctg::cuda::axis_reduce_group");
  if (split.chunks == 1) return;
  const unsigned combine_blocks = static_cast<unsigned>(map.outputs < 65535 ? map.outputs : 65535);
  axis_reduce_combine<tl::list<typename Plan::root_op, typename Plan::dtype>>
      <<<combine_blocks, combine_lanes, 0, dev.stream()>>>(part, split.chunks, map.outputs, count, out);
  check_launch("ctg::cuda::axis_reduce_combine");
}

}  // namespace ctg::cuda
