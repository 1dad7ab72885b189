#pragma once
// The program of a step: the order its fusion groups run in, which forward
// values are kept for backward and which are recomputed, and when each buffer
// is alive. Computed once per step type, as a constexpr table, from the
// schedule (schedule.hpp); every backend runs this program.
//
// A step has a forward part (the nodes its forward root reads, see
// graph_step) and a backward part (the rest). The program runs every forward
// group, then every backward group. A forward node inside a checkpoint region
// (see ctg::checkpoint) is not kept: right before the first backward group
// that reads a value of the region, the region's groups that backward needs
// run again (those writing what it reads, and what they read in the region),
// the same code on the same kept inputs, so the recomputed values are
// bitwise the forward's. Recompute never writes state (FP8 amax, RNG step): a position
// flagged `recompute` only rebuilds values.
//
// A node's region is the checkpoint every forward consumer of it leads to:
// the checkpoint itself, or the region of a consumer. A node that something
// outside the region also reads, a checkpoint, a leaf and an output belong to
// no region.
//
// Liveness: each buffer lives from the position that writes it to the last
// position that reads it (outputs, and the buffers output views are in: to
// the end); a recomputed buffer has a
// second life from its recompute on. Buffers whose lives do not overlap
// share memory (the backend's allocator).
#include <ctg/lower/schedule.hpp>

