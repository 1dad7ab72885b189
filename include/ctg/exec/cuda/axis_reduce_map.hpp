#pragma once
// How the CUDA kernels of a reduction over axes other than the last compute
// their outputs (exec/cuda/fused_kernel.cuh, launch_axis_reduce). Output o's
// visits (the loop elements that reach it, in increasing order: the CPU's
// row order, exec/cpu/fused_loop.hpp) are cut into chunks of consecutive
// visits; one thread combines one chunk of one output (or of several
// outputs of a row at once: axis_reduce_tiling; or, where the last dim is
// reduced too and its rows are summed, 16 threads a lane of each row:
// rows_in_lanes) in f64, in visit order, and a second kernel combines each
// output's chunks in a fixed order (combine_chunks).
// The chunks depend on the shapes alone, never on the device or the launch,
// so two runs, or two GPUs, give the same bits; the CPU combines the same
// visits in one sequence, so the f64 sums differ by rounding only, and the
// outputs by at most one unit in the last place of their dtype unless the
// sum cancels to far below its terms. Plain host and device code without a
// CUDA header, so the CPU tests run it: tests/unit/cuda_launch_geometry.cpp
// checks the walk (every element reaches its own output exactly once, in
// increasing order), the chunks (every visit in exactly one), and computes
// whole groups chunk by chunk against the CPU backend's runner.
#include <cstddef>

#include <ctg/core/config.hpp>
#include <ctg/core/error.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/core/type_list.hpp>
#include <ctg/exec/cuda/chunk_width.hpp>
#include <ctg/exec/cuda/launch_geometry.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>
#include <ctg/lower/read_ahead.hpp>

namespace ctg::cuda {

struct axis_reduce_map {
  std::size_t kept = 0, reduced = 0;  // dims of each kind (dims of 1 left out), outer to inner
  dim_t kept_size[max_rank]{}, kept_step[max_rank]{};  // steps in iteration elements
  dim_t reduced_size[max_rank]{}, reduced_step[max_rank]{};
  dim_t walked_size[max_rank]{};  // by loop dim: its size where the visits walk it (a reduced dim), else 0
  dim_t output_row = 0;  // the loop's last dim where it is kept (outputs then lie in rows of it), else 0
  dim_t outputs = 1;     // the output's elements (the kept dims' product)
  dim_t per_output = 1;  // visits per output (the reduced dims' product)

  // The iteration element of output o's visit r, r in [0, per_output):
  // increasing in r (the reduced dims in row-major order); the sum of
  // output o's first element and visit r's offset from it. (The kernels
  // find them once per output and chunk. The loops run over every dim a map
  // can have, unrolled on a GPU: see CTG_UNROLL.)
  CTG_HD dim_t output_start(dim_t o) const { return offset_of(o, kept, kept_size, kept_step); }
  CTG_HD dim_t visit_offset(dim_t r) const { return offset_of(r, reduced, reduced_size, reduced_step); }
  CTG_HD dim_t element(dim_t o, dim_t r) const { return output_start(o) + visit_offset(r); }

