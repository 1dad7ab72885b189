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
