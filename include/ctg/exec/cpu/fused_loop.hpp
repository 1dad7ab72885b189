#pragma once
// A fused group on the CPU: one loop nest whose body is the group's
// name-free expression (lower/kernel_expr.hpp), the same type the CUDA
// kernels evaluate. One function per loop kind (lower/group.hpp decides
// which, at compile time), all instantiated on the group's name-free plan, so
// equal groups of any steps share them:
//
//   ctg::cpu::run_fused<kernel::fused_plan_t<Step, R>>(call, bindings, workspace, nullptr);
//
// Threads (the workspace's pool) take fixed pieces: blocks of elements
// (multiples of 16: the vector blocks of one thread's loop), blocks of rows,
// and for a reduction over other axes blocks of output rows, each over the
// input rows that reach it in row order. No reduction is split, so every value is computed
// by the same operations in the same order whatever the thread count.
#include <algorithm>
#include <type_traits>
#include <utility>

#include <ctg/core/config.hpp>
#include <ctg/exec/bindings.hpp>
#include <ctg/exec/cpu/vector_blocks.hpp>
#include <ctg/exec/cpu/workspace.hpp>
#include <ctg/exec/group_layout.hpp>
#include <ctg/lower/kernel_expr.hpp>
#include <ctg/lower/loop_layout.hpp>

CTG_HOT_BEGIN

namespace ctg::detail {

template <class Plan>
struct cpu_fused_group {
  static constexpr std::size_t K = Plan::buffer_slots;
  using ctx = typename Plan::context;
  using body = typename Plan::body;
  using T = typename Plan::dtype;
  // The root of a reduction group, as a row reduction of the body.
  using root_reduction = kernel::row_reduction<0, typename Plan::root_op, T, body>;

  // The loop's layout over the iteration shape and the context's slots.
  static kernel::loop_layout<K> layout(const group_call& g, const bindings_view& b, ctx& c) {
    return group_layout<Plan>(g, b, c);
  }

  // The compute type of expression X's values.
  template <class X>
  using value_t = decltype(X::value(std::declval<const ctx&>(), dim_t(0)));

  // X's values along the row in whole blocks of 16, evaluated side by side
  // into a buffer (that loop vectorizes: exp, tanh, ... run in SIMD
  // registers), each block passed to block(v, j) (j: its first element);
  // returns where the tail starts.
  template <class X, class F>
  static CTG_FORCEINLINE dim_t for_each_block(const ctx& c, dim_t L, F&& block) {
    using V = value_t<X>;
    dim_t j = 0;
    for (; j + 16 <= L; j += 16) {
      V v[16];
CTG_IVDEP
      for (dim_t u = 0; u < 16; ++u) v[u] = X::value(c, j + u);
      block(v, j);
    }
    return j;
  }

  // Row reduction R's combination of the row's L elements, in its order
  // (R::combine_row), in f64: a sum's 16 lanes side by side, other ops one by
  // one in row order (a max, whose value does not depend on the order, runs
  // in SIMD lanes too).
  // A sum can keep the values it combines (keep[j], for the row cache below).
  template <class R>
  static CTG_FORCEINLINE double combine_row(const ctx& c, dim_t L,
                                            [[maybe_unused]] value_t<typename R::child>* keep = nullptr) {
    using Op = typename R::op;
    using X = typename R::child;
    using V = value_t<X>;
    if constexpr (R::in_lanes) {
      static_assert(R::lanes == 16);
      cpu::f64_sum_lanes sums(Op::template identity<double>());
      const dim_t j = for_each_block<X>(c, L, [&](const V (&v)[16], dim_t at) {
        if (keep)
          for (dim_t u = 0; u < 16; ++u) keep[at + u] = v[u];
        sums.add(v);  // (Op::combine: a sum's or a mean's +)
      });
      double lane[16];
      sums.store(lane);
      for (dim_t u = 0; j + u < L; ++u) {
        const V v = X::value(c, j + u);
        if (keep) keep[j + u] = v;
        lane[u] = Op::combine(lane[u], static_cast<double>(v));
      }
      return R::fold_lanes(lane);
    } else {
      if constexpr (std::is_same_v<Op, ctg::op::max_r> && std::is_floating_point_v<V>) {
        // A max is exact, and the same in any order unless it is a zero (the
        // first of -0, +0 wins) or a NaN is seen (the last one wins): so it
        // runs in 16 lanes, and only those cases run again in order below.
        cpu::max_lanes<V> lanes(Op::template identity<V>());
        dim_t j = for_each_block<X>(c, L, [&](const V (&v)[16], dim_t) { lanes.add(v); });
        V lane[16];
        lanes.store(lane);
        bool nan = lanes.saw_nan();
        V m = Op::template identity<V>();
        for (; j < L; ++j) {
          const V v = X::value(c, j);
          nan |= v != v;
          m = v > m ? v : m;
        }
        for (dim_t u = 0; u < 16; ++u) m = lane[u] > m ? lane[u] : m;
        if (!nan && m != V(0)) return static_cast<double>(m);
      }
      double acc = Op::template identity<double>();
      dim_t j = for_each_block<X>(c, L, [&](const V (&v)[16], dim_t) {
        for (dim_t u = 0; u < 16; ++u) acc = Op::combine(acc, static_cast<double>(v[u]));
      });
      for (; j < L; ++j) acc = Op::combine(acc, static_cast<double>(X::value(c, j)));
      return acc;
    }
  }

