// Item 10 of issue 15: a store shared by a training step and its evaluation
// steps holds the training step's leaves. An evaluation step that reads a
// leaf the training step does not have must not compile. The corrected twin
// reads only the trained leaves.
// expect-error: ctg: a step sharing a training store reads a leaf the training step does not have
// expect-error-count: 1
#include <ctg/ctg.hpp>

using X = ctg::input<"x", ctg::f32, ctg::dyn, 16>;
using W = ctg::param<"w", ctg::f32, 16, 16>;
using Head = ctg::frozen<"head", ctg::f32, 16, 4>;

int main() {
  auto train = ctg::value_and_grad(ctg::mean(ctg::square(ctg::matmul(X{}, W{}))));
#ifndef CTG_CORRECTED
  auto eval = ctg::forward(ctg::matmul(ctg::matmul(X{}, W{}), Head{}));  // the mistake: "head" is not trained here
#else
  auto eval = ctg::forward(ctg::matmul(X{}, W{}));
#endif
  ctg::cpu::device dev;
  auto store = ctg::make_store(dev, train, eval);
  (void)store;
}
