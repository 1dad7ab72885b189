#pragma once
// The schedule: the graph's node types become one constexpr table of small
// descriptors, and consteval passes over that table decide which nodes get a
// buffer and how the rest fuse into loops. Nothing here recurses over types.
//
// A fusion group is one loop nest with one root (the node it writes):
//   * elementwise root: a chain of elementwise nodes, plus any row reductions
//     (last axis, kept) over the same rows, computed per row before the main
//     loop: softmax, log-softmax and norms are one group each;
//   * reduction root: an elementwise chain ending in one reduction;
//   * matmul, transpose, gather, scatter_add: alone, reading buffers.
// A view (reshape) is no group at all: it shares its child's buffer.
// A node is inlined into its consumers' group when all of them sit in one
// group and it can be evaluated in that group's iteration space; otherwise
// it gets a buffer and roots a group of its own.
#include <array>
#include <cstddef>

#include <ctg/graph/traits.hpp>

namespace ctg {

enum class group_kind { elementwise, reduction, matmul, transpose, gather, scatter_add, stack, fp8 };

// Nodes that read their children from buffers (they cannot be inlined into),
// and the ones among them that run as a group of their own.
constexpr bool reads_buffers(node_kind k) {
  return k == node_kind::matmul || k == node_kind::transpose || k == node_kind::view || k == node_kind::gather ||
         k == node_kind::scatter_add || k == node_kind::stack || k == node_kind::stack_grad ||
         k == node_kind::quantize || k == node_kind::dequantize || k == node_kind::fp8_matmul;
}
constexpr bool runs_alone(node_kind k) { return reads_buffers(k) && k != node_kind::view; }

// A stack node's children are its input and its block's leaves.
inline constexpr std::size_t max_children = 64;

struct node_desc {
  node_kind kind{};
  std::size_t nchild = 0;
  std::size_t child[max_children]{};
  bool row_reduction = false;
  bool index_aware = false;  // an elementwise op that reads its own position (one_hot, causal_mask)
  bool region_end = false;   // a checkpoint: always a buffer of its own, kept for backward
  bool output = false;       // an output of the step (or the forward part's root): a buffer to the end
  shape_value dims{};
  shape_value child_dims{};  // of child 0
};

inline constexpr std::size_t no_group = static_cast<std::size_t>(-1);

template <std::size_t N>
struct plan_table {
  node_desc node[N]{};
  bool materialized[N]{};
  std::size_t group[N]{};  // the root of the group a node is computed in (no_group: leaf, constant, scalar)
  std::size_t group_count = 0;