  // The row's inlined reductions, in slot order (a later one may read an earlier one).
  template <class... Rs>
  static CTG_FORCEINLINE void inline_reductions([[maybe_unused]] ctx& c, [[maybe_unused]] dim_t L, tl::list<Rs...>) {
    ((c.local[Rs::slot] = Rs::value_of(combine_row<Rs>(c, L), L)), ...);
  }

  // Outputs j0 .. j1-1 of the body (j0 a multiple of 16) to o (the root,
  // and a side output: kernel::group_outputs), in blocks of 16 with no
  // loop-carried dependence: the inlined expression vectorizes (outputs
  // never alias the group's inputs).
  // (A T held in a named local and copied to memory is a copy GCC does not
  // vectorize: each store is written from its value as it is computed.)
  using outputs = typename Plan::outputs;
  template <class Body = body, class Ctx = ctx>
  static CTG_FORCEINLINE void write_range(const Ctx& c, outputs o, dim_t j0, dim_t j1) {
    cpu::each_in_overlapping_blocks_of_16(j0, j1, [&](dim_t j) CTG_INLINE_LAMBDA { o.put(j, Body::value(c, j)); });
  }
  static CTG_FORCEINLINE void write_row(const ctx& c, outputs o, dim_t L) { write_range(c, o, 0, L); }

  // The row cache (lower/kernel_expr.hpp): the sum that keeps its values, or void.
  using cached = typename row_cache_of<body, typename Plan::reductions>::type;
  template <class R>
  using kept_ctx = kernel::kept_context<ctx, value_t<typename R::child>>;
  // The row's inlined reductions with R keeping its values in keep.
  template <class R, class... Rs>
  static CTG_FORCEINLINE void inline_reductions_keeping(ctx& c, dim_t L, auto* keep, tl::list<Rs...>) {
    auto combined = [&]<class Q>(std::type_identity<Q>) {
      if constexpr (std::is_same_v<Q, R>) return combine_row<Q>(c, L, keep);
      else return combine_row<Q>(c, L);
    };
    ((c.local[Rs::slot] = Rs::value_of(combined(std::type_identity<Rs>{}), L)), ...);
  }
};

// Elements per thread task (a multiple of 16): below two of them, one thread.
inline constexpr dim_t cpu_task_elements = 16384;

// Rows [0, rows) of row_length L in tasks of whole rows, f(row_begin, row_end)
// on the pool when there is one and the work is worth it.
template <class F>
void cpu_row_tasks(cpu::thread_pool* pool, dim_t rows, dim_t L, F&& f) {
  const dim_t per = std::max<dim_t>(1, cpu_task_elements / std::max<dim_t>(L, 1));
  const dim_t tasks = (rows + per - 1) / per;
  auto task = [&](std::size_t t, unsigned) {
    const dim_t r0 = static_cast<dim_t>(t) * per;
    f(r0, std::min(rows, r0 + per));
  };
  cpu::run_tasks(tasks >= 2 ? pool : nullptr, static_cast<std::size_t>(tasks), task);
}

}  // namespace ctg::detail

