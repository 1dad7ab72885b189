#pragma once
// stack: N repetitions of one block, each layer with its own parameters, as
// ONE node whose type does not depend on N (DESIGN section 4.0).
//
// The block is written once, against a placeholder input (a `carry` leaf),
// with parameter names containing "{i}" ("layers.{i}.attn.wq"). In the
// model's graph each such leaf becomes one stacked leaf of the same name with
// a leading dim N: param<"layers.{i}.attn.wq", T, N, dims...>, so the model's
// params_t, the optimizer and save/load see one tensor per block parameter.
//
// Execution is a loop over layers. Forward runs the forward part of the
// block's graph N times, keeping each layer's input and (by default) the
// values the block's backward reads. Backward walks the layers in reverse,
// running the block's backward part for each, which gives the gradient of the
// layer input and of that layer's parameters. With
// checkpointing::every_layer each layer is a checkpoint region instead: only
// the layer inputs are kept, and backward first runs the layer's forward part
// again (the same groups on the same input: bitwise the same values).
#include <algorithm>
#include <cstddef>

#include <ctg/graph/autodiff.hpp>

namespace ctg {

namespace detail {
template <fixed_string Name>
consteval bool has_layer_index() {
  for (std::size_t i = 0; i + 3 <= Name.size(); ++i)
    if (Name.chars[i] == '{' && Name.chars[i + 1] == 'i' && Name.chars[i + 2] == '}') return true;
  return false;
}

template <std::size_t N, class L, class Dims = typename L::dims>
struct stacked_leaf;
template <std::size_t N, class L, dim_t... D>
struct stacked_leaf<N, L, shape<D...>> {
  using type = typename L::template with_dims<static_cast<dim_t>(N), D...>;
};

// The leaf Name of dtype T, role Role and dims Dims. (The name is not a
// parameter of the partial specialization: nvcc 13's front end matches no
// partial specialization with a class-type parameter deduced from a literal.)
template <class T, leaf_role Role, class Dims>
struct leaf_with_dims;
template <class T, leaf_role Role, dim_t... D>
struct leaf_with_dims<T, Role, shape<D...>> {
  template <fixed_string Name>
  using type = leaf_node<Name, T, Role, D...>;
};

template <class Carry, class... Ls>
using without_t = tl::concat_t<std::conditional_t<CTG_SAME(Carry, Ls), tl::list<>, tl::list<Ls>>...>;

template <class Carry, class List>
struct block_leaves;
template <class Carry, class... Ls>
struct block_leaves<Carry, tl::list<Ls...>> {
  using type = without_t<Carry, Ls...>;
};

template <class Known, class List>
struct backward_only_state;
template <class Known, class... Ls>
struct backward_only_state<Known, tl::list<Ls...>> {
  using type = tl::concat_t<std::conditional_t<Ls::role == leaf_role::state && !tl::contains<Ls, Known>::value,
                                               tl::list<Ls>, tl::list<>>...>;
};

// Is L a leaf a stacked block may read: its own (a name with {i}), not
// fed, and (a parameter) reaching its output with a gradient? The first
// mistake reported, alone.
template <class Out, class L>
consteval bool block_leaf_ok() {
  if constexpr (L::fed) return false;
  else if constexpr (!has_layer_index<L::name>()) return false;
  else if constexpr (L::role == leaf_role::param) return has_grad_path_v<Out, L>;  // (a path search: parameters only)
  else return true;
}
template <class Out, class L>
consteval void report_block_leaf() {
  if constexpr (L::fed)
    static_assert(!L::fed, "ctg: a stacked block reads only its input and its own parameters (no inputs)");
  else if constexpr (!has_layer_index<L::name>())
    static_assert(has_layer_index<L::name>(),
                  "ctg: a stacked block's parameter names must contain {i} (e.g. \"layers.{i}.w\")");
  else
    static_assert(has_grad_path_v<Out, L>,
                  "ctg: no gradient path from the stacked block's output to one of its parameters");
}

template <class... Ls>
using trainable_t = tl::concat_t<std::conditional_t<Ls::role == leaf_role::param, tl::list<Ls>, tl::list<>>...>;
template <class List>
struct trainable_of;
template <class... Ls>
struct trainable_of<tl::list<Ls...>> {
  using type = trainable_t<Ls...>;
};
}  // namespace detail

// The carry (the block's input placeholder) of a stack over X.
template <class X>
using stack_carry_t =
    typename detail::leaf_with_dims<typename X::dtype, leaf_role::carry, typename X::dims>::template type<"ctg.stack.input">;


namespace detail {
// Does a stack among these nodes keep state in its layers (an FP8 delayed
// scaling state)? Such a stack inside another's block would run, but only
// a top-level stack's states are updated after a step: the inner one's
// amaxes were never folded, its scales stayed 1.
template <class... Ns>
consteval bool inner_stack_holds_state(tl::list<Ns...>) {
  return ([]<class Node>(std::type_identity<Node>) {
    if constexpr (Node::kind == node_kind::stack)
      return []<class... Ls>(tl::list<Ls...>) { return ((Ls::role == leaf_role::state) || ...); }(typename Node::leaves{});
    else
      return false;
  }(std::type_identity<Ns>{}) || ...);
}

// The checks of N layers of a block over X returning Out, in order, the
// first mistake reported alone: nn::stack makes no stack node when one
// fails (the stack's block graphs, built on a bad block, added a cascade of
// internal errors).
template <std::size_t N, class X, class Out, checkpointing Ckpt>
consteval bool check_block() {
  using carry = stack_carry_t<X>;
  using nodes = topo_t<tl::list<Out>>;
  using own = typename block_leaves<carry, leaves_t<nodes>>::type;
  constexpr std::size_t bad_leaf = []<class... Ls>(tl::list<Ls...>) {
    std::size_t i = 0, first = sizeof...(Ls);
    ((first = first == sizeof...(Ls) && !block_leaf_ok<Out, Ls>() ? i : first, ++i), ...);
    return first;
  }(own{});
  if constexpr (holds_failed(nodes{})) {
    return false;  // (an op of the block reported it)
  } else if constexpr (N < 1) {
    static_assert(N >= 1, "ctg: stack needs at least one layer");
    return false;
  } else if constexpr (!std::is_same_v<typename Out::dims, typename X::dims> ||
                       !std::is_same_v<typename Out::dtype, typename X::dtype>) {
    static_assert(std::is_same_v<typename Out::dims, typename X::dims> &&
                      std::is_same_v<typename Out::dtype, typename X::dtype>,
                  "ctg: shape mismatch: a stacked block must return its input's shape and dtype");
    return false;
  } else if constexpr (bad_leaf < own::size) {
    report_block_leaf<Out, tl::at_t<bad_leaf, own>>();
    return false;
  } else if constexpr (!leaf_names_unique_v<nodes>) {
    return !check_leaf_names<nodes>();  // (reports the clash)
  } else if constexpr (!has_grad_path_v<Out, carry>) {
    static_assert(has_grad_path_v<Out, carry>,
                  "ctg: a stacked block's output must depend on its input with a gradient (this block ignores "
                  "its input, or reads it only through no_grad): the layers below would get none; unroll them "
                  "(nn::unrolled) or drop the no_grad");
    return false;
  } else if constexpr (inner_stack_holds_state(nodes{})) {
    static_assert(!inner_stack_holds_state(nodes{}),
                  "ctg: a stack inside a stacked block cannot hold FP8 delayed scaling states (its layers' scales "
                  "would never update): unroll one of the two stacks (nn::unrolled), or use current scaling in the "
                  "inner one");
    return false;
  } else if constexpr (Ckpt == checkpointing::every_layer && !replayable_below_v<Out>) {
    static_assert(replayable_below_v<Out>,
                  "ctg: not replayable inside checkpoint: a node of this stacked block changes state as it runs "
                  "(its state_replay is ctg::replay::none); use checkpointing::none");
    return false;
  } else {
    return true;
  }
}
}  // namespace detail

// N layers of one block (nn::stack, which checks the block first:
// detail::check_block).
template <std::size_t N, class X, class Out, checkpointing Ckpt = checkpointing::every_layer>
struct stack_node {
  using carry = stack_carry_t<X>;
  using block_out = Out;
  using forward_leaves = typename detail::block_leaves<carry, leaves_t<topo_t<tl::list<Out>>>>::type;
  using trainable = typename detail::trainable_of<forward_leaves>::type;

