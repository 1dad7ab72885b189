#pragma once
// A fusion group's loop body as a name-free type: what both backends run.
//
// The schedule cuts a step into groups; the body of a group's loop is the
// expression of its root, with every materialized input read from a buffer
// slot, inlined row reductions read from per-row locals, and dropout masks
// computed in place. kernel::body_t<Step, Root> spells that body with a few
// node types of its own, which name only op types, dtypes, slots and
// constants: no leaf names and no graph node types.
//
// Why a type of its own:
//   * the CPU loops and the CUDA kernels evaluate the same body type with the
//     same CTG_HD code (value), so elementwise results agree bit for bit;
//   * nvcc's host pass cannot spell a class-type template argument (a leaf's
//     fixed_string name) back into C++, so a __global__ template can only be
//     instantiated on types without them (README, "The CUDA backend");
//   * two groups that compute the same thing get the same body type, so they
//     share one instantiated kernel whatever their leaves are called.
//
// A body is evaluated at element j of the current row through a context that
// the loop fills: the slots' base pointers and row offsets, the row's
// position (for index-aware ops), the random key and the row's reductions.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/config.hpp>
#include <ctg/lower/group.hpp>

CTG_HOT_BEGIN

namespace ctg::kernel {

// What a body reads besides j: K buffer slots, NR row reductions.
template <std::size_t K, std::size_t NR>
struct context {
  const std::byte* ptr[K]{};
  dim_t base[K]{};
  dim_t row_pos = 0;  // index along the second-to-last dim (index-aware ops)
  random_key key{};   // dropout's seed, step and layer
  double local[NR]{};
};

// Buffer slot Slot of dtype T; Advances: it moves along the row (else a
// broadcast value, read at the row's base).
template <std::size_t Slot, class T, bool Advances>
struct load {
  using dtype = T;
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE compute_t<T> value(const Ctx& c, dim_t j) {
    const T* p = reinterpret_cast<const T*>(c.ptr[Slot]);
    if constexpr (Advances && requires { c.ahead; })  // read ahead (lower/read_ahead.hpp)
      return static_cast<compute_t<T>>(c.ahead[Slot][j - c.first]);
    else if constexpr (Advances)
      return load_as<T>(p[c.base[Slot] + j]);
    else
      return load_as<T>(p[c.base[Slot]]);
  }
};

// Doubles travel in kernel types as their bits (std::bit_cast): when nvcc
// registers a kernel, its host pass prints a double template argument with
// 15 significant digits, which names another instantiation than the one
// launched (1/sqrt(32) did: cudaErrorInvalidDeviceFunction at launch).
template <class T, std::uint64_t Bits>
struct constant {
  using dtype = T;
  static constexpr double v = std::bit_cast<double>(Bits);
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE compute_t<T> value(const Ctx&, dim_t) {
    return static_cast<compute_t<T>>(v);
  }
};

// Dropout's mask on random stream Stream, dropping with probability
// bit_cast<double>(PBits); its element index is where a buffer in slot Slot
// would be read.
template <std::uint32_t Stream, std::uint64_t PBits, std::size_t Slot, bool Advances, class T>
struct dropout {
  using dtype = T;
  static constexpr double p = std::bit_cast<double>(PBits);
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE T value(const Ctx& c, dim_t j) {
    const dim_t at = Advances ? c.base[Slot] + j : c.base[Slot];
    return dropout_value<p, T>(c.key, Stream, static_cast<std::uint64_t>(at));
  }
};

// The row's value of inlined reduction Slot (computed before the row's elements).
template <std::size_t Slot, class T>
struct local {
  using dtype = T;
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE compute_t<T> value(const Ctx& c, dim_t) {
    return static_cast<compute_t<T>>(c.local[Slot]);
  }
};

// Op over the children's values in T's compute type, rounded once to T.
template <class Op, class T, class... Xs>
struct apply {
  using dtype = T;
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE compute_t<T> value(const Ctx& c, dim_t j) {
    using C = compute_t<T>;
    if constexpr (requires { Op::index_aware; })
      return round_to<T>(Op::apply_at(j, c.row_pos, static_cast<C>(Xs::value(c, j))...));
    else
      return round_to<T>(Op::apply(static_cast<C>(Xs::value(c, j))...));
  }
};

// The lanes a row's sum is combined in (row_reduction below).
inline constexpr dim_t row_sum_lanes = 16;

// Reduction Slot of a row: Op over X's values along the row, combined in
// f64, finalized, rounded once to T. The row's order (combine_row): a sum or
// mean in 16 lanes, element j into lane j % 16 in row order, then the lanes
// added pairwise (lane u + lane u + 8, then + 4, + 2, + 1); 16 independent
// chains, which the CPU runs in SIMD registers (one chain in row order waits
// on each add). Any other op (a max) in row order. The CPU and the host-side
// model of the GPU's axis reductions use it (the GPU's own walk 16 threads
// at a time, a lane_part each: the same bits); a GPU row group (a warp or a
// block per row) combines in a tree; all then take value_of.
template <std::size_t Slot, class Op, class T, class X>
struct row_reduction {
  using op = Op;
  using dtype = T;
  using child = X;
  static constexpr std::size_t slot = Slot;
  static constexpr bool in_lanes = std::is_same_v<Op, ctg::op::sum_r> || std::is_same_v<Op, ctg::op::mean_r>;
  static constexpr dim_t lanes = row_sum_lanes;

