// An optimizer updates the store it was made for: opt.step on the store of
// another step must not compile, with one ctg: error (it was a list of the
// step overloads that did not match). The corrected twin steps its own store.
// expect-error: ctg: this optimizer belongs to a store of another step
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <ctg/optim/optim.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 4>;
using W = ctg::param<"w", ctg::f32, 4, 2>;
using V = ctg::param<"v", ctg::f32, 4, 2>;

int main() {
  auto first = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, W{})));
  auto second = ctg::value_and_grad(ctg::sum(ctg::matmul(X{}, V{})));
  ctg::cpu::device dev;
  auto a = ctg::make_store(dev, first);
  auto b = ctg::make_store(dev, second);
  ctg::optim::adamw opt(a);
#ifndef CTG_CORRECTED
  opt.step(b);  // the mistake
#else
  opt.step(a);
#endif
  (void)b;
}