  using ctg_node = void;
  using dtype = typename X::dtype;
  using dims = typename X::dims;
  static constexpr node_kind kind = node_kind::stack;
  static constexpr std::size_t layers = N;
  static constexpr bool recompute = Ckpt == checkpointing::every_layer;

  // The block's graphs, each compiled once whatever N is: forward, and
  // forward + backward of sum(out * g) (the vector-Jacobian product for an
  // upstream gradient g) with respect to the carry and the trainable leaves,
  // whose forward part is the block's output and what it reads. The sum
  // itself is not computed (graph_step::root_is_output): its gradients are
  // what the runner reads.
  using upstream = typename detail::leaf_with_dims<typename Out::dtype, leaf_role::input,
                                                   typename Out::dims>::template type<"ctg.stack.upstream">;
  using forward_step = graph_step<Out, tl::list<>>;
  using vjp_loss = decltype(sum(cast<compute_t<dtype>>(Out{}) * cast<compute_t<dtype>>(upstream{})));
  using backward_step = decltype([]<class... Ps>(tl::list<Ps...>) {
    return graph_step<vjp_loss, tl::list<carry, Ps...>, true, Out>{};
  }(trainable{}));
  // The block's own leaves, stored per layer: the forward's, then state only
  // the backward reads (an FP8 gradient quantizer's scale and history).
  using leaves = tl::concat_t<forward_leaves, typename detail::backward_only_state<
                                                  forward_leaves, leaves_t<typename backward_step::nodes>>::type>;
  using children = decltype([]<class... Ls>(tl::list<Ls...>) {
    return tl::list<X, typename detail::stacked_leaf<N, Ls>::type...>{};
  }(leaves{}));
  static constexpr bool requires_grad = detail::any_rg<children>::value;