namespace ctg {
namespace detail {

// A buffer's life, in program positions, inclusive.
struct life {
  std::size_t begin = 0, end = 0;
  bool present = false;
};

template <std::size_t N>
struct program_table {
  static constexpr std::size_t max_len = 2 * N + 1;
  std::size_t len = 0;              // positions
  std::size_t backward_begin = 0;   // the first position of the backward part
  std::size_t forward_end = 0;      // nodes [0, forward_end) are the forward part
  std::size_t root[max_len]{};      // the group each position runs
  bool recompute[max_len]{};        // a forward group run again in backward
  std::size_t enter_region[max_len]{};  // the region whose recompute starts here, or no_region
  std::size_t region[N]{};          // the checkpoint node whose region holds node i, or no_region
  bool owns[N]{};                   // node i has a buffer of its own (not a leaf, not a view)
  std::size_t base[N]{};            // the node whose buffer node i's value is in (a view's: its base's)
  life value[N]{};                  // node i's buffer, from the group that writes it to its last reader
  life recomputed[N]{};             // the same for the value a recompute writes again
  bool kept[N]{};                   // a forward buffer alive when the backward part begins
  // A forward group backward reads, or one such reads in turn: what a
  // recompute of the whole forward part (a stack block's) runs.
  bool backward_reads[N]{};
  std::size_t region_count = 0;
};

// Calls f(b) for each buffer (by owner node) the group rooted at r reads.
template <std::size_t N, std::size_t E, class F>
constexpr void for_each_read(const plan_table<N, E>& t, const program_table<N>& p, std::size_t r, F&& f) {
  for_each_member(t, r, [&](std::size_t n) {
    auto read = [&](std::size_t c) {
      if (t.materialized[c] && p.owns[p.base[c]]) f(p.base[c]);
    };
    for (std::size_t k = 0; k < t.node[n].nchild; ++k) read(t.child(n, k));
    // A stack's backward also reads the stack's input (layer 0's input).
    if (t.node[n].kind == node_kind::stack_grad) read(t.child(t.child(n, 0), 0));
  });
}

// Marks (by group root) the forward groups that write a buffer the backward
// groups read, and those that write what a marked group reads in turn, each
// time only for buffers `follows` accepts (the groups a recompute reruns,
// the groups a stack block's recompute runs).
template <std::size_t N, std::size_t E, class Follows>
constexpr void mark_backward_writers(const plan_table<N, E>& t, const program_table<N>& p, bool* marked,
                                     Follows follows) {
  auto mark = [&](std::size_t b) {
    if (follows(b)) marked[t.group[b]] = true;
  };
  for (std::size_t r = p.forward_end; r < N; ++r)
    if (t.group[r] == r) for_each_read(t, p, r, mark);
  for (std::size_t g = p.forward_end; g-- > 0;)  // (readers before the groups they read)
    if (t.group[g] == g && marked[g] && follows(g)) for_each_read(t, p, g, mark);
}

// root_is_output: graph_step::root_is_output (false for a stack block's
// backward step, whose forward root the stack runner copies out when the
// forward part ends).
template <std::size_t N, std::size_t E>
constexpr program_table<N> make_program(const plan_table<N, E>& t, std::size_t forward_root, bool root_is_output) {
  program_table<N> p;
  p.forward_end = forward_root + 1;
  for (std::size_t i = 0; i < N; ++i) {
    const kind_info k = kind_info_of(t.node[i].kind);
    p.owns[i] = !k.stored && !k.shares_buffer && !(k.inlined && t.group[i] != i) &&
                (t.materialized[i] || t.group[i] == i);
    p.base[i] = k.shares_buffer ? p.base[t.child(i, 0)] : i;
  }

  checkpoint_regions(t, p.forward_end, p.region);

  // A region's recompute runs the groups that write what backward reads of
  // it, and the groups of the region those read in turn: not one whose
  // value only forward read (a product whose output only the kept
  // checkpoint copied). A value's writer is its group (a side output's: the
  // group of the root it is cast from).
  ct_buffer<bool> rerun(N + 1);
  mark_backward_writers(t, p, rerun.data(), [&](std::size_t b) { return p.region[b] != no_region; });

  // The forward groups, then the backward ones, each preceded by the
  // recompute of the regions it reads that are not recomputed yet.
  auto append_group = [&](std::size_t r, bool again) {
    p.root[p.len] = r;
    p.recompute[p.len] = again;
    p.enter_region[p.len] = no_region;
    ++p.len;
  };
  for (std::size_t r = 0; r < p.forward_end; ++r)
    if (t.group[r] == r) append_group(r, false);
  p.backward_begin = p.len;
  ct_buffer<bool> done(N + 1);
  for (std::size_t r = p.forward_end; r < N; ++r) {
    if (t.group[r] != r) continue;
    for_each_read(t, p, r, [&](std::size_t b) {
      const std::size_t reg = p.region[b];
      if (reg == no_region || done[reg]) return;
      done[reg] = true;
      ++p.region_count;
      const std::size_t first = p.len;
      for (std::size_t g = 0; g < p.forward_end; ++g)
        if (t.group[g] == g && p.region[g] == reg && rerun[g]) append_group(g, true);
      if (p.len > first) p.enter_region[first] = reg;
    });
    append_group(r, false);
  }

  // The forward groups the backward part reads, and those they read in turn
  // (the groups its recomputes rerun among them).
  mark_backward_writers(t, p, p.backward_reads,
                        [&](std::size_t b) { return b < p.forward_end && t.group[b] != no_group; });

  // Lives. A read after a recompute reads the recomputed value.
  for (std::size_t i = 0; i < N; ++i) p.value[i].present = p.owns[i];
  // Outputs live to the end, and so does the buffer of an output that is a
  // view; but a stack block's forward root lives to the end of the forward
  // part only (the runner copies it into the stack's buffer then), unless
  // backward reads it: so each layer's kept values hold no copy of it.
  for (std::size_t i = 0; i < N; ++i)
    if ((t.node[i].kind == node_kind::runtime_scalar || t.node[i].output) && p.owns[p.base[i]]) {
      const bool handed_over = !root_is_output && i == forward_root && p.backward_begin > 0;
      p.value[p.base[i]].end = handed_over ? p.backward_begin - 1 : p.len;
    }
  for (std::size_t q = 0; q < p.len; ++q) {
    const std::size_t r = p.root[q];
    for_each_read(t, p, r, [&](std::size_t b) {
      life& l = p.recomputed[b].present ? p.recomputed[b] : p.value[b];
      if (l.end < q) l.end = q;
    });
    // The group writes its root and its side output (schedule.hpp) here.
    for (const std::size_t written : {r, t.side[r]}) {
      if (written == no_node) continue;
      life& w = p.recompute[q] ? p.recomputed[written] : p.value[written];
      w.present = true;
      w.begin = q;
      if (w.end < q) w.end = q;
    }
  }
  for (std::size_t i = 0; i < p.forward_end; ++i)
    p.kept[i] = p.owns[i] && p.value[i].end >= p.backward_begin && p.backward_begin < p.len;
  return p;
}
}  // namespace detail

namespace detail {
template <class Key>
inline constexpr program_table<step_of<Key>::nodes::size> program_of =
    make_program(schedule_table<Key>, tl::index_of<typename step_of<Key>::forward_root, typename step_of<Key>::nodes>::value,
                 step_of<Key>::root_is_output);
}  // namespace detail

// The program of a compiled step (a graph_step, or its key).
template <class S>
struct program {
  static constexpr std::size_t size = step_of<S>::nodes::size;
  static constexpr const auto& table = detail::program_of<step_key_t<step_of<S>>>;
};

}  // namespace ctg
