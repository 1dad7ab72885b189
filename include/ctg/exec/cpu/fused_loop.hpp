#pragma once
// A fused group on the CPU: one loop nest whose body is the group's
// name-free expression (lower/kernel_expr.hpp), the same type the CUDA
// kernels evaluate. One function per loop kind (lower/group.hpp decides
// which, at compile time):
//
//   ctg::cpu::run_fused<Step, R>(bindings, workspace);   // group rooted at node R of a step (or its key)
#include <algorithm>

#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

namespace ctg::detail {

template <class Step, std::size_t R>
struct cpu_fused_group {
  using info = ctg::detail::group_info<Step, R>;
  static constexpr std::size_t K = info::ninputs > 0 ? info::ninputs : 1;
  static constexpr std::size_t NR = info::nreductions > 0 ? info::nreductions : 1;
  using ctx = kernel::context<K, NR>;
  using body = kernel::body_t<Step, R>;
  using T = typename tl::at_t<R, typename step_of<Step>::nodes>::dtype;
  static constexpr bool root_advances = ctg::detail::advances_inner<tl::at_t<R, typename step_of<Step>::nodes>>;
  // The root of a reduction group, as a row reduction of the body.
  template <class Op>
  using root_reduction = kernel::row_reduction<0, Op, T, body>;

  // The loop's layout over the iteration shape and the context's slots.
  static kernel::loop_layout<K> layout(const bindings<step_of<Step>::nodes::size>& b, ctx& c) {
    const rt_shape& it = b.shape[info::iteration_node];
    kernel::loop_layout<K> l;
    l.rank = it.rank;
    for (std::size_t d = 0; d < it.rank; ++d) l.dims[d] = it.d[d];
    for (std::size_t k = 0; k < info::ninputs; ++k) {
      c.ptr[k] = b.buf[info::info.input[k]];
      const rt_shape& s = b.shape[info::info.input[k]];
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
template <class Step, std::size_t R>
void run_flat(const bindings<step_of<Step>::nodes::size>& b) {
  using F = detail::cpu_fused_group<Step, R>;
  typename F::ctx c;
  F::layout(b, c);  // fills the context; every base stays 0
  const dim_t total = b.shape[F::info::iteration_node].numel();
  F::write_row(c, b.template as<typename F::T>(R), total);
}

// Row by row along the last dim: the row's reductions first, then its elements.
template <class Step, std::size_t R>
void run_rows(const bindings<step_of<Step>::nodes::size>& b) {
  using F = detail::cpu_fused_group<Step, R>;
  typename F::ctx c;
  const auto layout = F::layout(b, c);
  const dim_t L = layout.row_length(), rows = L ? layout.rows() : 0;
  typename F::T* out = b.template as<typename F::T>(R);
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    F::inline_reductions(c, L, kernel::reductions_t<Step, R>{});
    F::write_row(c, out + row * L, L);
  }
}

// Row by row, the root reducing each row to one value (an empty row gives
// the reduction's value over nothing: sum 0, mean NaN, max -inf).
template <class Step, std::size_t R>
void run_row_reduce(const bindings<step_of<Step>::nodes::size>& b) {
  using F = detail::cpu_fused_group<Step, R>;
  using rr = typename F::template root_reduction<typename tl::at_t<R, typename step_of<Step>::nodes>::op>;
  typename F::ctx c;
  const auto layout = F::layout(b, c);
  const dim_t L = layout.row_length(), rows = layout.rows();
  typename F::T* out = b.template as<typename F::T>(R);
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    F::inline_reductions(c, L, kernel::reductions_t<Step, R>{});
    out[row] = store_as<typename F::T>(rr::value_of(rr::combine_in_order(c, L), L));
  }
}

// The root reduces axes other than (or besides) the last: every input row
// combines into the f64 accumulators of the output elements it maps to, in
// row order; each is finalized and rounded once at the end (so an output
// element that no input reaches, in an empty tensor, is the value over nothing).
template <class Step, std::size_t R>
void run_axis_reduce(const bindings<step_of<Step>::nodes::size>& b, workspace& ws) {
  using F = detail::cpu_fused_group<Step, R>;
  using Op = typename tl::at_t<R, typename step_of<Step>::nodes>::op;
  typename F::ctx c;
  const auto layout = F::layout(b, c);
  const rt_shape& it = b.shape[F::info::iteration_node];
  const dim_t total = it.numel(), L = layout.row_length(), rows = L ? layout.rows() : 0;
  dim_t out_stride[max_rank]{};
  kernel::broadcast_strides(b.shape[R].rank, b.shape[R].d, it.rank, out_stride);
  const dim_t out_count = b.shape[R].numel();
  ws.reserve_for(static_cast<std::size_t>(out_count));  // (a store has reserved it already)
  double* acc = ws.axis_acc.data();
  std::fill(acc, acc + out_count, Op::template identity<double>());
  for (dim_t row = 0; row < rows; ++row) {
    layout.enter_row(c, row);
    const dim_t out_base = layout.row_offset(row, out_stride);
    F::inline_reductions(c, L, kernel::reductions_t<Step, R>{});
    if constexpr (F::root_advances) {
      for (dim_t j = 0; j < L; ++j)
        acc[out_base + j] = Op::combine(acc[out_base + j], static_cast<double>(F::body::value(c, j)));
    } else {
      acc[out_base] = Op::combine(acc[out_base], F::template root_reduction<Op>::combine_in_order(c, L));
    }
  }
  const double count = static_cast<double>(total) / static_cast<double>(out_count);
  typename F::T* out = b.template as<typename F::T>(R);
  for (dim_t i = 0; i < out_count; ++i) out[i] = store_as<typename F::T>(Op::finalize(acc[i], count));
}

// The fused group rooted at R, in the loop shape the lowering chose.
template <class Step, std::size_t R>
void run_fused(const bindings<step_of<Step>::nodes::size>& b, workspace& ws) {
  constexpr loop_kind k = ctg::detail::group_info<Step, R>::loop;
  if constexpr (k == loop_kind::flat) run_flat<Step, R>(b);
  else if constexpr (k == loop_kind::rows) run_rows<Step, R>(b);
  else if constexpr (k == loop_kind::row_reduce) run_row_reduce<Step, R>(b);
  else run_axis_reduce<Step, R>(b, ws);
}

}  // namespace ctg::cpu
