#pragma once
// What one fusion group reads (its input buffers and its inlined row
// reductions) and the shape of its loop, as constexpr tables derived from the
// schedule. Every backend and every test reads the loop shape from here.
#include <ctg/lower/schedule.hpp>

namespace ctg {

// The shape of a fused group's loop, decided once, at compile time:
enum class loop_kind {
  flat,         // one pass over all elements: every input has the output's shape and moves with it
  rows,         // rows of the last dim: broadcast inputs, inlined row reductions or positions
  row_reduce,   // rows, the root reduces the last axis: one value per row
  axis_reduce,  // the root reduces other axes: an f64 accumulator per output element
};

}  // namespace ctg

namespace ctg::detail {

// Within a group's loop, along the innermost dim, does buffer node I advance
// (stride 1) or stay (stride 0, broadcast)? Known statically: a dim that is
// not a static 1 never broadcasts.
template <class Node>
inline constexpr bool advances_inner = Node::dims::rank > 0 && Node::dims::dims[Node::dims::rank - 1] != 1;

// At most this many input buffers and inlined row reductions per fused group
// (the tables below are this size, not the step's: constexpr tables cost
// compile time by the element).
inline constexpr std::size_t max_group_reads = 64;

// What one group reads: its input buffers in slot order (a node's slot is
// where the body loads it from), and the row reductions inlined into it.
struct group_reads_t {
  std::size_t input[max_group_reads]{};      // node index of each input buffer
  std::size_t ninputs = 0;
  std::size_t reduction[max_group_reads]{};  // inlined row reductions, in topological order
  std::size_t nreductions = 0;
  bool index_aware = false;  // some node reads its position: the loop must run by rows

  constexpr std::size_t input_slot(std::size_t node) const { return find(input, ninputs, node); }
  constexpr std::size_t reduction_slot(std::size_t node) const { return find(reduction, nreductions, node); }

 private:
  static constexpr std::size_t find(const std::size_t* a, std::size_t n, std::size_t node) {
    std::size_t k = 0;
    while (k < n && a[k] != node) ++k;
    return k;
  }
};
template <std::size_t N, std::size_t E>
constexpr group_reads_t group_reads(const plan_table<N, E>& t, std::size_t root) {
  group_reads_t r;
  for_each_member(t, root, [&](std::size_t i) {
    r.index_aware = r.index_aware || t.node[i].index_aware;
    if (i != root && t.node[i].kind == node_kind::reduce) {
      if (r.nreductions == max_group_reads) throw "ctg: internal: a fused group inlines more than 64 row reductions";
      r.reduction[r.nreductions++] = i;
    }
    for (std::size_t k = 0; k < t.node[i].nchild; ++k) {
      const std::size_t c = t.child(i, k);
      if (t.materialized[c] && r.input_slot(c) == r.ninputs) {
        if (r.ninputs == max_group_reads) throw "ctg: internal: a fused group reads more than 64 buffers";
        r.input[r.ninputs++] = c;
      }
    }
  });
  return r;
}

// Step: a graph_step or its key (the runtime uses the key: short names).
template <class Step, std::size_t Root>
struct group_info {
  using sched = schedule<Step>;
  static constexpr std::size_t n = sched::size;
  static constexpr const auto& t = sched::table;
  static constexpr group_reads_t info = group_reads(t, Root);
  static constexpr std::size_t ninputs = info.ninputs;
  static constexpr std::size_t nreductions = info.nreductions;
  static constexpr bool index_aware = info.index_aware;
  // The node whose shape the loop runs over.
  static constexpr std::size_t iteration_node = t.node[Root].kind == node_kind::reduce ? t.child(Root, 0) : Root;