  // The lanes' combination, pairwise, into lane[0].
  CTG_HD static CTG_FORCEINLINE double fold_lanes(double (&lane)[lanes]) {
    CTG_UNROLL
    for (dim_t w = lanes / 2; w >= 1; w /= 2) {
      CTG_UNROLL
      for (dim_t u = 0; u < w; ++u) lane[u] = Op::combine(lane[u], lane[u + w]);
    }
    return lane[0];
  }
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE double combine_row(const Ctx& c, dim_t L) {
    if constexpr (in_lanes) {
      double lane[lanes];
      CTG_UNROLL
      for (dim_t u = 0; u < lanes; ++u) lane[u] = Op::template identity<double>();
      for (dim_t j0 = 0; j0 < L; j0 += lanes) {
        CTG_UNROLL
        for (dim_t u = 0; u < lanes; ++u)
          if (j0 + u < L) lane[u] = Op::combine(lane[u], static_cast<double>(X::value(c, j0 + u)));
      }
      return fold_lanes(lane);
    } else {
      double acc = Op::template identity<double>();
      for (dim_t j = 0; j < L; ++j) acc = Op::combine(acc, static_cast<double>(X::value(c, j)));
      return acc;
    }
  }
  // Lane u of combine_row alone: elements u, u + lanes, ... in order. The
  // lanes' values folded by fold_lanes' order give combine_row's bits (a
  // GPU's 16 threads each take a lane of a row: exec/cuda/fused_kernel.cuh).
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE double lane_part(const Ctx& c, dim_t L, dim_t u) {
    static_assert(in_lanes, "ctg: internal: only a sum's rows are combined in lanes");
    double acc = Op::template identity<double>();
    for (dim_t j = u; j < L; j += lanes) acc = Op::combine(acc, static_cast<double>(X::value(c, j)));
    return acc;
  }
  // The row's value (what local<Slot, T> reads) from the combination of its L elements.
  CTG_HD static CTG_FORCEINLINE double value_of(double combined, dim_t L) {
    return round_to<T>(static_cast<compute_t<T>>(Op::finalize(combined, static_cast<double>(L))));
  }
};

// The row cache (both backends): a row group's last inlined sum whose values
// the body reads too (softmax: exp(x - max) is summed, then divided by the
// sum) keeps them in a row buffer as it sums them, and the body reads them
// back (kept_value) instead of computing them again: the same values, so
// the same bits. Longer rows than row_cache_limit compute again (the CPU's
// buffer is on its stack, a GPU block's in shared memory).
inline constexpr dim_t row_cache_limit = 4096;
// Element j of the row as the cached sum kept it.
template <class X>
struct kept_value {
  using dtype = typename X::dtype;
  template <class Ctx>
  CTG_HD static CTG_FORCEINLINE auto value(const Ctx& c, dim_t j) {
    return c.kept[j];
  }
};
// A loop's context with the row buffer that kept_value reads.
template <class Ctx, class V>
struct kept_context : Ctx {
  const V* kept = nullptr;
};

// Where a fused group's loop writes: its root's buffer (dtype T) and, where
// the group has a side output (a cast of its root: lower/schedule.hpp), that
// one's (dtype S; void: none). put writes element j of both from the body's
// value there; the side output is computed from the root's value as stored
// (round_to<T>), as a group of its own reading that value back computes the
// cast: the same bits.
template <class T, class S>
struct group_outputs {
  static constexpr bool has_side = !std::is_void_v<S>;
  T* root = nullptr;
  S* side = nullptr;

