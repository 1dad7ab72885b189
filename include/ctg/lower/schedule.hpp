#pragma once
// The schedule: consteval passes over the node table (node_table.hpp) decide
// which nodes get a buffer and how the rest fuse into loops. Nothing here
// recurses over types.
//
// A fusion group is one loop nest with one root (the node it writes):
//   * elementwise root: a chain of elementwise nodes, plus any row reductions
//     (last axis, kept) over the same rows, computed per row before the main
//     loop: softmax, log-softmax and norms are one group each;
//   * reduction root: an elementwise chain ending in one reduction;
//   * matmul, transpose, gather, scatter_add, quantize, stacks: alone, reading buffers.
// A view (reshape) is no group at all: it shares its child's buffer.
// A node is inlined into its consumers' group when all of them sit in one
// group and it can be evaluated in that group's iteration space; an
// elementwise node whose consumers sit in several such groups is computed in
// each of them where that is cheap (a duplicated node: no group, no buffer);
// otherwise it gets a buffer and roots a group of its own. An elementwise
// group may write one more buffer, its side output: a cast of its root that
// other groups read (choose_side_outputs).
#include <array>
#include <cstddef>

#include <ctg/graph/step.hpp>
#include <ctg/lower/node_table.hpp>

namespace ctg {

namespace detail {

// A node that is inlined is re-evaluated at each of its uses in the group's
// loop body. Past this many operations, a node used more than once gets its
// own buffer instead: it keeps the loop bodies (and compile time) linear in
// the graph, where inlining a shared subexpression at every use would grow
// them exponentially with depth.
inline constexpr std::size_t max_shared_inline_ops = 16;

// A cheap elementwise node (a_few_adds: casts, adds, multiplies,
// comparisons) read by loops of several groups is computed again inside each
// of them, with no buffer: writing it and reading it back costs more memory
// traffic than the few operations (an f32 cast of a bf16 tensor that forward
// and backward both read is 6 bytes an element stored, 2 recomputed). Its
// expression is bounded as a shared inlined one is (max_shared_inline_ops
// nodes, the duplicated nodes below it and the loads at its leaves
// included), and it reads at most this many buffers; past either, a buffer.
inline constexpr std::size_t max_duplicated_loads = 3;

template <class Table>
constexpr void decide_groups_once(Table& p, std::size_t n, bool fuse, const ct_buffer<bool>& forced,
                                  const ct_buffer<bool>& kept_whole, const ct_buffer<bool>& unread,
                                  const ct_buffer<std::size_t>& use_first, const ct_buffer<std::size_t>& use_consumer) {
  p.group_count = 0;
  // Can the loop of the group rooted at r evaluate an elementwise node?
  auto loop_takes_elementwise = [&](std::size_t r) {
    const node_kind k = p.node[r].kind;
    return k == node_kind::elementwise || k == node_kind::reduce || k == node_kind::constant;
  };
  // Consumers come after their children in topological order, so walking
  // backwards every consumer's group is known when a node is decided.
  for (std::size_t ii = n; ii-- > 0;) {
    node_desc& d = p.node[ii];
    const kind_info k = kind_info_of(d.kind);
    p.duplicated[ii] = false;
    // Values no group computes (a constant that is an output is computed, into its buffer).
    if ((k.source || k.shares_buffer) && !(d.kind == node_kind::constant && d.output)) {
      p.materialized[ii] = d.kind != node_kind::constant;  // read as a slot (a random value: for its index)
      p.group[ii] = no_group;
      continue;
    }
    if (unread[ii]) {  // (computed by no group)
      p.materialized[ii] = false;
      p.group[ii] = no_group;
      continue;
    }
    bool root = !fuse || d.output || d.region_end || k.runs_alone || forced[ii];
    std::size_t target = no_group;
    bool several = false;  // read in more than one group (or by a duplicated node)
    for (std::size_t u = use_first[ii]; u < use_first[ii + 1] && !root; ++u) {
      const std::size_t c = use_consumer[u];
      if (unread[c]) continue;
      if (kind_info_of(p.node[c].kind).reads_buffers) root = true;
      else if (p.duplicated[c]) several = true;
      else if (target == no_group) target = p.group[c];
      else if (target != p.group[c]) several = true;
    }
    if (!root && several) {
      bool duplicate = d.kind == node_kind::elementwise && d.cheap && !kept_whole[ii];
      for (std::size_t u = use_first[ii]; u < use_first[ii + 1] && duplicate; ++u) {
        const std::size_t c = use_consumer[u];
        duplicate = unread[c] || p.duplicated[c] || loop_takes_elementwise(p.group[c]);  // (a duplicated reader: checked for it)
      }
      if (duplicate) {
        p.duplicated[ii] = true;
        p.materialized[ii] = false;
        p.group[ii] = no_group;
        continue;
      }
      root = true;
    }
    if (!root && target != no_group) {
      const node_desc& t = p.node[target];
      if (d.kind == node_kind::elementwise) {
        root = !loop_takes_elementwise(target);
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

template <std::size_t N, std::size_t E>
constexpr void decide_groups(plan_table<N, E>& p, bool fuse) {
  // Every node's consumers (one entry per use), in topological order.
  ct_buffer<std::size_t> use_first(N + 1), use_consumer(E + 1), fill(N + 1);
  for (std::size_t c = 0; c < N; ++c)
    for (std::size_t k = 0; k < p.node[c].nchild; ++k) ++use_first[p.child(c, k) + 1];
  for (std::size_t i = 0; i < N; ++i) use_first[i + 1] += use_first[i];
  for (std::size_t c = 0; c < N; ++c)
    for (std::size_t k = 0; k < p.node[c].nchild; ++k) {
      const std::size_t i = p.child(c, k);
      use_consumer[use_first[i] + fill[i]++] = c;
    }
  // unread: a node no output reaches, computed by no group: the root of a
  // step that does not compute it (graph_step::root_is_output) and what only
  // it reads.
  ct_buffer<bool> unread(N + 1);
  for (std::size_t i = N; i-- > 0;) {
    if (p.node[i].output || kind_info_of(p.node[i].kind).source) continue;
    unread[i] = true;
    for (std::size_t u = use_first[i]; u < use_first[i + 1]; ++u) unread[i] = unread[i] && unread[use_consumer[u]];
  }
  // forced: a buffer, for an inlined expression grown too large; kept_whole:
  // not duplicated, its duplicated expression grown too large.
  ct_buffer<bool> forced(N + 1), kept_whole(N + 1);
  // A node's inlined expression: its size (nodes, loads included) and the
  // buffers it loads.
  ct_buffer<std::size_t> ops(N + 1), loads(N + 1);
  for (bool changed = true; changed;) {
    decide_groups_once(p, N, fuse, forced, kept_whole, unread, use_first, use_consumer);
    changed = false;
    for (std::size_t i = 0; i < N; ++i) {
      const node_desc& d = p.node[i];
      ops[i] = 1;
      loads[i] = p.materialized[i];
      if (p.materialized[i] || unread[i] || d.kind != node_kind::elementwise) continue;  // read as one load (or not at all)
      for (std::size_t k = 0; k < d.nchild; ++k) {
        ops[i] += ops[p.child(i, k)];
        loads[i] += loads[p.child(i, k)];
      }
      const bool too_big = p.duplicated[i]
                               ? ops[i] > max_shared_inline_ops || loads[i] > max_duplicated_loads
                               : use_first[i + 1] - use_first[i] > 1 && ops[i] > max_shared_inline_ops;
      if (too_big) {
        (p.duplicated[i] ? kept_whole : forced)[i] = changed = true;
        ops[i] = loads[i] = 1;  // its readers in this pass: a load, as in the next
      }
    }
  }
}

// Calls f(i) for each node the loop of the group rooted at r evaluates, in
// topological order: r, the nodes inlined into it (row reductions too) and
// the duplicated nodes it reaches.
template <std::size_t N, std::size_t E, class F>
constexpr void for_each_member(const plan_table<N, E>& t, std::size_t r, F&& f) {
  ct_buffer<bool> reached(r + 1);
  reached[r] = true;
  auto member = [&](std::size_t i) {
    return reached[i] && (i == r || t.group[i] == r || t.duplicated[i]);
  };
  for (std::size_t i = r + 1; i-- > 0;)
    if (member(i))
      for (std::size_t k = 0; k < t.node[i].nchild; ++k) reached[t.child(i, k)] = true;
  for (std::size_t i = 0; i <= r; ++i)
    if (member(i)) f(i);
}

inline constexpr std::size_t no_region = static_cast<std::size_t>(-1);

// Each forward node's checkpoint region (program.hpp): the checkpoint every
// forward consumer of it leads to, the checkpoint itself, or the region of a
// consumer; no_region for a node that something outside the region also
// reads, a checkpoint, a leaf, an output and every backward node.
template <std::size_t N, std::size_t E>
constexpr void checkpoint_regions(const plan_table<N, E>& t, std::size_t forward_end, std::size_t* region) {
  ct_buffer<std::size_t> pass(N + 1);  // what node i passes to its children
  ct_buffer<bool> seen(N + 1);         // some forward consumer of node i was met
  ct_buffer<std::size_t> to(N + 1);    // the region all of them pass, or no_region
  for (std::size_t i = N; i-- > forward_end;) region[i] = no_region;
  // From the consumers down (consumers come later in topological order).
  for (std::size_t i = forward_end; i-- > 0;) {
    const node_desc& d = t.node[i];
    const bool outside = kind_info_of(d.kind).source || d.region_end || d.output;
    region[i] = outside || !seen[i] ? no_region : to[i];
    pass[i] = d.region_end ? i : region[i];
    for (std::size_t k = 0; k < d.nchild; ++k) {
      const std::size_t c = t.child(i, k);
      if (!seen[c]) to[c] = pass[i];
      else if (to[c] != pass[i]) to[c] = no_region;
      seen[c] = true;
    }
  }
}

// A group's side output: a cast of an elementwise group's root R that would
// root a group of its own, reading R's buffer and nothing else (R read by
// backward in f32, and its bf16 cast by a product: attention's
// probabilities), is written by R's loop as it writes R, from R's stored
// value, so the same bits: one pass over the data instead of two (f32
// written, then read back to write bf16). Only where the cast is computed
// when and where R is: the same part (forward or backward) and the same
// checkpoint region, so a recompute that rewrites R rewrites it too.
template <std::size_t N, std::size_t E>
constexpr void choose_side_outputs(plan_table<N, E>& p, bool fuse, std::size_t forward_end) {
  for (std::size_t i = 0; i < N; ++i) p.side[i] = no_node;
  if (!fuse) return;
  ct_buffer<std::size_t> region(N + 1);
  checkpoint_regions(p, forward_end, region.data());
  for (std::size_t c = 0; c < N; ++c) {
    const node_desc& d = p.node[c];
    if (!d.cast || !p.is_group_root(c) || d.output) continue;
    const std::size_t r = p.child(c, 0);
    const bool fits = p.is_group_root(r) && p.node[r].kind == node_kind::elementwise && !p.node[r].output &&
                      p.side[r] == no_node && p.same_dims(d.dims, p.node[r].dims) &&
                      (r < forward_end) == (c < forward_end) && region[r] == region[c];
    if (!fits) continue;
    p.side[r] = c;
    p.group[c] = r;
    --p.group_count;
  }
}

// A stack no stack_grad reads (in a step with no backward over it) keeps no
// layer's input for one: its buffer holds two values, which its layers
// write in turn, the last into the first (exec/stack_runner.hpp).
template <std::size_t N, std::size_t E>
constexpr void size_stack_buffers(plan_table<N, E>& p) {
  for (std::size_t i = 0; i < N; ++i)
    if (p.node[i].kind == node_kind::stack && p.node[i].layers > 2 && p.stack_grad_of(i) == N) p.node[i].layers = 2;
}

template <class Key>
consteval auto make_schedule() {
  auto p = describe_step<Key>();
  decide_groups(p, step_of<Key>::fuse);
  choose_side_outputs(p, step_of<Key>::fuse,
                      tl::index_of<typename step_of<Key>::forward_root, typename step_of<Key>::nodes>::value + 1);
  size_stack_buffers(p);
  return p;
}
}  // namespace detail

namespace detail {
// Computed once per step, keyed by the step's key (graph/step.hpp), so that
// the table code reads at run time is a variable with a short name.
template <class Key>
inline constexpr auto schedule_table = make_schedule<Key>();
}  // namespace detail

// The schedule of a compiled step (a graph_step, or its key).
template <class S>
struct schedule {
  using nodes = typename step_of<S>::nodes;
  static constexpr std::size_t size = nodes::size;
  static constexpr const auto& table = detail::schedule_table<step_key_t<step_of<S>>>;
  static constexpr std::size_t group_count = table.group_count;

  // The kinds of the groups, in execution order.
  static constexpr auto group_kinds = [] {
    std::array<group_kind, group_count> kinds{};
    std::size_t g = 0;
    for (std::size_t i = 0; i < size; ++i)
      if (table.group[i] == i) kinds[g++] = detail::kind_info_of(table.node[i].kind).group;
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
