// Compile-fail pair: an evaluation step run on the training step's store. A
// store is laid out for the step it was made for, and used to run that step
// whatever step was called: the "evaluation" trained. The corrected twin gives
// the evaluation step its own store.
// expect-error: ctg: this step does not run on this store
// expect-error-count: 1
#include <ctg/ctg.hpp>
#include <vector>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 8>;
using W = ctg::param<"w", ctg::f32, 8, 4>;

int main() {
  auto out = ctg::matmul(X{}, W{});
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(out)), ctg::wrt<W>);
  auto eval = ctg::forward(ctg::sum(out));
  ctg::cpu::device dev;
  auto train_store = ctg::make_store(dev, train);
  std::vector<float> x(2 * 8, 0.5f);
  train(train_store, ctg::feed<X>(x, 2));
#ifndef CTG_CORRECTED
  float e = eval(train_store, ctg::feed<X>(x, 2));  // the mistake
#else
  auto eval_store = ctg::make_store(dev, eval);
  float e = eval(eval_store, ctg::feed<X>(x, 2));
#endif
  (void)e;
}
