#pragma once
// Graph nodes. Every node is an empty class template whose type names its
// children; two nodes of the same type are the same node. Each node exposes:
//   dtype          element type of its value
//   dims           a ctg::shape<...> (static part of the shape)
//   children       tl::list of child node types
//   kind           what executes it (see node_kind)
//   requires_grad  whether a gradient flows into it
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <ctg/core/fixed_string.hpp>
#include <ctg/core/hash.hpp>
#include <ctg/core/shape.hpp>
#include <ctg/core/type_list.hpp>
#include <ctg/core/dtype_rules.hpp>
#include <ctg/graph/functors.hpp>

namespace ctg {

enum class node_kind {
  leaf,            // param / frozen / input: a buffer owned by the store or fed
  constant,        // a literal, inlined into every loop that reads it
  runtime_scalar,  // a scalar known at run time (1/count for mean, the loss seed)
  random,          // a counter-based random value per element, inlined into every loop that reads it
  elementwise,     // one value per output element from the children's values there
  reduce,          // sum / mean / max over some axes
  matmul,          // (batched) matrix product
  transpose,       // swap of the last two dims
  view,            // the child's elements under another shape (shares its buffer)
  gather,          // rows of a table picked by an index tensor (embedding)
  scatter_add,     // the adjoint of gather: rows added into a zeroed table
  stack,           // N layers of one block, run as a loop (ctg::nn::stack)
  stack_grad,      // a stack's backward: the reverse loop over its layers
  quantize,        // an fp8 payload and its per-tensor scale (graph/fp8.hpp)
  dequantize,      // an fp8 payload times its scale_inv
  fp8_matmul,      // a matmul of fp8 payloads, f32 accumulation, scaled once
  attention,       // fused causal attention: lse, output or gradients (graph/attention.hpp)
  failed,          // what an op returned after reporting a mistake (failed_node): never lowered
};

// carry: internal to ctg::nn::stack: the block's input, fed per layer, with a gradient.
// state: stored like a parameter, never trained: written only after a
// successful step (FP8 scales and amax histories).
enum class leaf_role { param, frozen, input, carry, state };

// How a node that reads state behaves under recompute (checkpoint regions,
// nn::stack with checkpointing): `exact` when a recompute reads exactly
// the state the forward read and writes none (state changes once per step,
// after backward); `none` when it cannot be replayed (it changes state as it
// runs). A node declares it as `static constexpr ctg::replay state_replay`.
enum class replay { exact, none };

// What a ctg::nn::stack keeps for backward: only the layer inputs, recomputing
// the rest one layer at a time (activation checkpointing around every block,
// the default), or every layer's values (none). attention_scores keeps every
// layer's values as none does, but a ctg::nn::transformer's attention then
// keeps nothing of its scores' size ([..., H, T, T]: the scores, the
// probabilities and their cast): backward computes them again from the kept
// q and k, one product and one softmax loop a layer (selective activation
// recomputation). All give the same bits.
enum class checkpointing { none, every_layer, attention_scores };

template <class N>
concept expr = requires {
  typename N::ctg_node;
  typename N::dtype;
  typename N::dims;
  typename N::children;
};

template <class N>
using dtype_t = typename N::dtype;
template <class N>
using shape_t = typename N::dims;
template <class N>
inline constexpr bool requires_grad_v = N::requires_grad;

// The dtype a node's gradient flows in: its own, except for fp8 payloads,
// whose gradient flows in the dtype they were quantized from.
template <class N>
consteval auto grad_dtype_of() {
  if constexpr (requires { typename N::grad_dtype; }) return std::type_identity<typename N::grad_dtype>{};
  else return std::type_identity<typename N::dtype>{};
}
template <class N>
using grad_dtype_t = typename decltype(grad_dtype_of<N>())::type;

namespace detail {
template <class... Cs>
inline constexpr bool any_requires_grad = (Cs::requires_grad || ...);
template <class List>
struct any_rg;
template <class... Cs>
struct any_rg<tl::list<Cs...>> : std::bool_constant<any_requires_grad<Cs...>> {};
}  // namespace detail

// -------------------------------------------------------------- vertices ----
//
// A node's type names its children. Were the children the node types
// themselves, a node's name would spell its whole subtree: a DAG spelled as
// a tree, exponential in the depth of residual connections. A compiler
// prints that name for every entity instantiated on the node (debug
// information, diagnostics) and mangles it into every symbol: a transformer's
// forward alone took g++ -g past 10 GB, and mangling, whose cost grows with
// the square of what a name spells, took half of the FP8 model's compile time.
// So the graph's vertices are:
//   - childless nodes (leaves, constants, literals), as they are;
//   - every other node as node_ref<A, B>: a class derived from the node's
//     definition (so it has all its members), named by a 128-bit hash of the
//     definition's own printed name, in which the children are node_refs too.
//     A vertex's name has constant size, whatever lies below it.
// node_t<N> is N's vertex (node_t of a vertex is itself): equal definitions
// give one vertex, so equal expressions are still one node. Every op returns
// a vertex and takes any expression.
//
// The hash is mapped back to the definition through a friend function that
// node_t defines when it first meets the definition (detail::define_node),
// found by argument-dependent lookup on the hash's tag. Two definitions with
// one hash in a translation unit would define that function twice: a compile
// error, never a silent merge (and, at 128 bits, not a practical event).
namespace detail {
struct name_hash128 {
  std::uint64_t a = 0, b = 0;
};
// T's name as this compiler prints it (in __PRETTY_FUNCTION__), hashed
// forwards and backwards with FNV-1a.
template <class T>
consteval name_hash128 hash_of_printed_name() {
  constexpr std::size_t n = sizeof(__PRETTY_FUNCTION__) - 1;
  name_hash128 h{fnv1a64(__PRETTY_FUNCTION__, n), fnv1a64_basis};
  for (std::size_t i = n; i-- > 0;) {
    h.b ^= static_cast<unsigned char>(__PRETTY_FUNCTION__[i]);
    h.b *= 0x00000100000001B3ull;
  }
  return h;
}

#if defined(__NVCC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1301  // (the same warning, nvcc's number)
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"  // (defined by define_node below)
#endif
template <std::uint64_t A, std::uint64_t B>
struct node_tag {
  friend constexpr auto definition_of(node_tag);
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#if defined(__NVCC__)
#pragma nv_diagnostic pop
#endif
template <class Def, std::uint64_t A, std::uint64_t B>
struct define_node {
  friend constexpr auto definition_of(node_tag<A, B>) { return std::type_identity<Def>{}; }
};
}  // namespace detail

template <std::uint64_t A, std::uint64_t B>
struct node_ref : decltype(definition_of(detail::node_tag<A, B>{}))::type {};

namespace detail {
template <class N>
inline constexpr bool is_vertex = N::children::size == 0;
template <std::uint64_t A, std::uint64_t B>
inline constexpr bool is_vertex<node_ref<A, B>> = true;
template <class... Cs>
consteval bool all_vertices(tl::list<Cs...>) {
  return (is_vertex<Cs> && ...);
}
template <class N, bool = is_vertex<N>>
struct vertex_of {
  using type = N;
};
template <class N>
struct vertex_of<N, false> {
  static_assert(all_vertices(typename N::children{}),
                "ctg: internal: a node's children must be graph vertices (build them with node_t<...>)");
  static constexpr name_hash128 key = hash_of_printed_name<N>();
  static_assert(sizeof(define_node<N, key.a, key.b>) > 0);  // (defines definition_of for the key)
  using type = node_ref<key.a, key.b>;
};
}  // namespace detail

template <class N>
using node_t = typename detail::vertex_of<N>::type;

// ---------------------------------------------------------------- leaves ----

template <fixed_string Name, class T, leaf_role Role, dim_t... Dims>
struct leaf_node {
  // Inputs (and stack carries) are fed each step; params and frozen leaves are stored.
  static constexpr bool fed = Role == leaf_role::input || Role == leaf_role::carry;
  static_assert(element_type<T> || (index_type<T> && Role == leaf_role::input),
                "ctg: a leaf's element type must be f32, f64, bf16, f16, e4m3 or e5m2 (i32 only for inputs)");
  static_assert(fed || shape<Dims...>::is_static,
                "ctg: parameters need static dims (only inputs may use ctg::dyn)");
  using ctg_node = void;
  using dtype = T;
  using dims = shape<Dims...>;
  using children = tl::list<>;
  static constexpr node_kind kind = node_kind::leaf;
  static constexpr leaf_role role = Role;
  static constexpr fixed_string name = Name;
  static constexpr bool requires_grad = Role == leaf_role::param || Role == leaf_role::carry;
  // The same leaf with other dims (a stacked copy has a leading layer dim).
  template <dim_t... D>
  using with_dims = leaf_node<Name, T, Role, D...>;
};

// A state leaf (FP8 scales, amax histories): stored like a parameter, never
// trained, starting at Initial in every element (the store sets it).
template <fixed_string Name, class T, double Initial, dim_t... Dims>
struct state_leaf : leaf_node<Name, T, leaf_role::state, Dims...> {
  static constexpr double initial_value = Initial;
  template <dim_t... D>
  using with_dims = state_leaf<Name, T, Initial, D...>;
};

// A trainable parameter, a frozen one (never gets a gradient), and a fed input.
template <fixed_string Name, class T, dim_t... Dims>
using param = leaf_node<Name, T, leaf_role::param, Dims...>;
template <fixed_string Name, class T, dim_t... Dims>
using frozen = leaf_node<Name, T, leaf_role::frozen, Dims...>;
template <fixed_string Name, class T, dim_t... Dims>
using input = leaf_node<Name, T, leaf_role::input, Dims...>;

template <class N>
inline constexpr bool is_leaf_v = N::kind == node_kind::leaf;

// ------------------------------------------------------------- constants ----

template <double V, class T>
struct constant_node {
  using ctg_node = void;
  using dtype = T;
  using dims = shape<>;
  using children = tl::list<>;
  static constexpr node_kind kind = node_kind::constant;
  static constexpr bool requires_grad = false;
  static constexpr double value = V;
};

// A literal: `x * ctg::lit<2.0>` takes x's dtype (`lit<2>` is lit<2.0>).
template <double V>
struct literal {};
template <auto V>
  requires std::is_arithmetic_v<decltype(V)>
inline constexpr literal<static_cast<double>(V)> lit{};

// 1 / (numel(Big) / numel(Small)): the scale of a mean, known once shapes are.
template <class Big, class Small, class T>
struct recip_count_node {
  using ctg_node = void;
  using dtype = T;
  using dims = shape<>;
  using children = tl::list<Big, Small>;
  static constexpr node_kind kind = node_kind::runtime_scalar;
  static constexpr bool requires_grad = false;
};

// Where backward starts: the gradient of the loss with respect to itself, 1,
// or 1/k while a store accumulates k micro-batches (exec/micro_batch_set.hpp).
// The store writes it before each run.
template <class T>
struct loss_seed_node {
  using ctg_node = void;
  using dtype = T;
  using dims = shape<>;
  using children = tl::list<>;
  static constexpr node_kind kind = node_kind::runtime_scalar;
  static constexpr bool requires_grad = false;
};

// ---------------------------------------------------------------- random ----

// Dropout's mask, shape of Like: 1/(1-P) where element i is kept, 0 where it
// is dropped (probability P). Element i of step s is decided by
// philox_uniform(seed, s, stream, i) >= P, the stream being the hash of Name
// and the layer. No buffer: every loop that reads it computes it again, so a
// recompute sees exactly the forward's mask. Like gives the shape only; T
// is the type the mask multiplies in (f32, or f64 for f64 values).
template <fixed_string Name, double P, class Like, class T = f32>
struct dropout_mask_node {
  static_assert(P >= 0.0 && P < 1.0, "ctg: dropout probability must be in [0, 1)");
  using ctg_node = void;
  using dtype = T;
  using dims = typename Like::dims;
  using children = tl::list<Like>;
  static constexpr node_kind kind = node_kind::random;
  static constexpr bool requires_grad = false;
  static constexpr fixed_string name = Name;
  static constexpr std::uint32_t stream = name_hash(Name.chars, Name.size());
  static constexpr double probability = P;
  CTG_HD static CTG_FORCEINLINE T value(const random_key& k, std::uint64_t index) {
    return dropout_value<P, T>(k, stream, index);
  }
};

// ----------------------------------------------------------- elementwise ----


namespace detail {
template <class Op, class... Xs>
consteval auto ew_dtype() {
  if constexpr (requires { typename Op::result_dtype; }) return std::type_identity<typename Op::result_dtype>{};
  else if constexpr (sizeof...(Xs) == 1) return std::type_identity<typename Xs::dtype...>{};
  else return std::type_identity<promote_t<typename tl::at_t<0, tl::list<Xs...>>::dtype,
                                           typename tl::at_t<1, tl::list<Xs...>>::dtype>>{};
}
template <class Op, class... Xs>
consteval auto ew_shape() {
  if constexpr (requires { typename Op::result_shape; }) return std::type_identity<typename Op::result_shape>{};
  else if constexpr (sizeof...(Xs) == 1) return std::type_identity<typename Xs::dims...>{};
  else return std::type_identity<broadcast_t<typename tl::at_t<0, tl::list<Xs...>>::dims,
                                             typename tl::at_t<1, tl::list<Xs...>>::dims>>{};
}
}  // namespace detail

template <class Op, class... Xs>
struct elementwise_node {
  using ctg_node = void;
  using dtype = typename decltype(detail::ew_dtype<Op, Xs...>())::type;
  static_assert(!index_type<dtype>,
                "ctg: i32 index tensors do not enter arithmetic (use gather, one_hot or cross_entropy)");
  using dims = typename decltype(detail::ew_shape<Op, Xs...>())::type;
  using children = tl::list<Xs...>;
  using op = Op;
  static constexpr node_kind kind = node_kind::elementwise;
  static constexpr bool requires_grad = Op::gradient != grad::none && detail::any_requires_grad<Xs...>;
};

// ------------------------------------------------------------ reductions ----


// Reduce X to shape Out, which X stretches from: every dim where Out has 1 (or
// nothing) and X does not is reduced. Axis reductions keep the axis as 1.
template <class Op, class Out, class X>
struct reduce_node {
  static_assert(stretches_to<Out, typename X::dims>(), "ctg: shape mismatch: reduction target does not fit");
  static_assert(!index_type<typename X::dtype>, "ctg: i32 index tensors cannot be reduced");
  using ctg_node = void;
  using dtype = typename X::dtype;
  using dims = Out;
  using children = tl::list<X>;
  using op = Op;
  static constexpr node_kind kind = node_kind::reduce;
  // A max passes gradient to the arg-max elements; sum and mean to all.
  static constexpr bool requires_grad = X::requires_grad;
  // Reduces exactly the last axis, keeping it: fusable into a row loop.
  static constexpr bool row_reduction = [] {
    using XS = typename X::dims;
    if constexpr (XS::rank == 0 || Out::rank != XS::rank) return false;
    else {
      for (std::size_t i = 0; i + 1 < XS::rank; ++i)
        if (Out::dims[i] != XS::dims[i]) return false;
      return Out::dims[XS::rank - 1] == 1 && XS::dims[XS::rank - 1] != 1;
    }
  }();
};

// ---------------------------------------------------------------- matmul ----

namespace detail {
consteval shape_value matmul_shape_of(shape_value a, shape_value b) {
  shape_value r;
  if (a.rank < 2 || b.rank < 2) {
    r.ok = false;
    return r;
  } else {
    shape_value ba = a, bb = b;  // batch dims
    ba.rank -= 2;
    bb.rank -= 2;
    r = broadcast_value(ba, bb);
    const dim_t ka = a.d[a.rank - 1], kb = b.d[b.rank - 2];
    if (ka != kb && ka != dyn && kb != dyn) r.ok = false;
    r.d[r.rank++] = a.d[a.rank - 2];
    r.d[r.rank++] = b.d[b.rank - 1];
    return r;
  }
}
consteval shape_value swap_last_two(shape_value v) {
  const dim_t t = v.d[v.rank - 1];
  v.d[v.rank - 1] = v.d[v.rank - 2];
  v.d[v.rank - 2] = t;
  return v;
}
// The shape of op(A) op(B), op = transpose where TA / TB (summed over its
// batches: the last two dims).
template <class A, class B, bool TA = false, bool TB = false, bool SumBatches = false>
consteval shape_value matmul_shape() {
  shape_value a = value_of<typename A::dims>(), b = value_of<typename B::dims>();
  if (TA && a.rank >= 2) a = swap_last_two(a);
  if (TB && b.rank >= 2) b = swap_last_two(b);
  shape_value r = matmul_shape_of(a, b);
  if (SumBatches && r.ok && r.rank > 2) {
    r.d[0] = r.d[r.rank - 2];
    r.d[1] = r.d[r.rank - 1];
    r.rank = 2;
  }
  return r;
}
}  // namespace detail

// op(A) op(B), op = transpose where TA / TB: the product reads a transposed
// operand where it lies (ctg::matmul folds transpose(x) into these flags), so
// no transposed copy is ever made. SumBatches: the sum of the batches'
// products, [M, N], each output one chain over the batches' k in f32 (f64
// for f64): the gradient of a matrix a batched product broadcasts (w @ x^T
// over a batch), with no [batch, M, N] of partial products rounded to the
// operands' dtype and then summed (autodiff makes it: graph/rules.hpp).
template <class A, class B, bool TA = false, bool TB = false, bool SumBatches = false>
struct matmul_node {
  using ctg_node = void;
  using dtype = std::conditional_t<SumBatches, compute_t<promote_t<typename A::dtype, typename B::dtype>>,
                                   promote_t<typename A::dtype, typename B::dtype>>;
  using dims = shape_from<detail::matmul_shape<A, B, TA, TB, SumBatches>()>;
  using children = tl::list<A, B>;
  static constexpr node_kind kind = node_kind::matmul;
  static constexpr bool requires_grad = A::requires_grad || B::requires_grad;
  static constexpr bool transpose_a = TA, transpose_b = TB, sum_batches = SumBatches;
};

namespace detail {
template <class S>
consteval shape_value transposed_shape() {
  return swap_last_two(value_of<S>());
}
}  // namespace detail

template <class X>
struct transpose_node {
  using ctg_node = void;
  using dtype = typename X::dtype;
  using dims = shape_from<detail::transposed_shape<typename X::dims>()>;
  using children = tl::list<X>;
  static constexpr node_kind kind = node_kind::transpose;
  static constexpr bool requires_grad = X::requires_grad;
};

// ------------------------------------------------------------------ views ----

// X's elements under shape S (same count, same order): unsqueeze, squeeze,
// reshape. It shares X's buffer, so X is materialized. S has as many ctg::dyn
// dims as X, the k-th dyn dim of S taking the run-time size of X's k-th; or
// one, the product of X's. With a Like (S its dims), the run-time dims are
// Like's: the gradient of a reshape that merged dyn dims splits them again.
template <class S, class X, class Like = void>
struct reshape_node {
  using ctg_node = void;
  using dtype = typename X::dtype;
  using dims = S;
  using children = tl::list<X>;
  using like = Like;
  static constexpr node_kind kind = node_kind::view;
  static constexpr bool requires_grad = X::requires_grad;
};

// ---------------------------------------------------------------- gather ----

namespace detail {
// Ids' dims followed by the table's dims after the first (the row).
template <class Table, class Ids>
consteval shape_value gather_shape() {
  constexpr shape_value t = value_of<typename Table::dims>(), ids = value_of<typename Ids::dims>();
  shape_value r = ids;
  for (std::size_t i = 1; i < t.rank; ++i) r.d[r.rank++] = t.d[i];
  return r;
}
}  // namespace detail

// out[i..., :] = table[ids[i...], :]. Index values outside [0, rows) are a run-time ctg::error.
template <class Table, class Ids>
struct gather_node {
  static_assert(index_type<typename Ids::dtype>, "ctg: gather indices must be an i32 tensor");
  static_assert(Table::dims::rank >= 1 && Ids::dims::rank + Table::dims::rank - 1 <= max_rank,
                "ctg: gather result would have more than 6 dims");
  using ctg_node = void;
  using dtype = typename Table::dtype;
  using dims = shape_from<detail::gather_shape<Table, Ids>()>;
  using children = tl::list<Table, Ids>;
  static constexpr node_kind kind = node_kind::gather;
  static constexpr bool requires_grad = Table::requires_grad;
};

// The adjoint of gather: a zero table of shape S with each row of G added at
// row ids[i...]. Repeated ids add up. Accumulates in the compute type.
template <class S, class G, class Ids>
struct scatter_add_node {
  using ctg_node = void;
  using dtype = compute_t<typename G::dtype>;
  using dims = S;
  using children = tl::list<G, Ids>;
  static constexpr node_kind kind = node_kind::scatter_add;
  static constexpr bool requires_grad = G::requires_grad;
};

// --------------------------------------------------------------- failed ----

// What an op returns after its static_assert has reported a mistake: a node of
// the shape and dtype the op meant to give, over the same children (so
// params_t still sees every leaf). The user's next lines then add no errors of
// their own, and value_and_grad / forward turn a graph holding one into
// invalid_step without a word (graph/step.hpp).
template <class Dims, class T, class... Xs>
struct failed_node {
  using ctg_node = void;
  using dtype = T;
  using dims = Dims;
  using children = tl::list<Xs...>;
  static constexpr node_kind kind = node_kind::failed;
  static constexpr bool requires_grad = detail::any_requires_grad<Xs...>;
};

}  // namespace ctg
