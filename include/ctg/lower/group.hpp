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

// Step: a graph_step or its key (the runtime uses the key: short names).
template <class Step, std::size_t Root>
struct group_info {
  using sched = schedule<Step>;
  static constexpr std::size_t n = sched::size;
  static constexpr const auto& t = sched::table;

  struct tables {
    std::size_t input[n]{};       // node index of each input buffer
    std::size_t input_slot[n]{};  // node index -> its input slot
    std::size_t ninputs = 0;
    std::size_t reduction[n]{};   // inlined row reductions, in topological order
    std::size_t reduction_slot[n]{};
    std::size_t nreductions = 0;
    bool index_aware = false;  // some node reads its position: the loop must run by rows
  };
  static constexpr tables info = [] {
    tables r;
    bool seen[n]{};
    for (std::size_t i = 0; i <= Root; ++i) {
      if (t.group[i] != Root) continue;
      r.index_aware = r.index_aware || t.node[i].index_aware;
      if (i != Root && t.node[i].kind == node_kind::reduce) {
        r.reduction_slot[i] = r.nreductions;
        r.reduction[r.nreductions++] = i;
      }
      for (std::size_t k = 0; k < t.node[i].nchild; ++k) {
        const std::size_t c = t.child(i, k);
        if (t.materialized[c] && !seen[c]) {
          seen[c] = true;
          r.input_slot[c] = r.ninputs;
          r.input[r.ninputs++] = c;
        }
      }
    }
    return r;
  }();
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

}  // namespace ctg::detail
