#pragma once
// How the CUDA kernels of a reduction over axes other than the last compute
// their outputs (exec/cuda/fused_kernel.cuh, launch_axis_reduce). Output o's
// visits (the loop elements that reach it, in increasing order: the CPU's
// row order, exec/cpu/fused_loop.hpp) are cut into chunks of consecutive
// visits; one thread combines one chunk of one output in f64, in visit
// order, and a second kernel combines each output's chunks in chunk order.
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
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

namespace ctg::cuda {

struct axis_reduce_map {
  std::size_t kept = 0, reduced = 0;  // dims of each kind (dims of 1 left out), outer to inner
  dim_t kept_size[max_rank]{}, kept_step[max_rank]{};  // steps in iteration elements
  dim_t reduced_size[max_rank]{}, reduced_step[max_rank]{};
  dim_t reduced_row_step[max_rank]{};  // reduced_step in rows: every visit starts its output's row
                                       // offset by whole rows (the last dim is kept, or walked by rows)
  dim_t outputs = 1;     // the output's elements (the kept dims' product)
  dim_t per_output = 1;  // visits per output (the reduced dims' product)

  // The iteration element of output o's visit r, r in [0, per_output):
  // increasing in r (the reduced dims in row-major order); the sum of
  // output o's first element and visit r's offset from it.
  CTG_HD dim_t output_start(dim_t o) const {
    dim_t e = 0;
    for (std::size_t d = kept; d-- > 0;) {
      e += (o % kept_size[d]) * kept_step[d];
      o /= kept_size[d];
    }
    return e;
  }
  CTG_HD dim_t visit_offset(dim_t r) const {
    dim_t e = 0;
    for (std::size_t d = reduced; d-- > 0;) {
      e += (r % reduced_size[d]) * reduced_step[d];
      r /= reduced_size[d];
    }
    return e;
  }
  CTG_HD dim_t element(dim_t o, dim_t r) const { return output_start(o) + visit_offset(r); }
};

// Each output's visits cut into `chunks` chunks of `chunk` consecutive
// visits (the last may hold fewer): enough chunks for about 2^16 parallel
// sums over all outputs, at most 8192 per output (the second kernel adds
// each output's chunks in sequence), never an empty chunk.
struct axis_reduce_split {
  dim_t chunks = 1, chunk = 0;
  CTG_HD dim_t first(dim_t c) const { return c * chunk; }
  CTG_HD dim_t end(dim_t c, dim_t per_output) const {
    const dim_t e = (c + 1) * chunk;
    return e < per_output ? e : per_output;
  }
};
inline constexpr dim_t axis_reduce_parallel_sums = dim_t{1} << 16, axis_reduce_max_chunks = 8192;
inline axis_reduce_split split_visits(const axis_reduce_map& m) {
  if (m.per_output == 0 || m.outputs == 0) return {1, m.per_output};
  dim_t want = (axis_reduce_parallel_sums + m.outputs - 1) / m.outputs;
  want = want < axis_reduce_max_chunks ? want : axis_reduce_max_chunks;
  want = want < m.per_output ? want : m.per_output;
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
  for (std::size_t d = it.rank; d-- > 0;) {  // (inner to outer: steps grow)
    const dim_t n = it.d[d], o = d < lead ? 1 : out.d[d - lead];
    const bool last = d + 1 == it.rank;
    if (o != 1 && o != n) throw error("ctg: axis reduction: output dim is neither kept nor reduced (internal)");
    if (n != 1 && !(last && by_rows)) {
      if (o == 1) red_size[nr] = n, red_step[nr++] = step;
      else kept_size[nk] = n, kept_step[nk++] = step;
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
    m.reduced_row_step[i] = row_length > 0 ? m.reduced_step[i] / row_length : 0;
  }
  m.kept = nk;
  m.reduced = nr;
  if (it.numel() == 0) m.per_output = 0;  // (an empty loop: every output is the value over nothing)
  return m;
}

// Visits [first, end) of output o of a reduction group with this plan
// (kernel::fused_plan, loop axis_reduce), before finalizing: each visited
// row's inlined reductions first, then the body's value there (or, the last
// axis reduced too, the row combined in order), combined in f64 in visit
// order, from the operation's identity. Visits differ from the output's
// start by whole rows: the visit's row is counted up dim by dim (no
// division per visit), its position in the row is the start's.
template <class Plan, class Ctx, class Layout>
CTG_HD double axis_reduce_output(const Ctx& c, const Layout& layout, const axis_reduce_map& map, dim_t o,
                                 dim_t first, dim_t end) {
  using Body = typename Plan::body;
  using Op = typename Plan::root_op;
  double acc = Op::template identity<double>();
  if (first >= end) return acc;
  const dim_t L = layout.row_length();
  const dim_t start = map.output_start(o), start_row = start / L, j = start - start_row * L;
  dim_t index[max_rank]{}, row = start_row, rest = first;  // visit `first`'s index along each reduced dim, its row
  for (std::size_t d = map.reduced; d-- > 0;) {
    index[d] = rest % map.reduced_size[d];
    rest /= map.reduced_size[d];
    row += index[d] * map.reduced_row_step[d];
  }
  for (dim_t r = first; r < end; ++r) {
    Ctx t = c;
    layout.enter_row(t, row);
    [&]<class... Rs>(tl::list<Rs...>) {
      ((t.local[Rs::slot] = Rs::value_of(Rs::combine_in_order(t, L), L)), ...);
    }(typename Plan::reductions{});
    if constexpr (Plan::root_advances)
      acc = Op::combine(acc, static_cast<double>(Body::value(t, j)));
    else
      acc = Op::combine(acc, kernel::row_reduction<0, Op, typename Plan::dtype, Body>::combine_in_order(t, L));
    for (std::size_t d = map.reduced; d-- > 0;) {  // the next visit: the last reduced dim first, carrying
      row += map.reduced_row_step[d];
      if (++index[d] < map.reduced_size[d]) break;
      row -= map.reduced_size[d] * map.reduced_row_step[d];
      index[d] = 0;
    }
  }
  return acc;
}

// Output o's chunks combined in chunk order (partials[c * outputs + o]
// holds chunk c of output o), before finalizing.
template <class Op>
CTG_HD double combine_chunks(const double* partials, dim_t chunks, dim_t outputs, dim_t o) {
  double acc = Op::template identity<double>();
  for (dim_t c = 0; c < chunks; ++c) acc = Op::combine(acc, partials[c * outputs + o]);
  return acc;
}

}  // namespace ctg::cuda