  // In the buffer of the stack's backward (stack_grad_node): where the
  // gradient of the k-th block leaf starts (trainable ones only, each N
  // layers, 64-byte aligned); past the last: where the input's gradient starts.
  static constexpr std::size_t grad_offset(std::size_t k) {
    return []<class... Ls>(tl::list<Ls...>, std::size_t before) {
      std::size_t i = 0, off = 0;
      ((off += i++ < before && Ls::role == leaf_role::param
                   ? (sizeof(typename Ls::dtype) * N * Ls::dims::static_numel + 63) / 64 * 64
                   : 0),
       ...);
      return off;
    }(leaves{}, k);
  }
};

namespace detail {
// How many stacks stacked leaf Name of a graph: 0 outside stacks, 1 in a
// stack's block, 2 in a stack inside a stacked block. A leaf's dims in each
// layer are its dims less that many leading ones (per_layer_rank).
template <class... Ls>
consteval bool has_leaf_named(tl::list<Ls...>, const char* name) {
  return (same_chars(Ls::name.c_str(), name) || ...);
}
template <class Nodes>
struct stack_levels_in;
template <class N>
consteval std::size_t stack_levels_at(const char* name) {
  if constexpr (N::kind == node_kind::stack)
    if (has_leaf_named(typename N::leaves{}, name)) return 1 + stack_levels_in<typename N::forward_step::nodes>::of(name);
  return 0;
}
template <class... Ns>
struct stack_levels_in<tl::list<Ns...>> {
  static consteval std::size_t of(const char* name) {
    std::size_t levels = 0;
    ((levels = std::max(levels, stack_levels_at<Ns>(name))), ...);
    return levels;
  }
};
}  // namespace detail

// The rank of leaf L of the graph of Nodes in one layer: its rank less the
// leading layer dims of the stacks that stacked it ("layers.{i}.ln.scale",
// [12, 768] in a stack of 12, has per-layer rank 1).
template <class Nodes, class L>
inline constexpr std::size_t per_layer_rank = L::dims::rank - detail::stack_levels_in<Nodes>::of(L::name.c_str());

// The backward of a stack for upstream gradient G: one loop over the layers
// filling one buffer: each trainable stacked leaf's gradient (at static
// offsets, Stack::grad_offset), then the gradient of the stack's input X.
template <class Stack, class G>
struct stack_grad_node {
  using stack = Stack;
  using ctg_node = void;
  using dtype = typename Stack::dtype;
  using dims = typename Stack::dims;
  using children = tl::list<Stack, G>;
  static constexpr node_kind kind = node_kind::stack_grad;
  static constexpr bool requires_grad = false;
  static constexpr std::size_t leading_bytes = Stack::grad_offset(Stack::leaves::size);
};

// Part K of a stack's gradient: K = 0 the gradient of X, K > 0 that of the
// stack's K-th child (a stacked leaf). A view into the stack_grad_node's buffer.
template <class Grad, std::size_t K>
struct stack_part_node {
  using child_type = tl::at_t<K, typename Grad::stack::children>;
  using ctg_node = void;
  using dtype = typename child_type::dtype;
  using dims = typename child_type::dims;
  using children = tl::list<Grad>;
  static constexpr node_kind kind = node_kind::view;
  static constexpr bool requires_grad = false;
  static constexpr std::size_t part = K;
  static constexpr std::size_t byte_offset = K == 0 ? Grad::leading_bytes : Grad::stack::grad_offset(K - 1);
};

}  // namespace ctg
