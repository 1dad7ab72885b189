// Item 10 of issue 15: one store holds one training step's parameters,
// gradients and optimizer-facing state; the other steps given to make_store
// are forward steps. A second training step must not compile. The corrected
// twin evaluates the second loss with ctg::forward.
// expect-error: ctg: a store's other steps are forward steps
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;

int main() {
  auto loss = ctg::mean(ctg::square(ctg::matmul(X{}, W{})));
  auto train = ctg::value_and_grad(loss);
#ifndef CTG_CORRECTED
  auto other = ctg::value_and_grad(ctg::mean(ctg::abs(ctg::matmul(X{}, W{}))));  // the mistake
#else
  auto other = ctg::forward(ctg::mean(ctg::abs(ctg::matmul(X{}, W{}))));
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, other);
  (void)store;
}