namespace ctg::detail {
// Is a group's body a bare read of its one input (a reduction of a stored tensor)?
template <class Body>
struct is_bare_load : std::false_type {};
template <class T>
struct is_bare_load<kernel::load<0, T, true>> : std::true_type {};

// A reduction over axes other than the last, of one buffer x of the loop's
// shape, when the reduced axes are one run: x is [O, R, I] (I contiguous),
// and out[o, i] = Op over r of x[o, r, i]. Each accumulator sees r in order,
// as in the row loop of run_axis_reduce (so the same bits), without its
// per-row bookkeeping. Columns are reduced a chunk at a time in f64
// accumulators that stay in L1, each finalized and rounded right after its
// last r (a sum over heads of [B, H, T, D] would otherwise sweep B x T x D
// accumulators through memory once per head); threads take blocks of o and
// of i. Axes of one element are skipped: a reduction over a batch of one is
// [1, 1, I], not I outputs of one column each. Returns false, doing nothing,
// for any other pattern.
template <class Op, class T, class TOut>
bool axis_reduce_blocks(const rt_shape& it, const rt_shape& xs, const rt_shape& os, const T* x, TOut* out,
                        cpu::thread_pool* pool) {
  if (xs.rank != it.rank || os.rank > it.rank || it.numel() == 0) return false;
  dim_t O = 1, R = 1, I = 1;
  int phase = 0;  // 0: kept axes before the reduced run, 1: in it, 2: kept axes after it
  const std::size_t lead = it.rank - os.rank;
  for (std::size_t d = 0; d < it.rank; ++d) {
    if (xs.d[d] != it.d[d]) return false;  // (broadcast input: the general loop)
    if (it.d[d] == 1) continue;
    const bool reduced = d < lead || os.d[d - lead] == 1;
    if (reduced) {
      if (phase == 2) return false;
      phase = 1;
      R *= it.d[d];
    } else if (phase == 0) {
      O *= it.d[d];
    } else {
      phase = 2;
      I *= it.d[d];
    }
  }
  // Nothing of more than one element reduced (a batch of one): a copy, all of it one contiguous run of columns.
  if (phase == 0) std::swap(O, I);
  // Tasks: blocks of o, and of 16-multiple columns of i when there are few o.
  const dim_t threads = pool ? static_cast<dim_t>(pool->size()) : 1;
  const bool parallel = threads > 1 && O * R * I >= 2 * cpu_task_elements;
  const dim_t i_per = parallel && O < 2 * threads ? std::max<dim_t>(16, (I / (2 * threads) + 15) / 16 * 16) : I;
  const dim_t i_tasks = (I + i_per - 1) / i_per;
  const dim_t o_per = parallel ? std::max<dim_t>(1, cpu_task_elements / std::max<dim_t>(R * i_per, 1)) : O;
  const dim_t o_tasks = (O + o_per - 1) / o_per;
  const double count = static_cast<double>(R);
  auto task = [&](std::size_t t, unsigned) {
    constexpr dim_t chunk = 1024;  // 8 KB of accumulators
    double a[chunk];
    const dim_t o0 = static_cast<dim_t>(t) / i_tasks * o_per, i0 = static_cast<dim_t>(t) % i_tasks * i_per;
    const dim_t o1 = std::min(O, o0 + o_per), i1 = std::min(I, i0 + i_per);
    for (dim_t o = o0; o < o1; ++o)
      for (dim_t c0 = i0; c0 < i1; c0 += chunk) {
        const dim_t n = std::min(chunk, i1 - c0);
        std::fill(a, a + n, Op::template identity<double>());
        for (dim_t r = 0; r < R; ++r) {
          const T* xr = x + (o * R + r) * I + c0;
CTG_IVDEP
          for (dim_t i = 0; i < n; ++i) a[i] = Op::combine(a[i], static_cast<double>(load_as<T>(xr[i])));
        }
        TOut* oc = out + o * I + c0;
        for (dim_t i = 0; i < n; ++i) oc[i] = store_as<TOut>(Op::finalize(a[i], count));
      }
  };
  cpu::run_tasks(parallel ? pool : nullptr, static_cast<std::size_t>(o_tasks * i_tasks), task);
  return true;
}
}  // namespace ctg::detail