  constexpr bool same_dims(const shape_value& a, const shape_value& b) const {
    if (a.rank != b.rank) return false;
    for (std::size_t i = 0; i < a.rank; ++i)
      if (a.d[i] != b.d[i]) return false;
    return true;
  }
  // The shape a group's loop runs over.
  constexpr const shape_value& iteration_dims(std::size_t root) const {
    return node[root].kind == node_kind::reduce ? node[root].child_dims : node[root].dims;
  }
  constexpr bool is_group_root(std::size_t i) const { return group[i] == i; }
  constexpr group_kind kind_of_group(std::size_t root) const {
    switch (node[root].kind) {
      case node_kind::reduce: return group_kind::reduction;
      case node_kind::matmul:
      case node_kind::fp8_matmul: return group_kind::matmul;
      case node_kind::quantize:
      case node_kind::dequantize: return group_kind::fp8;
      case node_kind::transpose: return group_kind::transpose;
      case node_kind::gather: return group_kind::gather;
      case node_kind::scatter_add: return group_kind::scatter_add;
      case node_kind::stack:
      case node_kind::stack_grad: return group_kind::stack;
      default: return group_kind::elementwise;
    }
  }
};

namespace detail {
template <class Nodes, class N>
constexpr node_desc describe(bool output) {
  node_desc d;
  d.kind = N::kind;
  d.output = output;
  d.dims = value_of<typename N::dims>();
  static_assert(N::children::size <= max_children, "ctg: a stacked block may have at most 63 leaves (parameters and FP8 state)");
  if constexpr (N::kind != node_kind::runtime_scalar && N::kind != node_kind::random) {  // children give shapes only
    [&]<class... C>(tl::list<C...>) {
      ((d.child[d.nchild++] = tl::index_of_v<C, Nodes>), ...);
    }(typename N::children{});
  }
  if constexpr (N::children::size > 0) d.child_dims = value_of<typename tl::at_t<0, typename N::children>::dims>();
  if constexpr (N::kind == node_kind::reduce) d.row_reduction = N::row_reduction;
  if constexpr (N::kind == node_kind::elementwise) {
    d.index_aware = requires { N::op::index_aware; };
    d.region_end = requires { N::op::region_end; };
  }
  return d;
}

// A node that is inlined is re-evaluated at each of its uses in the group's
// loop body. Past this many operations, a node used more than once gets its
// own buffer instead: it keeps the loop bodies (and compile time) linear in
// the graph, where inlining a shared subexpression at every use would grow
// them exponentially with depth.
inline constexpr std::size_t max_shared_inline_ops = 8;

template <std::size_t N>
constexpr void decide_groups_once(plan_table<N>& p, bool fuse, const bool* forced, const std::size_t* use_first,
                                  const std::size_t* use_consumer) {
  p.group_count = 0;
  // Consumers come after their children in topological order, so walking
  // backwards every consumer's group is known when a node is decided.
  for (std::size_t ii = N; ii-- > 0;) {
    node_desc& d = p.node[ii];
    if (d.kind == node_kind::leaf || d.kind == node_kind::runtime_scalar || d.kind == node_kind::view ||
        d.kind == node_kind::random ||
        (d.kind == node_kind::constant && !d.output)) {
      p.materialized[ii] = d.kind != node_kind::constant;
      p.group[ii] = no_group;
      continue;
    }
    bool root = !fuse || d.output || d.region_end || runs_alone(d.kind) || forced[ii];
    std::size_t target = no_group;
    for (std::size_t u = use_first[ii]; u < use_first[ii + 1] && !root; ++u) {
      const std::size_t c = use_consumer[u];
      if (reads_buffers(p.node[c].kind)) root = true;
      else if (target == no_group) target = p.group[c];
      else if (target != p.group[c]) root = true;
    }
    if (!root && target != no_group) {
      const node_desc& t = p.node[target];
      if (d.kind == node_kind::elementwise) {
        root = !(t.kind == node_kind::elementwise || t.kind == node_kind::reduce || t.kind == node_kind::constant);
      } else if (d.kind == node_kind::reduce) {
        const bool row_group = t.kind == node_kind::elementwise || (t.kind == node_kind::reduce && t.row_reduction);
        root = !(d.row_reduction && row_group && p.same_dims(p.iteration_dims(target), d.child_dims));
      } else {
        root = true;
      }
    }
    if (target == no_group) root = true;  // nobody reads it in a loop (or an output)
    p.materialized[ii] = root;
    p.group[ii] = root ? ii : target;
    if (root) ++p.group_count;
  }
}

template <std::size_t N>
constexpr void decide_groups(plan_table<N>& p, bool fuse) {
  // Every node's consumers (one entry per use), in topological order.
  std::size_t* use_first = new std::size_t[N + 1]{};
  for (std::size_t c = 0; c < N; ++c)
    for (std::size_t k = 0; k < p.node[c].nchild; ++k) ++use_first[p.node[c].child[k] + 1];
  for (std::size_t i = 0; i < N; ++i) use_first[i + 1] += use_first[i];
  std::size_t* use_consumer = new std::size_t[use_first[N] + 1]{};
  std::size_t* fill = new std::size_t[N + 1]{};
  for (std::size_t c = 0; c < N; ++c)
    for (std::size_t k = 0; k < p.node[c].nchild; ++k) {
      const std::size_t i = p.node[c].child[k];
      use_consumer[use_first[i] + fill[i]++] = c;
    }
  bool* forced = new bool[N + 1]{};
  std::size_t* ops = new std::size_t[N + 1]{};  // size of a node's inlined expression
  for (bool changed = true; changed;) {
    decide_groups_once(p, fuse, forced, use_first, use_consumer);
    changed = false;
    for (std::size_t i = 0; i < N; ++i) {
      const node_desc& d = p.node[i];
      ops[i] = 1;
      if (p.materialized[i] || d.kind != node_kind::elementwise) continue;  // read as one load
      for (std::size_t k = 0; k < d.nchild; ++k) ops[i] += ops[d.child[k]];
      if (use_first[i + 1] - use_first[i] > 1 && ops[i] > max_shared_inline_ops) forced[i] = changed = true;
    }
    for (std::size_t i = 0; i < N; ++i)
      if (p.materialized[i] || p.node[i].kind != node_kind::elementwise) ops[i] = 1;
  }
  delete[] ops;
  delete[] forced;
  delete[] fill;
  delete[] use_consumer;
  delete[] use_first;
}
}  // namespace detail

// The schedule of a compiled step (see graph_step), computed once per step type.
template <class Step>
struct schedule {
  using nodes = typename Step::nodes;
  static constexpr std::size_t size = nodes::size;

  static constexpr plan_table<size> table = [] {
    plan_table<size> p;
    [&]<class... Ns>(tl::list<Ns...>) {
      std::size_t i = 0;
      ((p.node[i++] = detail::describe<nodes, Ns>(tl::contains_v<Ns, typename Step::outputs> ||
                                                   std::is_same_v<Ns, typename Step::forward_root>)),
       ...);
    }(nodes{});
    detail::decide_groups(p, Step::fuse);
    return p;
  }();

  static constexpr std::size_t group_count = table.group_count;

  // The kinds of the groups, in execution order.
  static constexpr auto group_kinds = [] {
    std::array<group_kind, group_count> kinds{};
    std::size_t g = 0;
    for (std::size_t i = 0; i < size; ++i)
      if (table.group[i] == i) kinds[g++] = table.kind_of_group(i);
    return kinds;
  }();
};

// Number of fusion groups (= kernels) of a step, and how many are of a kind.
template <class Step>
inline constexpr std::size_t group_count_v = schedule<Step>::group_count;

template <class Step>
consteval std::size_t count_groups(group_kind k) {
  std::size_t n = 0;
  for (group_kind g : schedule<Step>::group_kinds) n += g == k;
  return n;
}

}  // namespace ctg