  // Flat needs every input to have the loop's static dims (equal static dims,
  // dyn ones included, are equal at run time: a dyn dim never stretches) and
  // to advance along the row (a last dim of static 1 reads one value).
  static constexpr loop_kind loop = [] {
    if (t.node[Root].kind == node_kind::reduce)
      return t.node[Root].row_reduction ? loop_kind::row_reduce : loop_kind::axis_reduce;
    if (info.nreductions > 0 || info.index_aware) return loop_kind::rows;
    bool flat = true;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      using nodes = typename sched::nodes;
      ((flat = flat && advances_inner<tl::at_t<info.input[K], nodes>> &&
               t.same_dims(t.node[info.input[K]].dims, t.node[iteration_node].dims)),
       ...);
    }(std::make_index_sequence<info.ninputs>{});
    return flat ? loop_kind::flat : loop_kind::rows;
  }();
};


// The input buffers of every group of a step, in one array (group_call::input
// points into it): computed once per step from the schedule, no types.
template <std::size_t N, std::size_t E>
struct step_inputs_t {
  std::size_t node[E + 1]{};
  std::size_t first[N + 1]{};  // group root r's inputs: node[first[r] ..]
};
template <std::size_t N, std::size_t E>
constexpr step_inputs_t<N, E> step_inputs(const plan_table<N, E>& t) {
  step_inputs_t<N, E> a;
  std::size_t k = 0;
  for (std::size_t r = 0; r < N; ++r) {
    a.first[r] = k;
    if (!t.is_group_root(r) || kind_info_of(t.node[r].kind).runs_alone) continue;
    const group_reads_t g = group_reads(t, r);
    for (std::size_t i = 0; i < g.ninputs; ++i) a.node[k++] = g.input[i];
  }
  a.first[N] = k;
  return a;
}
template <class Key>
inline constexpr auto step_inputs_of = step_inputs(schedule_table<Key>);

}  // namespace ctg::detail

namespace ctg {

// What a group runner reads of its group at run time: node indices (and where
// the group's input list is). The runner itself is instantiated on name-free
// types (lower/kernel_expr.hpp), shared by every group that computes the
// same thing in any step, so its code and symbol names never spell a graph.
struct group_call {
  std::size_t root = 0;                // the node the group writes
  std::size_t side = detail::no_node;  // a fused group: its side output (a cast of the root), or no_node
  std::size_t iteration = 0;           // a fused group: the node whose shape its loop runs over
  const std::size_t* input = nullptr;  // a fused group: the node of each input slot
  std::size_t ninputs = 0;             // a fused group: how many (input[0 .. ninputs-1])
  std::size_t child[6]{};              // a group that runs alone: its root's first children
  std::size_t fp8_slot = 0;            // a quantize with delayed scaling: where its amax goes
};

namespace detail {
// The dtype of child K of node R in step Key (void when it has none).
template <class Key, std::size_t R, std::size_t K>
consteval auto child_dtype_of() {
  constexpr const auto& t = schedule<Key>::table;
  if constexpr (K < t.node[R].nchild)
    return std::type_identity<typename tl::at_t<t.child(R, K), typename step_of<Key>::nodes>::dtype>{};
  else return std::type_identity<void>{};
}
template <class Key, std::size_t R, std::size_t K>
using child_dtype_t = typename decltype(child_dtype_of<Key, R, K>())::type;
}  // namespace detail

// The call record of the group rooted at R in step Key.
template <class Key, std::size_t R>
consteval group_call group_call_of() {
  static_assert(std::is_same_v<Key, step_key_t<step_of<Key>>>, "ctg: internal: group_call_of takes a step's key");
  constexpr const auto& t = schedule<Key>::table;
  group_call c;
  c.root = R;
  c.iteration = t.node[R].kind == node_kind::reduce ? t.child(R, 0) : R;
  c.side = t.side[R];
  c.input = &detail::step_inputs_of<Key>.node[detail::step_inputs_of<Key>.first[R]];
  c.ninputs = detail::step_inputs_of<Key>.first[R + 1] - detail::step_inputs_of<Key>.first[R];
  for (std::size_t k = 0; k < 6 && k < t.node[R].nchild; ++k) c.child[k] = t.child(R, k);
  for (std::size_t i = 0; i < R; ++i) c.fp8_slot += t.node[i].kind == node_kind::quantize && t.node[i].delayed;
  return c;
}

}  // namespace ctg
