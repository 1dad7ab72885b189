#pragma once
// A fused group on the CPU: one loop nest whose body is the group's
// name-free expression (lower/kernel_expr.hpp), the same type the CUDA
// kernels evaluate. One function per loop kind (lower/group.hpp decides
// which, at compile time), all instantiated on the group's name-free plan, so
// equal groups of any steps share them:
//
//   ctg::cpu::run_fused<kernel::fused_plan_t<Step, R>>(call, bindings, workspace, nullptr);
#include <algorithm>

#include <ctg/core/config.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

CTG_HOT_BEGIN

namespace ctg::detail {

template <class Plan>
struct cpu_fused_group {
  static constexpr std::size_t K = Plan::slots;
  using ctx = typename Plan::context;
  using body = typename Plan::body;
  using T = typename Plan::dtype;
  // The root of a reduction group, as a row reduction of the body.
  using root_reduction = kernel::row_reduction<0, typename Plan::root_op, T, body>;

  // The loop's layout over the iteration shape and the context's slots.
  static kernel::loop_layout<K> layout(const group_call& g, const bindings_view& b, ctx& c) {
    const rt_shape& it = b.shape[g.iteration];
    kernel::loop_layout<K> l;
    l.rank = it.rank;
    for (std::size_t d = 0; d < it.rank; ++d) l.dims[d] = it.d[d];
    for (std::size_t k = 0; k < Plan::inputs; ++k) {
      c.ptr[k] = b.buf[g.input[k]];
      const rt_shape& s = b.shape[g.input[k]];
      l.set_slot(k, s.rank, s.d);
    }
    c.key = b.key;
    return l;
  }

  // The row's inlined reductions, in slot order (a later one may read an earlier one).
  template <class... Rs>
  static CTG_FORCEINLINE void inline_reductions([[maybe_unused]] ctx& c, [[maybe_unused]] dim_t L, tl::list<Rs...>) {
    ((c.local[Rs::slot] = Rs::value_of(Rs::combine_in_order(c, L), L)), ...);
  }

  // L outputs of the body, in blocks of 16 with no loop-carried dependence:
  // the inlined expression vectorizes (outputs never alias the group's inputs).
  static CTG_FORCEINLINE void write_row(const ctx& c, T* o, dim_t L) {
    dim_t j = 0;
    for (; j + 16 <= L; j += 16) {
#pragma GCC ivdep
      for (dim_t u = 0; u < 16; ++u) o[j + u] = store_as<T>(body::value(c, j + u));
    }
    for (; j < L; ++j) o[j] = store_as<T>(body::value(c, j));
  }
};

}  // namespace ctg::detail

namespace ctg::cpu {
// Every element in one pass (all inputs have the output's shape).
template <class Plan>
void run_flat(const group_call& g, const bindings_view& b) {
  using F = detail::cpu_fused_group<Plan>;
  typename F::ctx c;
  F::layout(g, b, c);  // fills the context; every base stays 0
  const dim_t total = b.shape[g.iteration].numel();
  F::write_row(c, b.template as<typename F::T>(g.root), total);
}

// Row by row along the last dim: the row's reductions first, then its elements.
template <class Plan>
void run_rows(const group_call& g, const bindings_view& b) {
  using F = detail::cpu_fused_group<Plan>;
  typename F::ctx c;
  const auto layout = F::layout(g, b, c);
  const dim_t L = layout.row_length(), rows = L ? layout.rows() : 0;
  typename F::T* out = b.template as<typename F::T>(g.root);
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    F::inline_reductions(c, L, typename Plan::reductions{});
    F::write_row(c, out + row * L, L);
  }
}

// Row by row, the root reducing each row to one value (an empty row gives
// the reduction's value over nothing: sum 0, mean NaN, max -inf).
template <class Plan>
void run_row_reduce(const group_call& g, const bindings_view& b) {
  using F = detail::cpu_fused_group<Plan>;
  using rr = typename F::root_reduction;
  typename F::ctx c;
  const auto layout = F::layout(g, b, c);
  const dim_t L = layout.row_length(), rows = layout.rows();
  typename F::T* out = b.template as<typename F::T>(g.root);
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    F::inline_reductions(c, L, typename Plan::reductions{});
    out[row] = store_as<typename F::T>(rr::value_of(rr::combine_in_order(c, L), L));
  }
}

// The root reduces axes other than (or besides) the last: every input row
// combines into the f64 accumulators of the output elements it maps to, in
// row order; each is finalized and rounded once at the end (so an output
// element that no input reaches, in an empty tensor, is the value over nothing).
template <class Plan>
void run_axis_reduce(const group_call& g, const bindings_view& b, workspace& ws) {
  using F = detail::cpu_fused_group<Plan>;
  using Op = typename Plan::root_op;
  typename F::ctx c;
  const auto layout = F::layout(g, b, c);
  const rt_shape& it = b.shape[g.iteration];
  const rt_shape& os = b.shape[g.root];
  const dim_t total = it.numel(), L = layout.row_length(), rows = L ? layout.rows() : 0;
  dim_t out_stride[max_rank]{};
  kernel::broadcast_strides(os.rank, os.d, it.rank, out_stride);
  const dim_t out_count = os.numel();
  ws.reserve_for(static_cast<std::size_t>(out_count));  // (a store has reserved it already)
  double* acc = ws.axis_acc.data();
  std::fill(acc, acc + out_count, Op::template identity<double>());
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    const dim_t out_base = layout.row_offset(row, out_stride);
    F::inline_reductions(c, L, typename Plan::reductions{});
    if constexpr (Plan::root_advances) {
      for (dim_t j = 0; j < L; ++j)
        acc[out_base + j] = Op::combine(acc[out_base + j], static_cast<double>(F::body::value(c, j)));
    } else {
      acc[out_base] = Op::combine(acc[out_base], F::root_reduction::combine_in_order(c, L));
    }
  }
  const double count = static_cast<double>(total) / static_cast<double>(out_count);
  typename F::T* out = b.template as<typename F::T>(g.root);
  for (dim_t i = 0; i < out_count; ++i) out[i] = store_as<typename F::T>(Op::finalize(acc[i], count));
}

// A fused group with this plan, in the loop shape the lowering chose.
template <class Plan>
void run_fused(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  if constexpr (Plan::loop == loop_kind::flat) run_flat<Plan>(g, b);
  else if constexpr (Plan::loop == loop_kind::rows) run_rows<Plan>(g, b);
  else if constexpr (Plan::loop == loop_kind::row_reduce) run_row_reduce<Plan>(g, b);
  else run_axis_reduce<Plan>(g, b, ws);
}

}  // namespace ctg::cpu

CTG_HOT_END