  // The cast of a root value as stored (x = round_to<T>(value)).
  CTG_HD static CTG_FORCEINLINE auto side_of(compute_t<T> x) {
    if constexpr (has_side) return store_as<S>(round_to<S>(static_cast<compute_t<S>>(x)));
  }
  // The outputs from element `offset` on (a row's start).
  CTG_HD CTG_FORCEINLINE group_outputs from(dim_t offset) const {
    if constexpr (has_side) return {root + offset, side + offset};
    else return {root + offset, side};
  }
  CTG_HD CTG_FORCEINLINE void put(dim_t j, compute_t<T> v) const {
    if constexpr (has_side) {
      const compute_t<T> x = round_to<T>(v);
      root[j] = store_as<T>(x);
      side[j] = side_of(x);
    } else {
      root[j] = store_as<T>(v);
    }
  }
};

// The identity: ops that only mark the graph (broadcast, no_grad, checkpoint)
// compute nothing, and a body must not name the node types they carry. A
// pass that changes no dtype is left out of the body altogether.
struct pass {
  template <class C>
  CTG_HD static CTG_FORCEINLINE C apply(C x) {
    return x;
  }
};
template <class Op>
struct name_free_op {
  using type = Op;
};
template <class S, class Like>
struct name_free_op<op::broadcast<S, Like>> {
  using type = pass;
};
template <>
struct name_free_op<op::no_grad> {
  using type = pass;
};
template <>
struct name_free_op<op::checkpoint> {
  using type = pass;
};

// An element node's body: Op over its children's bodies. softmax_div is
// one node to autodiff and the schedule (its rule reads its value), but its
// body is exp(z) then a division, each rounded to T as two nodes would be:
// the exp is the very expression the row's sum reads, so the row cache
// serves it, and the bits are those of softmax written as exp(z) / sum.
template <class Op, class T, class... Xs>
struct node_body {
  using type = apply<Op, T, Xs...>;
};
template <int Axis, class T, class Z, class SumExp>
struct node_body<op::softmax_div<Axis>, T, Z, SumExp> {
  using type = apply<op::div, T, apply<op::exp, T, Z>, SumExp>;
};

}  // namespace ctg::kernel

namespace ctg::detail {
// The body of node I evaluated inside the group rooted at R.
template <class Step, std::size_t R, std::size_t I>
consteval auto kernel_expr_of() {
  using nodes = typename step_of<Step>::nodes;
  using node = tl::at_t<I, nodes>;
  using info = group_info<Step, R>;
  constexpr const auto& t = schedule<Step>::table;
  using T = typename node::dtype;
  if constexpr (node::kind == node_kind::constant) {
    return std::type_identity<kernel::constant<T, std::bit_cast<std::uint64_t>(node::value)>>{};
  } else if constexpr (node::kind == node_kind::random) {
    return std::type_identity<kernel::dropout<node::stream, std::bit_cast<std::uint64_t>(node::probability),
                                              info::info.input_slot(I), advances_inner<node>, T>>{};
  } else if constexpr (I != R && t.materialized[I]) {
    return std::type_identity<kernel::load<info::info.input_slot(I), T, advances_inner<node>>>{};
  } else if constexpr (node::kind == node_kind::reduce) {
    return std::type_identity<kernel::local<info::info.reduction_slot(I), T>>{};
  } else {
    static_assert(node::kind == node_kind::elementwise, "ctg: internal: a group body holds only elementwise nodes");
    using kop = typename kernel::name_free_op<typename node::op>::type;
    using first_child = tl::at_t<0, typename node::children>;
    if constexpr (std::is_same_v<kop, kernel::pass> && std::is_same_v<typename first_child::dtype, T>) {
      return kernel_expr_of<Step, R, tl::index_of<first_child, nodes>::value>();  // nothing to compute, nothing to round
    } else {
      return []<class... X>(tl::list<X...>) {
        return std::type_identity<typename kernel::node_body<
            kop, T, typename decltype(kernel_expr_of<Step, R, tl::index_of<X, nodes>::value>())::type...>::type>{};
      }(typename node::children{});
    }
  }
}

template <class Step, std::size_t R, std::size_t... S>
consteval auto kernel_reductions_of(std::index_sequence<S...>) {
  using info = group_info<Step, R>;
  constexpr const auto& t = schedule<Step>::table;
  return tl::list<kernel::row_reduction<
      S, typename tl::at_t<info::info.reduction[S], typename step_of<Step>::nodes>::op,
      typename tl::at_t<info::info.reduction[S], typename step_of<Step>::nodes>::dtype,
      typename decltype(kernel_expr_of<Step, R, t.child(info::info.reduction[S], 0)>())::type>...>{};
}

// Does expression E read X (as E or inside an apply)?
template <class E, class X>
struct reads_expr : std::is_same<E, X> {};
template <class Op, class T, class... Xs, class X>
struct reads_expr<kernel::apply<Op, T, Xs...>, X>
    : std::bool_constant<std::is_same_v<kernel::apply<Op, T, Xs...>, X> || (reads_expr<Xs, X>::value || ...)> {};
// E with X replaced by By.
template <class E, class X, class By>
struct replace_expr {
  using type = std::conditional_t<std::is_same_v<E, X>, By, E>;
};
template <class Op, class T, class... Xs, class X, class By>
struct replace_expr<kernel::apply<Op, T, Xs...>, X, By> {
  using type = std::conditional_t<std::is_same_v<kernel::apply<Op, T, Xs...>, X>, By,
                                  kernel::apply<Op, T, typename replace_expr<Xs, X, By>::type...>>;
};
// The row cache's sum (kernel::row_cache_limit): the last of the reductions
// Rs that is a sum of values Body reads too (else void).
template <class Body, class Rs>
struct row_cache_of {
  using type = void;
};
template <class Body, class R, class... Rs>
struct row_cache_of<Body, tl::list<R, Rs...>> {
  using later = typename row_cache_of<Body, tl::list<Rs...>>::type;
  using type = std::conditional_t<!std::is_void_v<later>, later,
                                  std::conditional_t<R::in_lanes && reads_expr<Body, typename R::child>::value &&
                                                         !std::is_same_v<Body, typename R::child>,
                                                     R, void>>;
};
// Body reading the cached sum R's values back.
template <class Body, class R>
using row_cache_body = typename replace_expr<Body, typename R::child, kernel::kept_value<typename R::child>>::type;
}  // namespace ctg::detail