namespace ctg::cpu {
// Every element in one pass (all inputs have the output's shape).
template <class Plan>
void run_flat(const group_call& g, const bindings_view& b, thread_pool* pool = nullptr) {
  using F = detail::cpu_fused_group<Plan>;
  typename F::ctx c;
  F::layout(g, b, c);  // fills the context; every base stays 0
  const dim_t total = b.shape[g.iteration].numel();
  const auto out = detail::group_outputs_of<Plan>(g, b);
  constexpr dim_t per = detail::cpu_task_elements;
  const dim_t tasks = (total + per - 1) / per;
  auto task = [&](std::size_t t, unsigned) {
    const dim_t j0 = static_cast<dim_t>(t) * per;
    F::write_range(c, out, j0, std::min(total, j0 + per));
  };
  run_tasks(tasks >= 2 ? pool : nullptr, static_cast<std::size_t>(tasks), task);
}

// Row by row along the last dim: the row's reductions first, then its elements.
template <class Plan>
void run_rows(const group_call& g, const bindings_view& b, thread_pool* pool = nullptr) {
  using F = detail::cpu_fused_group<Plan>;
  typename F::ctx c0;
  const auto layout = F::layout(g, b, c0);
  const dim_t L = layout.row_length(), rows = L ? layout.rows() : 0;
  const auto out = detail::group_outputs_of<Plan>(g, b);
  if constexpr (!std::is_void_v<typename F::cached>) {
    using R = typename F::cached;
    if (L <= kernel::row_cache_limit) {
      using kept_body = detail::row_cache_body<typename Plan::body, R>;
      detail::cpu_row_tasks(pool, rows, L, [&](dim_t r0, dim_t r1) {
        typename F::template kept_ctx<R> c;
        static_cast<typename F::ctx&>(c) = c0;
        typename F::template value_t<typename R::child> kept[kernel::row_cache_limit];
        c.kept = kept;
        for (dim_t row = r0; row < r1; ++row) {
          layout.enter_row(c, row);
          F::template inline_reductions_keeping<R>(c, L, kept, typename Plan::reductions{});
          F::template write_range<kept_body>(c, out.from(row * L), 0, L);
        }
      });
      return;
    }
  }
  detail::cpu_row_tasks(pool, rows, L, [&](dim_t r0, dim_t r1) {
    typename F::ctx c = c0;
    for (dim_t row = r0; row < r1; ++row) {
      layout.enter_row(c, row);
      F::inline_reductions(c, L, typename Plan::reductions{});
      F::write_row(c, out.from(row * L), L);
    }
  });
}

// Row by row, the root reducing each row to one value (an empty row gives
// the reduction's value over nothing: sum 0, mean NaN, max -inf).
template <class Plan>
void run_row_reduce(const group_call& g, const bindings_view& b, thread_pool* pool = nullptr) {
  using F = detail::cpu_fused_group<Plan>;
  using rr = typename F::root_reduction;
  typename F::ctx c0;
  const auto layout = F::layout(g, b, c0);
  const dim_t L = layout.row_length(), rows = layout.rows();
  typename F::T* out = b.template as<typename F::T>(g.root);
  detail::cpu_row_tasks(pool, rows, L, [&](dim_t r0, dim_t r1) {
    typename F::ctx c = c0;
    for (dim_t row = r0; row < r1; ++row) {
      layout.enter_row(c, row);
      F::inline_reductions(c, L, typename Plan::reductions{});
      out[row] = store_as<typename F::T>(rr::value_of(F::template combine_row<rr>(c, L), L));
    }
  });
}

// The root reduces axes other than (or besides) the last: every input row
// combines into the f64 accumulators of the output elements it maps to, in
// row order; each is finalized and rounded once at the end (so an output
// element that no input reaches, in an empty tensor, is the value over nothing).
// The rows are visited grouped by the output row they reach (a counting
// sort: within a group, in row order), so each output row's accumulators
// stay in cache while its rows add up (a sum over heads of [B, H, T, D]
// would otherwise sweep all of [B, T, D] once per head); threads take blocks
// of output rows (and of columns, when there are few output rows). Every accumulator sees its rows in row order whatever the
// grouping or the thread count, so the bits are those of the plain row loop.
// Its scratch (backend::scratch_for): an accumulator per output element.
inline void reserve_axis_reduce(const group_call& g, const bindings_view& b, workspace& ws) {
  ws.reserve_axis_accumulators(static_cast<std::size_t>(b.shape[g.root].numel()));
}

template <class Plan>
void run_axis_reduce(const group_call& g, const bindings_view& b, workspace& ws) {
  using F = detail::cpu_fused_group<Plan>;
  using Op = typename Plan::root_op;
  if constexpr (detail::is_bare_load<typename Plan::body>::value && Plan::root_advances)  // (the last axis kept)
    if (detail::axis_reduce_blocks<Op>(b.shape[g.iteration], b.shape[g.input[0]], b.shape[g.root],
                                       b.template as<const typename Plan::body::dtype>(g.input[0]),
                                       b.template as<typename F::T>(g.root), ws.pool()))
      return;
  typename F::ctx c0;
  const auto layout = F::layout(g, b, c0);
  const rt_shape& it = b.shape[g.iteration];
  const rt_shape& os = b.shape[g.root];
  const dim_t total = it.numel(), L = layout.row_length(), rows = L ? layout.rows() : 0;
  dim_t out_stride[max_rank]{};
  kernel::broadcast_strides(os.rank, os.d, it.rank, out_stride);
  const dim_t out_count = os.numel();
  double* acc = ws.axis_accumulators(static_cast<std::size_t>(out_count));
  std::fill(acc, acc + out_count, Op::template identity<double>());
  // Output rows (of `unit` accumulators each) and the input rows reaching each, in row order.
  const dim_t unit = Plan::root_advances ? L : 1;
  const dim_t groups = unit ? (out_count + unit - 1) / unit : 0;
  ws.axis_rows.resize(static_cast<std::size_t>(2 * rows));
  ws.axis_start.assign(static_cast<std::size_t>(groups + 1), 0);
  dim_t* group_of = ws.axis_rows.data();
  dim_t* order = group_of + rows;
  dim_t* start = ws.axis_start.data();
  for (dim_t row = 0; row < rows; ++row) {
    group_of[row] = layout.row_offset(row, out_stride) / unit;
    ++start[group_of[row] + 1];
  }
  for (dim_t k = 0; k < groups; ++k) start[k + 1] += start[k];
  for (dim_t row = 0; row < rows; ++row) order[start[group_of[row]]++] = row;  // (start[k] ends as start[k + 1])
  // Output rows [k0, k1), columns [j0, j1) of each (all of a row when the root does not advance).
  auto output_rows = [&](dim_t k0, dim_t k1, dim_t j0, dim_t j1) {
    typename F::ctx c = c0;
    for (dim_t k = k0; k < k1; ++k) {
      double* a = acc + k * unit;
      for (dim_t q = k ? start[k - 1] : 0; q < start[k]; ++q) {
        const dim_t row = order[q];
        layout.enter_row(c, row);
        F::inline_reductions(c, L, typename Plan::reductions{});
        if constexpr (Plan::root_advances) {
CTG_IVDEP
          for (dim_t j = j0; j < j1; ++j) a[j] = Op::combine(a[j], static_cast<double>(F::body::value(c, j)));
        } else {
          a[0] = Op::combine(a[0], F::template combine_row<typename F::root_reduction>(c, L));
        }
      }
    }
  };
  // Tasks: blocks of output rows, and when those are few (a sum over
  // everything but the last dim), blocks of 16-multiple columns too.
  thread_pool* pool = ws.pool();
  const dim_t per = std::max<dim_t>(1, detail::cpu_task_elements * groups / std::max<dim_t>(total, 1));
  const dim_t row_tasks = groups ? (groups + per - 1) / per : 0;
  const dim_t threads = pool ? static_cast<dim_t>(pool->size()) : 1;
  const dim_t col_width = Plan::root_advances && row_tasks < 2 * threads && L >= 32
                              ? std::max<dim_t>(16, (L / (2 * threads) + 15) / 16 * 16)
                              : std::max<dim_t>(unit, 1);
  const dim_t col_tasks = Plan::root_advances ? (L + col_width - 1) / col_width : 1;
  const bool parallel = pool && row_tasks * col_tasks > 1 && total >= 2 * detail::cpu_task_elements;
  // On one thread: one task, every output row and column.
  const dim_t k_per = parallel ? per : std::max<dim_t>(groups, 1), j_per = parallel ? col_width : std::max<dim_t>(L, 1);
  const dim_t k_tasks = groups ? (groups + k_per - 1) / k_per : 0;
  const dim_t j_tasks = Plan::root_advances ? (L + j_per - 1) / j_per : 1;
  auto task = [&](std::size_t t, unsigned) {
    const dim_t k0 = static_cast<dim_t>(t) / j_tasks * k_per, j0 = static_cast<dim_t>(t) % j_tasks * j_per;
    output_rows(k0, std::min(groups, k0 + k_per), j0, std::min(L, j0 + j_per));
  };
  run_tasks(parallel ? pool : nullptr, static_cast<std::size_t>(k_tasks * j_tasks), task);
  const double count = static_cast<double>(total) / static_cast<double>(out_count);
  typename F::T* out = b.template as<typename F::T>(g.root);
  for (dim_t i = 0; i < out_count; ++i) out[i] = store_as<typename F::T>(Op::finalize(acc[i], count));
}

// A fused group with this plan, in the loop shape the lowering chose.
template <class Plan>
void run_fused(const group_call& g, const bindings_view& b, workspace& ws, float*) {
  static_assert(!Plan::outputs::has_side || Plan::loop == loop_kind::flat || Plan::loop == loop_kind::rows,
                "ctg: internal: only an elementwise group has a side output");
  if constexpr (Plan::loop == loop_kind::flat) run_flat<Plan>(g, b, ws.pool());
  else if constexpr (Plan::loop == loop_kind::rows) run_rows<Plan>(g, b, ws.pool());
  else if constexpr (Plan::loop == loop_kind::row_reduce) run_row_reduce<Plan>(g, b, ws.pool());
  else run_axis_reduce<Plan>(g, b, ws);
}

}  // namespace ctg::cpu

CTG_HOT_END
