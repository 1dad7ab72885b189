#pragma once
// Where a step's time goes, group by group: store.profile_groups(true)
// times every group of every run (a stack's block's groups once per layer,
// under their stack), with the bytes it moved and, for a product, its
// floating-point operations; store.group_times() reads the sums, and
// io::group_profile_text prints them beside each group's nodes. Each group
// is timed on its own: a GPU's runs are launched one by one (no graph
// replay) between two events, so a profiled run takes longer than a plain
// one, and what matters is each group's share and its bytes per second.
#include <cstddef>
#include <span>
#include <vector>

#include <ctg/exec/bindings.hpp>

namespace ctg {

// The step a group is in: the store's own (depth 0), or a stack's block,
// named by the stack nodes from the store's step in (a stack inside a
// stacked block: the outer stack, then the inner one, in the outer block).
struct block_path {
  std::vector<std::size_t> stack;
  bool operator==(const block_path&) const = default;
  std::size_t depth() const { return stack.size(); }
  // The block of stack node s of this path's step.
  block_path in(std::size_t s) const {
    block_path p = *this;
    p.stack.push_back(s);
    return p;
  }
};

// One group's sums over the profiled runs.
struct group_timing {
  static constexpr std::size_t own_step = static_cast<std::size_t>(-1);
  std::size_t stack = own_step;  // the stack node whose block holds the group (own_step: the store's step)
  block_path block{};            // that block's place, from the store's step (nested stacks: several)
  std::size_t root = 0;          // the node the group writes (in its step: the block's, for a block)
  std::size_t calls = 0;
  double seconds = 0;
  // Per call, summed: its input buffers read once and its output written
  // once (a buffer read by broadcast, or gathered from, counts whole), and
  // a product's multiply-adds times 2.
  double bytes = 0;
  double flops = 0;
};

// What one run of a group moved and computed, as group_timing counts them.
// (Of the step's table's view: one copy of this code for every step.)
struct group_work {
  double bytes = 0, flops = 0;
};
inline group_work group_work_of(const detail::table_view& t, const group_call& c, const bindings_view& v) {
  const detail::node_desc& d = t.node[c.root];
  auto bytes = [&](std::size_t i) {
    return static_cast<double>(v.shape[i].numel()) * static_cast<double>(t.node[i].elem_bytes);
  };
  group_work w;
  w.bytes = bytes(c.root) + (c.side != detail::no_node ? bytes(c.side) : 0.0);
  if (d.kind == node_kind::attention) {
    // Every operand read once, every value written once; the products its
    // kernels compute, each over the causal half of [T, T] per head: the
    // lse q k^T; the output q k^T and p v; the gradients q k^T and g v^T
    // twice (for dq, then for dk and dv) and ds k, ds^T q, p^T g.
    for (std::size_t k = 0; k < d.nchild; ++k) w.bytes += bytes(c.child[k]);
    w.bytes += bytes(c.root) * static_cast<double>(d.layers - 1);
    const rt_shape& lse = v.shape[d.nchild >= 4 ? c.child[3] : c.root];  // [..., T, 1] or [..., 1, T]
    const double tokens = static_cast<double>(lse.d[lse.rank - 2] * lse.d[lse.rank - 1]);
    const double products = d.nchild <= 2 ? 1 : d.nchild <= 4 ? 2 : 7;
    w.flops = products * static_cast<double>(v.shape[c.child[0]].numel()) * (tokens + 1);
  } else if (detail::kind_info_of(d.kind).runs_alone) {
    for (std::size_t k = 0; k < d.nchild && k < 2; ++k) w.bytes += bytes(c.child[k]);
    if (d.kind == node_kind::matmul || d.kind == node_kind::fp8_matmul) {
      const rt_shape &a = v.shape[c.child[0]], &b = v.shape[c.child[1]];
      // (Summed over batches: the result holds one product, of every batch.)
      const double products = d.sum_batches ? static_cast<double>(product_batch_dims(a, b).numel()) : 1.0;
      w.flops = 2.0 * products * static_cast<double>(v.shape[c.root].numel()) *
                static_cast<double>(a.d[a.rank - (d.transpose_a ? 2 : 1)]);
    }
  } else {
    // (A dropout mask is an input for its index only: drawn in the loop, never read.)
    for (std::size_t j = 0; j < c.ninputs; ++j)
      if (t.node[c.input[j]].kind != node_kind::random) w.bytes += bytes(c.input[j]);
  }
  return w;
}

// Clock: a backend's group_clock (exec/cpu/store.hpp, exec/cuda/group_clock.cuh):
//   mark now(workspace&)          a point in the workspace's order of work
//   double seconds(mark, mark)    between two marks (waits for the second)
//   void reuse()                  every mark handed out so far is settled
template <class Clock>
class group_profile {
 public:
  using mark = typename Clock::mark;

  template <class Workspace>
  mark now(Workspace& ws) {
    return clock_.now(ws);
  }
  // A group ran between two marks; its time is read once the run succeeds.
  void ran(const block_path& block, std::size_t root, double bytes, double flops, mark from, mark to) {
    pending_.push_back({block, root, bytes, flops, from, to});
  }
  // A run starts: what a failed run left is dropped.
  void start_run() {
    pending_.clear();
    clock_.reuse();
  }
  // A run succeeded: its groups' times into the sums (in the order groups
  // first ran).
  void settle() {
    for (const pending_group& p : pending_) {
      group_timing* t = nullptr;
      for (group_timing& e : sums_)
        if (e.block == p.block && e.root == p.root) t = &e;
      if (!t) {
        const std::size_t stack = p.block.depth() ? p.block.stack.back() : group_timing::own_step;
        t = &sums_.emplace_back(group_timing{stack, p.block, p.root});
      }
      ++t->calls;
      t->seconds += clock_.seconds(p.from, p.to);
      t->bytes += p.bytes;
      t->flops += p.flops;
    }
    start_run();
  }
  std::span<const group_timing> sums() const { return sums_; }

 private:
  struct pending_group {
    block_path block;
    std::size_t root;
    double bytes, flops;
    mark from, to;
  };
  Clock clock_;
  std::vector<pending_group> pending_;
  std::vector<group_timing> sums_;
};

}  // namespace ctg