namespace ctg::kernel {

// The body of node I within the group rooted at R (I = R: the group's output;
// for a reduction root, pass its child).
template <class Step, std::size_t R, std::size_t I = R>
using expr_t = typename decltype(detail::kernel_expr_of<Step, R, I>())::type;

// What group R writes per element: its root's expression, or for a reduction
// root the expression it reduces.
template <class Step, std::size_t R>
using body_t = expr_t<Step, R,
                      tl::at_t<R, typename step_of<Step>::nodes>::kind == node_kind::reduce
                          ? schedule<Step>::table.child(R, 0)
                          : R>;

// The row reductions inlined into group R, in the order they are computed.
template <class Step, std::size_t R>
using reductions_t =
    decltype(detail::kernel_reductions_of<Step, R>(std::make_index_sequence<ctg::detail::group_info<Step, R>::nreductions>{}));

}  // namespace ctg::kernel

namespace ctg::kernel {

// A fused group as its runners see it, with no node types: the body, the
// row reductions inlined into it, the output dtype, the loop shape, the
// reduction the root applies to the body (RootOp, void when none), whether
// the root's value moves along the row (an axis reduction that keeps the last
// dim), and the context's sizes. Runners and kernels are instantiated on it,
// so equal groups of any steps share one instantiation.
}  // namespace ctg::kernel

namespace ctg::detail {
template <class Step, std::size_t R>
consteval auto side_dtype_of() {
  constexpr std::size_t side = schedule<Step>::table.side[R];
  if constexpr (side != no_node) return std::type_identity<typename tl::at_t<side, typename step_of<Step>::nodes>::dtype>{};
  else return std::type_identity<void>{};
}
template <class Step, std::size_t R>
consteval auto root_op_of() {
  using root = tl::at_t<R, typename step_of<Step>::nodes>;
  if constexpr (root::kind == node_kind::reduce) return std::type_identity<typename root::op>{};
  else return std::type_identity<void>{};
}
}  // namespace ctg::detail

namespace ctg::kernel {

template <class Body, class Reductions, class T, loop_kind Loop, class RootOp, bool RootAdvances,
          std::size_t Inputs, class Side = void>
struct fused_plan {
  using body = Body;
  using reductions = Reductions;
  using dtype = T;
  using side_dtype = Side;  // the side output's dtype (lower/schedule.hpp), void when none
  using outputs = group_outputs<T, Side>;
  using root_op = RootOp;
  static constexpr loop_kind loop = Loop;
  static constexpr bool root_advances = RootAdvances;
  static constexpr std::size_t inputs = Inputs;                   // input buffers, in slots 0 .. Inputs-1
  static constexpr std::size_t buffer_slots = Inputs > 0 ? Inputs : 1;  // (arrays of at least one)
  static constexpr std::size_t locals = Reductions::size > 0 ? Reductions::size : 1;
  using context = kernel::context<buffer_slots, locals>;
};

// The plan of the fused group rooted at R.
template <class Step, std::size_t R>
using fused_plan_t = fused_plan<
    body_t<Step, R>, reductions_t<Step, R>, typename tl::at_t<R, typename step_of<Step>::nodes>::dtype,
    ctg::detail::group_info<Step, R>::loop, typename decltype(ctg::detail::root_op_of<Step, R>())::type,
    ctg::detail::advances_inner<tl::at_t<R, typename step_of<Step>::nodes>>, ctg::detail::group_info<Step, R>::ninputs,
    typename decltype(ctg::detail::side_dtype_of<Step, R>())::type>;

}  // namespace ctg::kernel

CTG_HOT_END
