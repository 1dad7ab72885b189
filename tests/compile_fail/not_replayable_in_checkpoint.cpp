// Compile-fail pair: a node that changes state as it runs (here a user's own
// running-statistics node, which declares ctg::replay::none) cannot sit in a
// checkpoint region: the recompute in backward would not see what the forward
// saw. The corrected twin keeps it outside the region.
// expect-error: ctg: not replayable inside checkpoint
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;

// The value of X, while (in the user's backend) updating a running mean.
template <class Xe>
struct running_stat_node {
  using ctg_node = void;
  using dtype = typename Xe::dtype;
  using dims = typename Xe::dims;
  using children = ctg::tl::list<Xe>;
  using op = ctg::op::no_grad;
  static constexpr ctg::node_kind kind = ctg::node_kind::elementwise;
  static constexpr bool requires_grad = false;
  static constexpr ctg::replay state_replay = ctg::replay::none;
};

int main() {
  auto stat = running_stat_node<X>{};
  static_assert(!ctg::replayable_below_v<decltype(stat)>);
#ifndef CTG_CORRECTED
  auto h = ctg::checkpoint(ctg::silu(ctg::matmul(stat, W{})));
#else
  auto h = ctg::silu(ctg::matmul(ctg::checkpoint(X{}), W{})) + ctg::matmul(stat, W{});
#endif
  auto step = ctg::value_and_grad(ctg::mean(h));
  (void)step;
}