 private:
  // Index i over the first n of these dims (sizes, steps), as an offset in iteration elements.
  CTG_HD static dim_t offset_of(dim_t i, std::size_t n, const dim_t* size, const dim_t* step) {
    if (i == 0) return 0;
    dim_t e = 0;
    kernel::index_digits digits(i);
    CTG_UNROLL
    for (std::size_t k = 0; k < max_rank; ++k) {
      const std::size_t d = max_rank - 1 - k;
      if (d < n) e += digits.next(size[d]) * step[d];
    }
    return e;
  }
};

// Each output's visits cut into `chunks` chunks of `chunk` consecutive
// visits (the last may hold fewer), never an empty chunk (split_visits).
struct axis_reduce_split {
  dim_t chunks = 1, chunk = 0;
  CTG_HD dim_t first(dim_t c) const { return c * chunk; }
  CTG_HD dim_t end(dim_t c, dim_t per_output) const {
    const dim_t e = (c + 1) * chunk;
    return e < per_output ? e : per_output;
  }
};
// The kernel's threads a block (launch_axis_reduce).
inline constexpr unsigned axis_reduce_block_threads = 256;
// How many threads the split aims to keep walking at once: about half of an
// H100's or H200's resident threads (132 SMs x 2048), each with its visits'
// loads in flight; enough for a memory-bound walk to reach the copy's
// bandwidth. (Counting sums instead, 2^16 of them, left a [8192, 4096] ->
// [4096] sum in 16-byte chunks of 8 outputs 8192 threads: 32 blocks.)
inline constexpr dim_t axis_reduce_parallel_threads = dim_t{1} << 17;
// At most this many chunks an output (the second kernel adds an output's
// chunks in 256 lanes), and, where a visit is one element, at least this
// many visits a chunk, so that the f64 partials (8 bytes written and read
// back) stay a small part of what the walk reads.
inline constexpr dim_t axis_reduce_max_chunks = 8192, axis_reduce_min_chunk = 16;
// Chunks for about `parallel_sums` sums over all outputs at once (see
// axis_reduce_split_for), of at least `min_chunk` visits unless an output
// has fewer. More than one chunk: fewer than 2 * parallel_sums sums.
inline axis_reduce_split split_visits(const axis_reduce_map& m, dim_t parallel_sums, dim_t min_chunk) {
  if (m.per_output == 0 || m.outputs == 0) return {1, m.per_output};
  dim_t want = (parallel_sums + m.outputs - 1) / m.outputs;
  want = want < axis_reduce_max_chunks ? want : axis_reduce_max_chunks;
  const dim_t longest = (m.per_output + min_chunk - 1) / min_chunk;  // chunks of min_chunk visits
  want = want < longest ? want : longest;
  const dim_t chunk = (m.per_output + want - 1) / want;
  return {(m.per_output + chunk - 1) / chunk, chunk};
}

// The walk of a loop over `it` reducing to `out` (right-aligned; 1 where a
// dim is reduced). by_rows: the last dim is reduced too and the kernel
// combines each row first (as the CPU does), so the walk visits row starts
// and leaves the last dim out.
inline axis_reduce_map make_axis_reduce_map(const rt_shape& it, const rt_shape& out, bool by_rows) {
  if (out.rank > it.rank) throw error("ctg: axis reduction: the output has more dims than the loop (internal)");
  axis_reduce_map m;
  const std::size_t lead = it.rank - out.rank;
  dim_t step = 1;
  dim_t kept_size[max_rank], kept_step[max_rank], red_size[max_rank], red_step[max_rank];
  std::size_t nk = 0, nr = 0;
  bool row_kept = false;  // the loop's last dim is kept (and not 1: a dyn dim fed 1 makes rows of 1)
  for (std::size_t d = it.rank; d-- > 0;) {  // (inner to outer: steps grow)
    const dim_t n = it.d[d], o = d < lead ? 1 : out.d[d - lead];
    const bool last = d + 1 == it.rank;
    if (o != 1 && o != n) throw error("ctg: axis reduction: output dim is neither kept nor reduced (internal)");
    if (n != 1 && !(last && by_rows)) {
      if (o == 1) red_size[nr] = n, red_step[nr++] = step, m.walked_size[d] = n;
      else kept_size[nk] = n, kept_step[nk++] = step, row_kept = row_kept || last;
    }
    step *= n;
  }
  for (std::size_t i = 0; i < nk; ++i) {  // outer to inner
    m.kept_size[i] = kept_size[nk - 1 - i];
    m.kept_step[i] = kept_step[nk - 1 - i];
    m.outputs *= m.kept_size[i];
  }
  const dim_t row_length = it.rank ? it.d[it.rank - 1] : 1;
  for (std::size_t i = 0; i < nr; ++i) {
    m.reduced_size[i] = red_size[nr - 1 - i];
    m.reduced_step[i] = red_step[nr - 1 - i];
    m.per_output *= m.reduced_size[i];
    if (row_length > 0 && m.reduced_step[i] % row_length != 0)
      throw error("ctg: axis reduction: a reduced step within a row (internal)");
  }
  m.kept = nk;
  m.reduced = nr;
  if (row_kept) m.output_row = m.kept_size[nk - 1];
  if (it.numel() == 0) m.per_output = 0;  // (an empty loop: every output is the value over nothing)
  return m;
}

// How a walk combines a visited row for a reduction R (the inlined
// reductions, and the root where the last dim is reduced too): in one
// thread, as the CPU does (whole_rows); the kernel's row_lanes
// (exec/cuda/fused_kernel.cuh) has 16 threads take a lane of combine_row
// each, with the same bits.
struct whole_rows {
  template <class R, class Ctx>
  CTG_HD static double combine(const Ctx& c, dim_t L) {
    return R::combine_row(c, L);
  }
};
// Can 16 threads walk an output's rows together (row_lanes)? Where the last
// dim is reduced too and every row reduction of the walk is a sum or mean
// (kernel::row_reduction::in_lanes: combined in 16 lanes).
template <class Plan>
inline constexpr bool rows_in_lanes = [] {
  if constexpr (Plan::root_advances) {
    return false;
  } else {
    using root = kernel::row_reduction<0, typename Plan::root_op, typename Plan::dtype, typename Plan::body>;
    return []<class... Rs>(tl::list<Rs...>) { return root::in_lanes && (Rs::in_lanes && ...); }(
        typename Plan::reductions{});
  }
}();

// Visits [first, end) of n outputs of one output row, o0 + k * stride for
// k < n (n <= N), of a reduction group with this plan (kernel::fused_plan,
// loop axis_reduce), before finalizing, into acc[k]: each visited row's
// inlined reductions first, then the body's value there (or, the last axis
// reduced too, the row combined in order: then N is 1), combined in f64 in
// visit order, from the operation's identity. The outputs' visits are the
// same rows, so one walk serves them all and their loads are in flight
// together. Visits differ from the first output's start by whole rows: the
// context enters the first visit's row once, then moves along the walked
// dims, the last fastest (no division per visit); the positions in the row
// are the starts'. With `wide`, the N outputs are consecutive (stride 1, n
// = N: a chunk of the output row, exec/cuda/chunk_width.hpp) and each
// visited row's N values are read ahead in 16-byte loads
// (lower/read_ahead.hpp): the same values, the same bits. (The walk's loops
// run over every dim a loop can have, unrolled on a GPU: see CTG_UNROLL.)
template <class Plan, unsigned N, class Ctx, class Layout, class Rows = whole_rows>
CTG_HD void axis_reduce_outputs(const Ctx& c, const Layout& layout, const axis_reduce_map& map, dim_t o0,
                                dim_t stride, unsigned n, dim_t first, dim_t end, double (&acc)[N],
                                bool wide = false, const Rows& rows = {}) {
  using Body = typename Plan::body;
  using Op = typename Plan::root_op;
  static_assert(N == 1 || Plan::root_advances, "ctg: internal: rows combined in order: one output per walk");
  CTG_UNROLL
  for (unsigned k = 0; k < N; ++k) acc[k] = Op::template identity<double>();
  if (first >= end) return;
  const dim_t L = layout.row_length(), start = map.element(o0, first);
  kernel::index_digits start_digits(start);
  const dim_t j = start_digits.next(L);
  Ctx t = c;
  layout.enter_row(t, start_digits.rest());
  dim_t index[max_rank]{};  // the visit's index along each walked dim
  kernel::index_digits first_digits(first);
  CTG_UNROLL
  for (std::size_t i = 0; i < max_rank; ++i) {
    const std::size_t d = max_rank - 1 - i;
    if (map.walked_size[d] != 0 && first != 0) index[d] = first_digits.next(map.walked_size[d]);
  }
  // A visited row's N values read ahead (read_chunk), added to acc.
  auto add = [&](const auto& tc) {
    CTG_UNROLL
    for (unsigned k = 0; k < N; ++k) acc[k] = Op::combine(acc[k], static_cast<double>(Body::value(tc, j + k)));
  };
  auto next_visit = [&] {  // the last walked dim first, carrying
    CTG_UNROLL
    for (std::size_t i = 0; i < max_rank; ++i) {
      const std::size_t d = max_rank - 1 - i;
      const dim_t size = map.walked_size[d];
      if (size == 0) continue;
      layout.move_along(t, d, 1);
      if (++index[d] < size) break;
      layout.move_along(t, d, -size);
      index[d] = 0;
    }
  };
  if constexpr (Plan::root_advances && Plan::reductions::size == 0) {
    if (N > 1 && wide) {
      // Two visits a turn, both read before either is added (in visit
      // order): two 16-byte loads per buffer in flight, not one.
      for (dim_t r = first; r < end; r += 2) {
        const auto a = kernel::read_chunk<Body, N>(t, j);
        next_visit();
        if (r + 1 == end) {
          add(a);
          break;
        }
        const auto b = kernel::read_chunk<Body, N>(t, j);
        next_visit();
        add(a);
        add(b);
      }
      return;
    }
  }
  for (dim_t r = first; r < end; ++r) {
    [&]<class... Rs>(tl::list<Rs...>) {
      ((t.local[Rs::slot] = Rs::value_of(rows.template combine<Rs>(t, L), L)), ...);
    }(typename Plan::reductions{});
    if constexpr (Plan::root_advances) {
      if (N > 1 && wide) {
        add(kernel::read_chunk<Body, N>(t, j));
      } else {
        CTG_UNROLL
        for (unsigned k = 0; k < N; ++k)
          if (k < n) acc[k] = Op::combine(acc[k], static_cast<double>(Body::value(t, j + k * stride)));
      }
    } else {
      using root = kernel::row_reduction<0, Op, typename Plan::dtype, Body>;
      acc[0] = Op::combine(acc[0], rows.template combine<root>(t, L));
    }
    next_visit();
  }
}
// One output's visits [first, end).
template <class Plan, class Ctx, class Layout, class Rows = whole_rows>
CTG_HD double axis_reduce_output(const Ctx& c, const Layout& layout, const axis_reduce_map& map, dim_t o,
                                 dim_t first, dim_t end, const Rows& rows = {}) {
  double acc[1];
  axis_reduce_outputs<Plan, 1>(c, layout, map, o, 1, 1, first, end, acc, false, rows);
  return acc[0];
}

// Where the loop's last dim is kept (map.output_row) and at least a block
// long, the outputs lie in rows of it and the kernel runs in tiles of them,
// as elementwise groups do (row_tiles): a tile is up to `span` consecutive
// outputs of one output row and one chunk, and its thread t computes
// outputs t, t + threads, ... of it (up to tile_elements_per_thread) in one
// walk.
struct axis_reduce_tiling {
  template <class Plan>
  CTG_HD static bool applies(const axis_reduce_map& m, unsigned block_threads) {
    return Plan::root_advances && m.output_row >= dim_t{block_threads};
  }
  struct work {
    dim_t chunk = 0, output = 0;  // the chunk, the thread's first output
    unsigned n = 0;               // its outputs: output + k * threads, k < n
  };
  row_tiles tiles;
  dim_t output_rows;
  unsigned threads;
  CTG_HD axis_reduce_tiling(const axis_reduce_map& m, const axis_reduce_split& s, unsigned block_threads)
      : tiles(s.chunks * (m.outputs / m.output_row), m.output_row, block_threads, tile_elements_per_thread),
        output_rows(m.outputs / m.output_row),
        threads(block_threads) {}
  CTG_HD work at(dim_t tile, unsigned thread) const {
    const dim_t row = tiles.row(tile), chunk = row / output_rows, j = tiles.first(tile) + thread,
                end = tiles.end(tile);
    if (j >= end) return {chunk, 0, 0};
    const dim_t n = (end - j + threads - 1) / threads;
    return {chunk, (row - chunk * output_rows) * tiles.length + j, static_cast<unsigned>(n)};
  }
};

// Can a reduction group's kernel take this map's outputs V at a time (one
// chunk of an output row each: exec/cuda/chunk_width.hpp says whether the
// buffers allow)? Where the last dim is kept and its rows are a multiple of V.
template <class Plan>
CTG_HD bool axis_reduce_chunks(const axis_reduce_map& m) {
  constexpr dim_t V = plan_chunk<Plan>;
  return Plan::root_advances && V > 1 && m.output_row > 0 && m.output_row % V == 0;
}

// The kernel's split of a map's visits (launch_axis_reduce): enough sums for
// axis_reduce_parallel_threads threads as the kernel takes them, V outputs
// a thread in 16-byte chunks, tile_elements_per_thread in tiles, one
// otherwise, and 16 threads a sum where rows are combined in lanes (a visit
// is then a row: chunks of any length). From the plan and the shapes alone,
// not from a launch's alignment, so the bits follow the shapes.
template <class Plan>
axis_reduce_split axis_reduce_split_for(const axis_reduce_map& m) {
  constexpr dim_t P = axis_reduce_parallel_threads;
  if constexpr (!Plan::root_advances) {
    return split_visits(m, rows_in_lanes<Plan> ? P / kernel::row_sum_lanes : P, 1);
  } else {
    const dim_t per_thread = axis_reduce_chunks<Plan>(m) ? plan_chunk<Plan>
                             : axis_reduce_tiling::applies<Plan>(m, axis_reduce_block_threads)
                                 ? dim_t{tile_elements_per_thread}
                                 : 1;
    return split_visits(m, P * per_thread, axis_reduce_min_chunk);
  }
}
// The threads a launch of the kernel covers (before blocks_for caps its
// grid): 16 a sum where rows are combined in lanes, one per V outputs where
// the launch takes chunks (width > 1), the tiles' threads where they apply,
// else one a sum.
template <class Plan>
std::size_t axis_reduce_threads(const axis_reduce_map& m, const axis_reduce_split& s, dim_t width) {
  const auto sums = static_cast<std::size_t>(s.chunks * m.outputs);
  if constexpr (rows_in_lanes<Plan>) return sums * std::size_t{kernel::row_sum_lanes};
  if (width > 1) return sums / static_cast<std::size_t>(width);
  if (axis_reduce_tiling::applies<Plan>(m, axis_reduce_block_threads))
    return static_cast<std::size_t>(axis_reduce_tiling(m, s, axis_reduce_block_threads).tiles.count) *
           axis_reduce_block_threads;
  return sums;
}
// The most partial sums any split asks for (the workspace holds them, made
// once): fewer than twice the most parallel sums, 8 outputs a thread.
inline constexpr dim_t axis_reduce_max_partials = 2 * axis_reduce_parallel_threads * 8;
static_assert(kernel::chunk_elements<std::byte> <= 8 && tile_elements_per_thread <= 8,
              "ctg: internal: axis_reduce_max_partials assumes at most 8 outputs a thread");

// Output o's chunks combined (partials[c * outputs + o] holds chunk c of
// output o), before finalizing, in an order fixed by the chunk count alone:
// lane l of combine_lanes combines chunks l, l + combine_lanes, ... in
// order, then the lanes' values combine pairwise, halving (lane l with lane
// l + h, for h = combine_lanes / 2, ..., 1). The kernel
// (axis_reduce_combine) runs one lane per thread of a block; combine_chunks
// runs them in sequence, in the same order: the tests' version.
inline constexpr unsigned combine_lanes = 256;
template <class Op>
CTG_HD double combine_lane(const double* partials, dim_t chunks, dim_t outputs, dim_t o, unsigned lane) {
  double acc = Op::template identity<double>();
  for (dim_t c = lane; c < chunks; c += combine_lanes) acc = Op::combine(acc, partials[c * outputs + o]);
  return acc;
}
template <class Op>
double combine_chunks(const double* partials, dim_t chunks, dim_t outputs, dim_t o) {
  double lane[combine_lanes];
  for (unsigned l = 0; l < combine_lanes; ++l) lane[l] = combine_lane<Op>(partials, chunks, outputs, o, l);
  for (unsigned h = combine_lanes / 2; h > 0; h /= 2)
    for (unsigned l = 0; l < h; ++l) lane[l] = Op::combine(lane[l], lane[l + h]);
  return lane[0];
}

}  // namespace ctg::cuda
