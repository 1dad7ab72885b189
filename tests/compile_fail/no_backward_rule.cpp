// Compile-fail pair: a new elementwise op added the way a contributor would,
// next to the others (an element functor that says its gradient has a rule),
// but without writing the rule in graph/rules.hpp. Differentiating through it
// must not compile: a silent identity gradient gave sum(w^3) the gradient
// 1 1 1 at w = 1 2 3 (3 12 27 is right). The corrected twin declares the rule
// missing on purpose (grad::none: the op then stops the gradient, and the
// loss reaches w through the square term only).
// expect-error: ctg: no backward rule for this op
// expect-error-count: 1
#include <ctg/ctg.hpp>

namespace ctg::op {
struct cube {
#ifndef CTG_CORRECTED
  static constexpr grad gradient = grad::rule;
#else
  static constexpr grad gradient = grad::none;
#endif
  template <class C>
  CTG_HD static C apply(C x) { return x * x * x; }
};
}  // namespace ctg::op

using W = ctg::param<"w", ctg::f32, 3>;

int main() {
  auto loss = ctg::sum(ctg::detail::make_ew<ctg::op::cube, W>() + ctg::square(W{}));
  auto step = ctg::value_and_grad(loss);
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, step);
  (void)store;
}
