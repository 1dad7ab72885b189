#pragma once
// The public operations. Each builds a node type; shape and dtype checks fire
// here, at the user's call, with a "ctg:" message.
#include <ctg/graph/node.hpp>
#include <ctg/graph/traits.hpp>

namespace ctg {

namespace detail {
template <class Op, class... Xs>
constexpr auto make_ew() {
  // An i32 operand: only ops that read ids (one_hot, index_valid: they name
  // their result's dtype) take one. Reported here, once (a failed node stops
  // the cascade), before a dtype rule or an element function meets it.
  constexpr bool arithmetic_on_ids = (index_type<typename Xs::dtype> || ...) && !requires {
    typename Op::result_dtype;
  };
  static_assert(!arithmetic_on_ids,
                "ctg: i32 index tensors do not enter arithmetic (use gather, one_hot or cross_entropy)");
  // An fp8 payload means nothing without its scale (ctg::dequantize reads
  // it). (A failed node of an fp8 dtype was reported already.)
  constexpr bool arithmetic_on_fp8 =
      !arithmetic_on_ids && ((is_fp8_v<typename Xs::dtype> && Xs::kind != node_kind::failed) || ...);
  static_assert(!arithmetic_on_fp8,
                "ctg: fp8 needs a scale: an e4m3/e5m2 tensor cannot enter arithmetic directly; "
                "dequantize it with its scale first");
  if constexpr (arithmetic_on_ids || arithmetic_on_fp8)
    return node_t<failed_node<typename tl::at_t<0, tl::list<Xs...>>::dims, f32, node_t<Xs>...>>{};
  else
    return node_t<elementwise_node<Op, node_t<Xs>...>>{};
}
// The check behind a binary op, on the two shapes alone, so that the
// compiler's note names them: "[with char Op = '+'; A = ctg::shape<-1, 16>;
// B = ctg::shape<8>]".
template <char Op, class A, class B>
consteval bool fits() {
  static_assert(broadcastable_v<A, B>,
                "ctg: shape mismatch: the operands do not broadcast (the note above names the operator "
                "and both shapes: [with char Op = ...; A = ...; B = ...])");
  return broadcastable_v<A, B>;
}
// What a binary op gives after a reported mismatch: the larger operand's shape.
template <class A, class B>
using failed_binary_t =
    node_t<failed_node<std::conditional_t<(B::dims::rank > A::dims::rank), typename B::dims, typename A::dims>,
                       promote_t<typename A::dtype, typename B::dtype>, node_t<A>, node_t<B>>>;

// What a unary op gives after a reported mistake: a failed node of x's
// shape and dtype (the ops that read it report nothing more).
template <class X>
using failed_as_t = node_t<failed_node<typename X::dims, typename X::dtype, node_t<X>>>;

// A plain C++ number where a ctg expression is expected (x * 0.5f). The
// constant belongs in the type: ctg::lit<0.5>.
template <class S>
concept plain_number = std::is_arithmetic_v<S>;
template <class S>
consteval void report_plain_number() {
  static_assert(sizeof(S) == 0,
                "ctg: a plain number in an expression: constants are compile-time literals, write ctg::lit<0.5> "
                "(e.g. x * ctg::lit<0.5>, h + ctg::lit<1e-6>)");
}

template <class S, int Axis>
consteval std::size_t normalize_axis() {
  constexpr int r = static_cast<int>(S::rank);
  static_assert(Axis >= -r && Axis < r, "ctg: axis out of range for this tensor's rank");
  return static_cast<std::size_t>(Axis < 0 ? Axis + r : Axis);
}
template <class S, int Axis>
consteval shape_value keep_axis_value() {
  shape_value v = value_of<S>();
  v.d[normalize_axis<S, Axis>()] = 1;
  return v;
}
template <class S, int Axis>
using keep_axis_t = shape_from<keep_axis_value<S, Axis>()>;
}  // namespace detail

// ------------------------------------------------- elementwise arithmetic ----

#define CTG_BINARY_OPERATOR(SYM, OP)                                                               \
  template <expr A, expr B>                                                                        \
  constexpr auto operator SYM(A, B) {                                                              \
    if constexpr (detail::fits<#SYM[0], typename A::dims, typename B::dims>())                     \
      return detail::make_ew<op::OP, A, B>();                                                      \
    else return detail::failed_binary_t<A, B>{};                                                   \
  }                                                                                                \
  template <expr A, double V>                                                                      \
  constexpr auto operator SYM(A, literal<V>) {                                                     \
    return detail::make_ew<op::OP, A, constant_node<V, typename A::dtype>>();                      \
  }                                                                                                \
  template <double V, expr B>                                                                      \
  constexpr auto operator SYM(literal<V>, B) {                                                     \
    return detail::make_ew<op::OP, constant_node<V, typename B::dtype>, B>();                      \
  }                                                                                                \
  template <expr A, detail::plain_number S>                                                        \
  constexpr auto operator SYM(A, S) {                                                              \
    detail::report_plain_number<S>();                                                              \
    return node_t<failed_node<typename A::dims, typename A::dtype, node_t<A>>>{};                  \
  }                                                                                                \
  template <detail::plain_number S, expr B>                                                        \
  constexpr auto operator SYM(S, B) {                                                              \
    detail::report_plain_number<S>();                                                              \
    return node_t<failed_node<typename B::dims, typename B::dtype, node_t<B>>>{};                  \
  }
CTG_BINARY_OPERATOR(+, add)
CTG_BINARY_OPERATOR(-, sub)
CTG_BINARY_OPERATOR(*, mul)
CTG_BINARY_OPERATOR(/, div)
#undef CTG_BINARY_OPERATOR

template <expr X>
constexpr auto operator-(X) {
  return detail::make_ew<op::neg, X>();
}

#define CTG_UNARY_FUNCTION(NAME) \
  template <expr X>              \
  constexpr auto NAME(X) {       \
    return detail::make_ew<op::NAME, X>(); \
  }
CTG_UNARY_FUNCTION(exp)
CTG_UNARY_FUNCTION(log)
CTG_UNARY_FUNCTION(sqrt)
CTG_UNARY_FUNCTION(rsqrt)
CTG_UNARY_FUNCTION(square)
CTG_UNARY_FUNCTION(abs)
CTG_UNARY_FUNCTION(silu)
CTG_UNARY_FUNCTION(gelu)
CTG_UNARY_FUNCTION(relu)
CTG_UNARY_FUNCTION(sigmoid)
CTG_UNARY_FUNCTION(tanh)
#undef CTG_UNARY_FUNCTION

// cast<T>(x): x converted to T. Differentiable: its backward casts the incoming
// gradient back to x's dtype, so a cast never drops the gradient (B2).
template <class T, expr X>
constexpr auto cast(X) {
  constexpr bool target_ok = element_type<T>;
  static_assert(target_ok, "ctg: cast target must be an element type");
  constexpr bool to_fp8 = is_fp8_v<T> && !std::is_same_v<T, typename X::dtype>;
  constexpr bool from_fp8 = is_fp8_v<typename X::dtype> && !std::is_same_v<T, typename X::dtype> &&
                            X::kind != node_kind::failed;  // (a failed cast<e4m3> was reported already)
  // (An id is not a number: a cast would also go through f32, inexact past 2^24.)
  constexpr bool from_index = index_type<typename X::dtype> && !std::is_same_v<T, typename X::dtype>;
  static_assert(!to_fp8, "ctg: fp8 needs a scale: cast<e4m3/e5m2> would drop it; use ctg::quantize<Fmt, Scaling>(x)");
  static_assert(!from_fp8, "ctg: fp8 needs a scale: cast from e4m3/e5m2 would ignore it; use ctg::dequantize<T>(q)");
  static_assert(!from_index, "ctg: i32 index tensors do not enter arithmetic (use gather, one_hot or cross_entropy)");
  if constexpr (!target_ok) return detail::failed_as_t<X>{};
  else if constexpr (std::is_same_v<T, typename X::dtype>) return X{};
  else if constexpr (to_fp8 || from_fp8 || from_index) return node_t<failed_node<typename X::dims, T, node_t<X>>>{};
  else return detail::make_ew<op::cast<T>, X>();
}

// no_grad(x): x's value with no gradient path through it. Part of the type, so a
// no-grad copy is never the same node as a grad one (B5).
template <expr X>
constexpr auto no_grad(X) {
  return detail::make_ew<op::no_grad, X>();
}

// checkpoint(x): x's value, kept for backward, while the values computed on
// the way to it (down to leaves, other checkpoints, and values that something
// outside also reads) are not kept: backward recomputes them from the kept
// ones, running the same groups again (so the recomputed values are
// bitwise those of the forward). The gradient passes through unchanged.
template <expr X>
constexpr auto checkpoint(X) {
  static_assert(replayable_below_v<X>,
                "ctg: not replayable inside checkpoint: a node in this region changes state as it runs "
                "(its state_replay is ctg::replay::none), so a recompute would not see what the forward saw");
  return detail::make_ew<op::checkpoint, X>();
}

// dropout<"name">(x, lit<p>): each element of x zeroed with probability p,
// the others scaled by 1/(1-p), in f32 (f64 for f64) and rounded once to x's dtype. The
// mask is keyed by (seed, step, name, layer, element index): the same on
// every backend and in every recompute. Names must differ between dropouts.
template <fixed_string Name, expr X, double P>
constexpr auto dropout(X x, literal<P>) {
  if constexpr (P == 0.0) return x;
  else {
    using C = compute_t<typename X::dtype>;
    return cast<typename X::dtype>(cast<C>(x) * node_t<dropout_mask_node<Name, P, node_t<X>, C>>{});
  }
}

// broadcast_to<S>(x): x stretched to shape S.
template <class S, expr X>
constexpr auto broadcast_to(X) {
  static_assert(stretches_to<typename X::dims, S>(), "ctg: shape mismatch: cannot broadcast to this shape");
  if constexpr (std::is_same_v<S, typename X::dims>) return X{};
  else return detail::make_ew<op::broadcast<S>, X>();
}
namespace detail {
// broadcast_like<L>(x): x stretched to L's shape, its run-time dims taken
// from L unchecked. Internal: a reduction's gradient, where L is the
// reduction's input, in the graph and of the shape x was reduced from by
// construction. (Public, it took L's sizes on trust, L outside the graph.)
template <class L, expr X>
constexpr auto broadcast_like(X) {
  using S = typename L::dims;
  static_assert(stretches_to<typename X::dims, S>(), "ctg: shape mismatch: cannot broadcast to this shape");
  if constexpr (std::is_same_v<S, typename X::dims>) return X{};
  else return make_ew<op::broadcast<S, L>, X>();
}
}  // namespace detail

// ------------------------------------------------------------ reductions ----

// NAME<axis>(x) reduces one axis and keeps it as size 1; NAME(x) reduces everything to a scalar.
// (An axis out of range, or ids, are reported once: the failed node stops the cascade.)
namespace detail {
// Reports an axis X lacks, once, and says whether X has it.
template <class X, int Axis>
consteval bool axis_in_range() {
  constexpr int rank = static_cast<int>(X::dims::rank);
  static_assert(Axis >= -rank && Axis < rank, "ctg: axis out of range for this tensor's rank");
  return Axis >= -rank && Axis < rank;
}
template <class X>
consteval bool reducible() {
  static_assert(!index_type<typename X::dtype>, "ctg: i32 index tensors cannot be reduced");
  constexpr bool fp8 = is_fp8_v<typename X::dtype> && X::kind != node_kind::failed;  // (a failed one: reported)
  static_assert(index_type<typename X::dtype> || !fp8,
                "ctg: fp8 needs a scale: an e4m3/e5m2 tensor cannot enter arithmetic directly; "
                "dequantize it with its scale first");
  return !index_type<typename X::dtype> && !is_fp8_v<typename X::dtype>;
}
}  // namespace detail
#define CTG_REDUCTION(NAME, OP)                                                                     \
  template <int Axis, expr X>                                                                       \
  constexpr auto NAME(X) {                                                                          \
    if constexpr (detail::axis_in_range<X, Axis>() && detail::reducible<X>())                       \
      return node_t<reduce_node<op::OP, detail::keep_axis_t<typename X::dims, Axis>, node_t<X>>>{}; \
    else                                                                                            \
      return node_t<failed_node<typename X::dims, f32, node_t<X>>>{};                               \
  }                                                                                                 \
  template <expr X>                                                                                 \
  constexpr auto NAME(X) {                                                                          \
    if constexpr (detail::reducible<X>())                                                           \
      return node_t<reduce_node<op::OP, shape<>, node_t<X>>>{};                                     \
    else                                                                                            \
      return node_t<failed_node<shape<>, f32, node_t<X>>>{};                                        \
  }
CTG_REDUCTION(sum, sum_r)
CTG_REDUCTION(mean, mean_r)
CTG_REDUCTION(max, max_r)
#undef CTG_REDUCTION

// amax(x): the largest magnitude in the whole tensor (what FP8 scaling needs).
template <expr X>
constexpr auto amax(X x) {
  return max(abs(x));
}
// sum_to<S>(x): x summed down to shape S (the adjoint of broadcasting).
template <class S, expr X>
constexpr auto sum_to(X) {
  constexpr bool fits = stretches_to<S, typename X::dims>();
  static_assert(fits, "ctg: shape mismatch: reduction target does not fit");
  if constexpr (!fits) return node_t<failed_node<S, typename X::dtype, node_t<X>>>{};
  else if constexpr (std::is_same_v<S, typename X::dims>) return X{};
  else return node_t<reduce_node<op::sum_r, S, node_t<X>>>{};
}

// softmax / log_softmax along an axis. The shift by the max is taken without
// gradient: softmax does not depend on it, so no gradient is lost. Each ends
// in one node whose gradient comes from its own value (op::softmax_div,
// op::log_softmax_sub), so the exp(z) that forward sums is read by nothing
// else and stays in the sum's loop.
// (Their last node names the axis counted from the front, so softmax<-1>
// and softmax<rank - 1> are the same type, as sum<-1> and sum<rank - 1> are.)
// Of a 16-bit x they compute in f32 and round once, as PyTorch does:
// rounding x - max to bf16 first lost most of a small probability's bits.
namespace detail {
template <class X, int Axis>
inline constexpr int axis_from_front = static_cast<int>(normalize_axis<typename X::dims, Axis>());
template <class X>
inline constexpr bool narrow_v = std::is_same_v<typename X::dtype, bf16> || std::is_same_v<typename X::dtype, f16>;
}  // namespace detail
template <int Axis = -1, expr X>
constexpr auto softmax(X x) {
  if constexpr (!detail::axis_in_range<X, Axis>()) {  // (reported once: the max, sum and exp inside would too)
    return detail::failed_as_t<X>{};
  } else if constexpr (detail::narrow_v<X>) {
    return cast<typename X::dtype>(softmax<Axis>(cast<f32>(x)));
  } else {
    auto z = x - no_grad(max<Axis>(x));
    auto sum_exp = no_grad(sum<Axis>(exp(z)));
    return detail::make_ew<op::softmax_div<detail::axis_from_front<X, Axis>>, decltype(z), decltype(sum_exp)>();
  }
}
template <int Axis = -1, expr X>
constexpr auto log_softmax(X x) {
  if constexpr (!detail::axis_in_range<X, Axis>()) {  // (reported once: the max, sum and exp inside would too)
    return detail::failed_as_t<X>{};
  } else if constexpr (detail::narrow_v<X>) {
    return cast<typename X::dtype>(log_softmax<Axis>(cast<f32>(x)));
  } else {
    auto z = x - no_grad(max<Axis>(x));
    auto log_sum_exp = no_grad(log(sum<Axis>(exp(z))));
    return detail::make_ew<op::log_softmax_sub<detail::axis_from_front<X, Axis>>, decltype(z),
                           decltype(log_sum_exp)>();
  }
}

// ---------------------------------------------------------------- matmul ----

namespace detail {
// matmul's checks, on the two shapes alone (the note names them, as fits does).
template <class A, class B>
consteval bool matmul_fits() {
  constexpr bool ranks = A::rank >= 2 && B::rank >= 2;
  static_assert(ranks, "ctg: matmul needs operands of rank 2 or more");
  if constexpr (ranks) {
    static_assert(matmul_shape_of(value_of<A>(), value_of<B>()).ok,
                  "ctg: shape mismatch: matmul inner dims (or batch dims) do not agree (the note above names "
                  "both shapes: [with A = ...; B = ...])");
    return matmul_shape_of(value_of<A>(), value_of<B>()).ok;
  }
  return false;
}
// What matmul gives after a reported mismatch: A's shape with B's columns.
template <class A, class B>
consteval shape_value failed_matmul_shape() {
  shape_value v = value_of<typename A::dims>();
  if (v.rank == 0) v.rank = 1;
  v.d[v.rank - 1] = B::dims::rank ? B::dims::dims[B::dims::rank - 1] : 1;
  return v;
}
}  // namespace detail

namespace detail {
// An operand as a product reads it: transpose(x) is x with its flag flipped.
template <class X, bool T, bool = X::kind == node_kind::transpose>
struct product_operand {
  using node = X;
  static constexpr bool transposed = T;
};
template <class X, bool T>
struct product_operand<X, T, true> {
  using node = tl::at_t<0, typename X::children>;
  static constexpr bool transposed = !T;
};

// A product broadcasts batch dims itself, so an operand that only stretches
// batch dims (a broadcast whose last two dims are its child's) is read as
// its child where the product keeps its shape: no stretched copy is made.
// (Autodiff makes such operands: a sum over heads' gradient, stretched back
// over the heads, times per-head weights.)
template <class Op>
inline constexpr bool is_broadcast_op = false;
template <class S, class L>
inline constexpr bool is_broadcast_op<op::broadcast<S, L>> = true;
template <class X, bool = X::kind == node_kind::elementwise>
struct stretched_from {
  using type = X;
};
template <class X>
struct stretched_from<X, true> {
  using type = std::conditional_t<is_broadcast_op<typename X::op>, tl::at_t<0, typename X::children>, X>;
};
// Does the product keep its shape with operand x read as c (x first:
// op(x) op(other), else op(other) op(x))?
consteval bool same_product_shape(shape_value x, shape_value c, shape_value other, bool tx, bool to, bool x_first) {
  if (x.rank < 2 || c.rank < 2 || c.d[c.rank - 1] != x.d[x.rank - 1] || c.d[c.rank - 2] != x.d[x.rank - 2])
    return false;
  if (tx) x = swap_last_two(x), c = swap_last_two(c);
  if (to && other.rank >= 2) other = swap_last_two(other);
  const shape_value before = x_first ? matmul_shape_of(x, other) : matmul_shape_of(other, x);
  const shape_value after = x_first ? matmul_shape_of(c, other) : matmul_shape_of(other, c);
  if (!after.ok || after.rank != before.rank) return false;
  for (std::size_t i = 0; i < before.rank; ++i)
    if (after.d[i] != before.d[i]) return false;
  return true;
}
template <class X, class Other, bool TX, bool TO, bool XFirst>
consteval bool reads_child() {
  using C = typename stretched_from<X>::type;
  if constexpr (std::is_same_v<C, X>) return false;
  else return same_product_shape(value_of<typename X::dims>(), value_of<typename C::dims>(),
                                 value_of<typename Other::dims>(), TX, TO, XFirst);
}
template <class A, class B, bool TA, bool TB, bool SumBatches>
constexpr auto matmul_reading_b() {
  if constexpr (reads_child<B, A, TB, TA, false>())
    return node_t<matmul_node<A, typename stretched_from<B>::type, TA, TB, SumBatches>>{};
  else
    return node_t<matmul_node<A, B, TA, TB, SumBatches>>{};
}

// op(a) op(b) (op: transpose where TA / TB) as one matmul node; a transposed
// operand, given as transpose(x) or by its flag, is read where it lies, and
// one stretched along batch dims, as its child. (The choice is made by
// branches, not by an alias of the chosen type: nvcc's front end, given a
// node spelled through such an alias, did not finish the tiny transformer.)
// SumBatches: their sum over the product's batches (matmul_node). (Reading a
// stretched operand as its child keeps the product's batches, so the sum too.)
template <bool TA, bool TB, bool SumBatches = false, expr A, expr B>
constexpr auto matmul_op(A, B) {
  using a = product_operand<node_t<A>, TA>;
  using b = product_operand<node_t<B>, TB>;
  using an = typename a::node;
  using bn = typename b::node;
  if constexpr (reads_child<an, bn, a::transposed, b::transposed, true>())
    return matmul_reading_b<typename stretched_from<an>::type, bn, a::transposed, b::transposed, SumBatches>();
  else
    return matmul_reading_b<an, bn, a::transposed, b::transposed, SumBatches>();
}
}  // namespace detail

template <expr A, expr B>
constexpr auto matmul(A, B) {
  if constexpr (A::kind == node_kind::failed || B::kind == node_kind::failed)  // (reported already)
    return node_t<failed_node<shape_from<detail::failed_matmul_shape<A, B>()>,
                              promote_t<typename A::dtype, typename B::dtype>, node_t<A>, node_t<B>>>{};
  else if constexpr (detail::matmul_fits<typename A::dims, typename B::dims>())
    return detail::matmul_op<false, false>(A{}, B{});
  else
    return node_t<failed_node<shape_from<detail::failed_matmul_shape<A, B>()>,
                              promote_t<typename A::dtype, typename B::dtype>, node_t<A>, node_t<B>>>{};
}

// transpose(x): swap the last two dims.
template <expr X>
constexpr auto transpose(X) {
  constexpr bool rank_ok = X::dims::rank >= 2;
  static_assert(rank_ok, "ctg: transpose needs a tensor of rank 2 or more");
  if constexpr (!rank_ok) return detail::failed_as_t<X>{};
  else return node_t<transpose_node<node_t<X>>>{};
}

// ----------------------------------------------------------------- views ----

namespace detail {
template <class S, int Axis>
consteval shape_value unsqueezed() {
  constexpr int r = static_cast<int>(S::rank);
  static_assert(S::rank < max_rank, "ctg: tensors have at most 6 dims");
  const std::size_t a = static_cast<std::size_t>(Axis < 0 ? Axis + r + 1 : Axis);
  shape_value v;
  for (std::size_t i = 0; i < S::rank; ++i) v.d[v.rank++ + (i >= a)] = S::dims[i];
  v.d[a] = 1;
  v.rank = S::rank + 1;
  return v;
}
template <class S, int Axis>
consteval shape_value squeezed() {
  constexpr std::size_t a = normalize_axis<S, Axis>();
  shape_value v;
  for (std::size_t i = 0; i < S::rank; ++i)
    if (i != a) v.d[v.rank++] = S::dims[i];
  return v;
}
template <class S, dim_t Last>
consteval shape_value with_last_dim() {
  shape_value v = value_of<S>();
  v.d[v.rank - 1] = Last;
  return v;
}
// A view that starts past its base's first byte (a part of a stack's or
// attention's gradients): a reshape of it is not a reshape of its base.
template <class X>
inline constexpr bool view_with_offset = requires { X::byte_offset; } || requires { X::value_index; };
template <class A, class B>
consteval bool reshapable() {
  dim_t pa = 1, pb = 1;
  std::size_t da = 0, db = 0;
  for (dim_t d : A::dims)
    if (d == dyn) ++da;
    else pa *= d;
  for (dim_t d : B::dims)
    if (d == dyn) ++db;
    else pb *= d;
  // The same dyn dims in order, or (merging) several dyn dims into one.
  return pa == pb && (da == db || (db == 1 && da >= 1));
}
}  // namespace detail

// reshape<S>(x): x's elements, in order, under shape S (a view: nothing is
// copied). S keeps x's static element count; its ctg::dyn dims are x's, in
// order, or one dyn dim that merges all of x's (reshape<shape<dyn, K>> of
// [dyn, dyn, K]).
template <class S, expr X>
constexpr auto reshape(X) {
  static_assert(detail::reshapable<typename X::dims, S>(),
                "ctg: shape mismatch: reshape must keep the static element count and the ctg::dyn dims (or merge them into one)");
  if constexpr (std::is_same_v<S, typename X::dims>) return X{};
  else if constexpr (X::kind == node_kind::view && !detail::view_with_offset<X>)  // one view
    return reshape<S>(tl::at_t<0, typename X::children>{});
  else return node_t<reshape_node<S, node_t<X>>>{};
}
// unsqueeze<axis>(x): a new dim of size 1 at axis.  squeeze<axis>(x): drop a static dim of 1.
// (A bad axis is reported once: the result is then a failed node.)
template <int Axis, expr X>
constexpr auto unsqueeze(X x) {
  constexpr int r = static_cast<int>(X::dims::rank);
  constexpr bool in_range = Axis >= -(r + 1) && Axis <= r;
  static_assert(in_range, "ctg: axis out of range for unsqueeze");
  if constexpr (!in_range) return detail::failed_as_t<X>{};
  else return reshape<shape_from<detail::unsqueezed<typename X::dims, Axis>()>>(x);
}
template <int Axis, expr X>
constexpr auto squeeze(X x) {
  constexpr bool squeezable = [] {
    if constexpr (!detail::axis_in_range<X, Axis>()) return false;
    else {
      constexpr bool one = X::dims::dims[detail::normalize_axis<typename X::dims, Axis>()] == 1;
      static_assert(one, "ctg: shape mismatch: squeeze needs a static dim of 1 there");
      return one;
    }
  }();
  if constexpr (!squeezable) return detail::failed_as_t<X>{};
  else return reshape<shape_from<detail::squeezed<typename X::dims, Axis>()>>(x);
}

// --------------------------------------------------------- index tensors ----

// gather(table, ids): table's rows picked by ids (an i32 tensor); shape ids ++ table[1:].
// Its gradient adds each row's gradient back into the table row (repeated ids add up).
template <expr Table, expr Ids>
constexpr auto gather(Table, Ids) {
  if constexpr (Ids::kind == node_kind::failed || Table::kind == node_kind::failed)  // (reported already)
    return node_t<failed_node<typename Ids::dims, typename Table::dtype, node_t<Table>, node_t<Ids>>>{};
  else
    return node_t<gather_node<node_t<Table>, node_t<Ids>>>{};
}

// one_hot<Classes>(ids): f32 [ids..., Classes], 1 at each id's column.
// one_hot<Classes, Ignore>(ids): the same, with a zero row where the id is
// Ignore. Any other id outside [0, Classes) is a run-time ctg::error.
// (Ids are compared with columns and Ignore as f32, the group's compute
// type, which holds every integer below 2^24 exactly: hence at most 2^24
// classes and |Ignore| < 2^24. Past that, two columns of one id took a 1:
// one_hot<2^24 + 4> of id 2^24 + 1 had two, and cross_entropy summed both.)
template <dim_t Classes, int... Ignore, expr Ids>
constexpr auto one_hot(Ids ids) {
  static_assert(index_type<typename Ids::dtype>, "ctg: one_hot takes an i32 tensor");
  static_assert(Classes >= 2 && Classes <= (dim_t{1} << 24),
                "ctg: one_hot needs at least 2 classes (and at most 2^24: ids are compared in f32, exact up to "
                "2^24)");
  static_assert(((Ignore > -(1 << 24) && Ignore < (1 << 24)) && ...),
                "ctg: an ignored index must be less than 2^24 in magnitude: ids are compared in f32, which holds "
                "every integer below 2^24 exactly");
  using col = decltype(unsqueeze<-1>(ids));
  return detail::make_ew<op::one_hot<shape_from<detail::with_last_dim<typename col::dims, Classes>()>, Ignore...>,
                         col>();
}

// index_valid<Ignore>(ids): f32, 0 where the id equals Ignore and 1 elsewhere.
template <int Ignore, expr Ids>
constexpr auto index_valid(Ids) {
  static_assert(index_type<typename Ids::dtype>, "ctg: index_valid takes an i32 tensor");
  static_assert(Ignore > -(1 << 24) && Ignore < (1 << 24),
                "ctg: an ignored index must be less than 2^24 in magnitude: ids are compared in f32, which holds "
                "every integer below 2^24 exactly");
  return detail::make_ew<op::index_valid<Ignore>, Ids>();
}

// causal_mask(scores): scores[..., i, j] for j <= i, -inf above the diagonal
// (so a softmax over the last dim attends only to earlier positions).
template <expr X>
constexpr auto causal_mask(X) {
  static_assert(X::dims::rank >= 2, "ctg: causal_mask needs a tensor of rank 2 or more");
  return detail::make_ew<op::causal_mask<true>, X>();
}

}  // namespace ctg
