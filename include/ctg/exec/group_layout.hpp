#pragma once
// Where a fused group's loop reads and writes, for any backend: the loop's
// layout over the group's iteration shape, each input slot's buffer and
// broadcast (its strides within that shape), and its outputs, from one
// run's bindings. The CPU loops
// (exec/cpu/fused_loop.hpp) and the CUDA kernels (exec/cuda/fused_kernel.cuh)
// start from the same layout, so they visit the same elements.
#include <ctg/exec/bindings.hpp>
#include <ctg/lower/group.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

namespace ctg::detail {

// The layout a kernel runs a plan's loop in: a flat loop's as one row
// (loop_layout::one_row; the CPU's flat loop indexes its elements so too).
template <class Plan, std::size_t K>
kernel::loop_layout<K> launched_layout(const kernel::loop_layout<K>& l) {
  if constexpr (Plan::loop == loop_kind::flat) return l.one_row();
  else return l;
}

// Fills the context's input pointers and random key; returns the layout.
template <class Plan>
kernel::loop_layout<Plan::buffer_slots> group_layout(const group_call& g, const bindings_view& b,
                                              typename Plan::context& c) {
  const rt_shape& it = b.shape[g.iteration];
  kernel::loop_layout<Plan::buffer_slots> l;
  l.rank = it.rank;
  for (std::size_t d = 0; d < it.rank; ++d) l.dims[d] = it.d[d];
  for (std::size_t k = 0; k < Plan::inputs; ++k) {
    c.ptr[k] = b.buf[g.input[k]];
    const rt_shape& s = b.shape[g.input[k]];
    l.set_slot(k, s.rank, s.d);
  }
  c.key = b.key;
  return launched_layout<Plan>(l);
}

// Where the group writes: its root's buffer, and its side output's where it
// has one (kernel::group_outputs).
template <class Plan>
typename Plan::outputs group_outputs_of(const group_call& g, const bindings_view& b) {
  typename Plan::outputs out;
  out.root = b.template as<typename Plan::dtype>(g.root);
  if constexpr (Plan::outputs::has_side) out.side = b.template as<typename Plan::side_dtype>(g.side);
  return out;
}

}  // namespace ctg::detail
