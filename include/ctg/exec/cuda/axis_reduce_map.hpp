#pragma once
// How the CUDA kernel of a reduction over axes other than the last computes
// one output (exec/cuda/fused_kernel.cuh, axis_reduce_group: one thread per
// output element): it visits the loop elements that reach that output in
// increasing order, the CPU's row order (exec/cpu/fused_loop.hpp,
// run_axis_reduce), so each output is the same f64 combination, bit for
// bit. Plain host and device code without a CUDA header, so the CPU tests
// run it: tests/unit/cuda_launch_geometry.cpp checks the walk (every element
// reaches its own output exactly once, in increasing order) and computes
// whole groups with axis_reduce_output against the CPU backend's runner.
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
  dim_t outputs = 1;     // the output's elements (the kept dims' product)
  dim_t per_output = 1;  // visits per output (the reduced dims' product)

  // The iteration element of output o's visit r, r in [0, per_output):
  // increasing in r (the reduced dims in row-major order).
  CTG_HD dim_t element(dim_t o, dim_t r) const {
    dim_t e = 0;
    for (std::size_t d = kept; d-- > 0;) {
      e += (o % kept_size[d]) * kept_step[d];
      o /= kept_size[d];
    }
    for (std::size_t d = reduced; d-- > 0;) {
      e += (r % reduced_size[d]) * reduced_step[d];
      r /= reduced_size[d];
    }
    return e;
  }
};

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
  for (std::size_t i = 0; i < nr; ++i) {
    m.reduced_size[i] = red_size[nr - 1 - i];
    m.reduced_step[i] = red_step[nr - 1 - i];
    m.per_output *= m.reduced_size[i];
  }
  m.kept = nk;
  m.reduced = nr;
  if (it.numel() == 0) m.per_output = 0;  // (an empty loop: every output is the value over nothing)
  return m;
}

// Output o of a reduction group with this plan (kernel::fused_plan, loop
// axis_reduce), before finalizing: each visited row's inlined reductions
// first, then the body's value there (or, the last axis reduced too, the
// row combined in order), combined in f64 in visit order.
template <class Plan, class Ctx, class Layout>
CTG_HD double axis_reduce_output(const Ctx& c, const Layout& layout, const axis_reduce_map& map, dim_t o) {
  using Body = typename Plan::body;
  using Op = typename Plan::root_op;
  const dim_t L = layout.row_length();
  double acc = Op::template identity<double>();
  for (dim_t r = 0; r < map.per_output; ++r) {
    const dim_t e = map.element(o, r);
    Ctx t = c;
    layout.enter_row(t, e / L);
    [&]<class... Rs>(tl::list<Rs...>) {
      ((t.local[Rs::slot] = Rs::value_of(Rs::combine_in_order(t, L), L)), ...);
    }(typename Plan::reductions{});
    if constexpr (Plan::root_advances)
      acc = Op::combine(acc, static_cast<double>(Body::value(t, e % L)));
    else
      acc = Op::combine(acc, kernel::row_reduction<0, Op, typename Plan::dtype, Body>::combine_in_order(t, L));
  }
  return acc;
}

}  // namespace ctg::cuda
