#pragma once
// Every backward rule, in one place. rule<K>(node, g) is the gradient that
// reaches child K of `node`, given the gradient g of the node itself, written
// as ordinary ctg expressions (so the backward graph is scheduled and fused
// like the forward). Autodiff (graph/autodiff.hpp) then casts it to the
// child's gradient dtype and sums it down to the child's shape.
//
// Elementwise functors say how a gradient crosses them (graph/functors.hpp):
// grad::pass passes it on unchanged (cast, broadcast, checkpoint), grad::none
// stops it (the node never requires grad, so no rule is asked for), and
// grad::rule needs a branch in elementwise_rule below. A functor declared
// grad::rule without one is the compile error "ctg: no backward rule for this
// op", never a silent identity gradient.
#include <type_traits>

#include <ctg/graph/attention.hpp>
#include <ctg/graph/fp8.hpp>
#include <ctg/graph/ops.hpp>

namespace ctg {

namespace detail {
template <class>
inline constexpr bool dependent_false = false;

template <class Op>
inline constexpr bool is_log_softmax_sub = false;
template <int Axis>
inline constexpr bool is_log_softmax_sub<op::log_softmax_sub<Axis>> = true;
template <class Op>
inline constexpr bool is_softmax_div = false;
template <int Axis>
inline constexpr bool is_softmax_div<op::softmax_div<Axis>> = true;

// The gradient reaching child K of an elementwise node of Op (children Xs).
// (The children come as arguments, deduced: g++ 12 takes time exponential in
// the graph's depth when these node types are given as explicit template
// arguments instead, 27 s vs 2.3 s for 12 residual blocks.)
template <std::size_t K, class Op, class Self, class G, class X, class... Rest>
constexpr auto elementwise_rule(Self self, G g, X x, Rest...) {
  if constexpr (Op::gradient == grad::pass) return g;
  // ---- unary ----
  else if constexpr (std::is_same_v<Op, op::neg>) return -g;
  else if constexpr (std::is_same_v<Op, op::exp>) return g * self;
  else if constexpr (std::is_same_v<Op, op::log>) return g / x;
  else if constexpr (std::is_same_v<Op, op::sqrt>) return g * lit<0.5> / self;
  else if constexpr (std::is_same_v<Op, op::rsqrt>) return g * lit<-0.5> * self * self * self;
  else if constexpr (std::is_same_v<Op, op::square>) return g * lit<2.0> * x;
  else if constexpr (std::is_same_v<Op, op::abs>) return g * make_ew<op::sign, X>();
  else if constexpr (std::is_same_v<Op, op::relu>) return g * make_ew<op::step, X>();
  else if constexpr (std::is_same_v<Op, op::sigmoid>) return g * self * (lit<1.0> - self);
  else if constexpr (std::is_same_v<Op, op::tanh>) return g * (lit<1.0> - square(self));
  else if constexpr (std::is_same_v<Op, op::silu>) return g * make_ew<op::silu_grad, X>();
  else if constexpr (std::is_same_v<Op, op::gelu>) return g * make_ew<op::gelu_grad, X>();
  else if constexpr (std::is_same_v<Op, op::silu_grad>) {
    // silu''(x) = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)
    constexpr auto s = sigmoid(x);
    return g * (s * (lit<1.0> - s) * (lit<2.0> + x * (lit<1.0> - lit<2.0> * s)));
  } else if constexpr (std::is_same_v<Op, op::gelu_grad>) {
    // gelu''(x) = phi(x) (2 - x^2), phi the standard normal density
    return g * (exp(square(x) * lit<-0.5>) * lit<0.39894228040143267794> * (lit<2.0> - square(x)));
  } else if constexpr (std::is_same_v<Op, op::causal_mask<true>> || std::is_same_v<Op, op::causal_mask<false>>) {
    return make_ew<op::causal_mask<false>, G>();  // the kept positions pass g on, the others get 0
  }
  // ---- binary ----
  else if constexpr (std::is_same_v<Op, op::add>) return g;
  else if constexpr (std::is_same_v<Op, op::sub>) {
    if constexpr (K == 0) return g;
    else return -g;
  } else if constexpr (std::is_same_v<Op, op::mul>) {
    using B = tl::at_t<0, tl::list<Rest...>>;
    if constexpr (K == 0) return g * B{};
    else return g * x;
  } else if constexpr (std::is_same_v<Op, op::div>) {
    using B = tl::at_t<0, tl::list<Rest...>>;
    if constexpr (K == 0) return g / B{};
    else return -(g * self) / B{};  // d(a/b)/db = -(a/b)/b
  } else if constexpr (std::is_same_v<Op, op::keep_where>) {
    // a's gradient where m is not 0; m's is 0 (almost everywhere): g kept where 0 is not 0.
    using M = tl::at_t<0, tl::list<Rest...>>;
    if constexpr (K == 0) return make_ew<op::keep_where, G, M>();
    else return make_ew<op::keep_where, G, constant_node<0.0, typename G::dtype>>();
  } else if constexpr (std::is_same_v<Op, op::div_by_count>) {
    using B = tl::at_t<0, tl::list<Rest...>>;
    if constexpr (K == 0) return make_ew<op::div_by_count, G, B>();
    else return -make_ew<op::div_by_count, decltype(g * self), B>() * make_ew<op::step, decltype(B{} - lit<1.0>)>();
  } else if constexpr (is_log_softmax_sub<Op>) {
    // y = z - log(sum(exp(z))): dz = g - softmax * sum(g), softmax = exp(y).
    // (Child 1 is built without gradient; were it to need one, it is -g.)
    if constexpr (K == 0) return g - exp(self) * sum<Op::axis>(g);
    else return -g;
  } else if constexpr (is_softmax_div<Op>) {
    // y = exp(z) / s: dz = y * (g - sum(g * y)), PyTorch's softmax backward.
    // (Child 1 is built without gradient; were it to need one, it is -g y / s.)
    using B = tl::at_t<0, tl::list<Rest...>>;
    if constexpr (K == 0) return self * (g - sum<Op::axis>(g * self));
    else return -(g * self) / B{};
  } else {
    static_assert(dependent_false<Op>,
                  "ctg: no backward rule for this op (see the Op in the instantiation above): add a branch to "
                  "graph/rules.hpp, or declare its gradient grad::pass or grad::none in graph/functors.hpp");
    return g;  // already reported: stop further errors
  }
}
}  // namespace detail

// (A vertex reaches these overloads through its definition, its base class:
// node_t of that definition is the vertex again.)
template <std::size_t K, class Op, class... Xs, class G>
constexpr auto rule(elementwise_node<Op, Xs...>, G g) {
  return detail::elementwise_rule<K, Op>(node_t<elementwise_node<Op, Xs...>>{}, g, Xs{}...);
}

template <std::size_t K, class Op, class Out, class X, class G>
constexpr auto rule(reduce_node<Op, Out, X>, G g) {
  if constexpr (std::is_same_v<Op, op::sum_r>) {
    return detail::broadcast_like<X>(g);
  } else if constexpr (std::is_same_v<Op, op::mean_r>) {
    // 1/count in the compute type: a narrow 1/count would underflow (f16) or round twice.
    return detail::broadcast_like<X>(g) *
           node_t<recip_count_node<X, node_t<reduce_node<Op, Out, X>>, compute_t<typename G::dtype>>>{};
  } else {
    static_assert(std::is_same_v<Op, op::max_r>, "ctg: no backward rule for this reduction");
    // max: the gradient goes to the elements equal to the max, split evenly among ties.
    auto hit = detail::make_ew<op::equal, X, reduce_node<Op, Out, X>>();
    return g * hit / sum_to<Out>(hit);
  }
}

namespace detail {
// A of [dyn..., dyn, K] (batches of rows) times a matrix B: are all A's
// dims but the last ctg::dyn (so its rows merge into one dyn dim)?
template <class A, class B>
consteval bool batched_times_matrix() {
  bool rows_merge = A::dims::rank > 2 && B::dims::rank == 2;
  for (std::size_t i = 0; i + 1 < A::dims::rank; ++i) rows_merge = rows_merge && A::dims::dims[i] == dyn;
  return rows_merge;
}
// Is operand X a matrix that the batched product Y broadcasts over its
// batches (its gradient: the sum of the batches' products)?
template <class X, class Y>
inline constexpr bool matrix_over_batches = X::dims::rank == 2 && Y::dims::rank > 2;
}  // namespace detail

// y = op(A) op(B): d op(A) = g op(B)^T, d op(B) = op(A)^T g, transposed
// back where op is; every transpose is a flag of the product, not a copy.
// The gradient of a matrix the product broadcasts over batches is summed
// over them in the product itself (matmul_node's SumBatches), or, where the
// batches' rows merge, is one product over all of them.
template <std::size_t K, class A, class B, bool TA, bool TB, class G>
constexpr auto rule(matmul_node<A, B, TA, TB>, G g) {
  using Y = matmul_node<A, B, TA, TB>;
  if constexpr (K == 0) {
    constexpr bool sum = detail::matrix_over_batches<A, Y>;
    if constexpr (!TA) return detail::matmul_op<false, !TB, sum>(g, B{});
    else return detail::matmul_op<TB, true, sum>(B{}, g);
  } else if constexpr (!TA && !TB && detail::batched_times_matrix<A, B>()) {
    // One product over every row of every batch (K = batch * M), as the
    // batched product's sum over batches: no [batch, K, N] partial products.
    constexpr dim_t k = A::dims::dims[A::dims::rank - 1], n = B::dims::dims[1];
    return detail::matmul_op<true, false>(reshape<shape<dyn, k>>(A{}), reshape<shape<dyn, n>>(g));
  } else {
    constexpr bool sum = detail::matrix_over_batches<B, Y>;
    if constexpr (!TB) return detail::matmul_op<!TA, false, sum>(A{}, g);
    else return detail::matmul_op<true, TA, sum>(g, A{});
  }
}

template <std::size_t K, class X, class G>
constexpr auto rule(transpose_node<X>, G g) {
  return transpose(g);
}

// (A merge of dyn dims, [dyn, dyn, K] to [dyn, K], splits again at the
// sizes x had: a reshape that takes its run-time dims from x.)
template <std::size_t K, class S, class X, class Like, class G>
constexpr auto rule(reshape_node<S, X, Like>, G g) {
  if constexpr (detail::reshapable<typename G::dims, typename X::dims>()) return reshape<typename X::dims>(g);
  else return node_t<reshape_node<typename X::dims, node_t<G>, X>>{};
}

// Only the table gets a gradient (ids are i32 inputs): each row's gradient is
// added back at its id.
template <std::size_t K, class Table, class Ids, class G>
constexpr auto rule(gather_node<Table, Ids>, G) {
  static_assert(K == 0);
  static_assert(Table::dims::is_static, "ctg: the gradient of gather needs a table with static dims");
  return node_t<scatter_add_node<typename Table::dims, node_t<G>, Ids>>{};
}

// Fused attention (graph/attention.hpp): q, k and v get their gradients
// from one attention_grad node, given g and delta_i = sum_d g_id o_id (the
// output as stored), summed in the compute type. (lse is built without
// gradient: the output's rule is the whole gradient of q and k.)
template <std::size_t K, attention_layout L, class Q, class Kx, class V, class Lse, class G>
constexpr auto rule(attention_node<L, Q, Kx, V, Lse>, G g) {
  static_assert(K < 3);
  using C = typename Lse::dtype;
  constexpr int feature_axis = L == attention_layout::token_rows ? -1 : -2;
  const auto delta = sum<feature_axis>(cast<C>(g) * cast<C>(node_t<attention_node<L, Q, Kx, V, Lse>>{}));
  using grads = node_t<attention_grad_node<L, Q, Kx, V, Lse, node_t<G>, node_t<decltype(delta)>>>;
  return node_t<attention_grad_part_node<grads, K>>{};
}

// ------------------------------------------------------------------ fp8 ----

// quantize and dequantize pass the gradient straight through; autodiff casts
// it to the dtype the tensor was quantized from.
template <std::size_t K, class Fmt, class X, class S, bool Sharded, class G>
constexpr auto rule(quantize_node<Fmt, X, S, Sharded>, G g) {
  return g;
}
template <std::size_t K, class T, class Q, class G>
constexpr auto rule(dequantize_node<T, Q>, G g) {
  return g;
}
// y = op(A) op(B) with the gradient g quantized (gq) to the gradient format
// of GS's recipe (e5m2 under precision::hybrid):
//   d op(A) = gq op(B)^T,  d op(B) = op(A)^T gq,  and transposed back where op is.
// The gradient of a weight the product broadcasts over batches is summed
// over them in the product itself (fp8_matmul_node's SumBatches), as for matmul.
template <std::size_t K, class A, class B, bool TA, bool TB, class Out, class GS, bool S, class G>
constexpr auto rule(fp8_matmul_node<A, B, TA, TB, Out, GS, S>, G) {
  static_assert(!std::is_void_v<GS>, "ctg: this fp8_matmul has no gradient scaling (a backward product)");
  using Y = fp8_matmul_node<A, B, TA, TB, Out, GS, S>;
  using gq = node_t<quantize_node<typename GS::recipe::formats::gradient, node_t<G>, GS>>;
  if constexpr (K == 0) {
    constexpr bool sum = detail::matrix_over_batches<A, Y>;
    if constexpr (!TA) return node_t<fp8_matmul_node<gq, B, false, !TB, Out, void, sum>>{};
    else return node_t<fp8_matmul_node<B, gq, TB, true, Out, void, sum>>{};
  } else {
    constexpr bool sum = detail::matrix_over_batches<B, Y>;
    if constexpr (!TB) return node_t<fp8_matmul_node<A, gq, !TA, false, Out, void, sum>>{};
    else return node_t<fp8_matmul_node<gq, A, true, TA, Out, void, sum>>{};
  }
}

// ---------------------------------------------------------------- stack ----
// (graph/stack.hpp defines these nodes; the stack's own type needs autodiff.)
template <std::size_t N, class X, class Out, checkpointing Ckpt>
struct stack_node;
template <class Stack, class G>
struct stack_grad_node;
template <class Grad, std::size_t K>
struct stack_part_node;

// Part K of the stack's backward loop (graph/stack.hpp): the gradient of its
// input (K = 0) or of its K-th stacked leaf.
template <std::size_t K, std::size_t N, class X, class Out, checkpointing C, class G>
constexpr auto rule(stack_node<N, X, Out, C>, G) {
  return node_t<stack_part_node<node_t<stack_grad_node<node_t<stack_node<N, X, Out, C>>, node_t<G>>>, K>>{};
}

}  // namespace ctg
